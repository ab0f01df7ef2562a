"""CRM extraction: trace records once, keep everything the fits and analyses need.

A CRM folder (``mnemoscope crm extract --out DIR``) holds::

    DIR/pairs/        paired traces (hidden states of both paths unless hidden=False, KL series,
                      both answers)
    DIR/extras/       CRMExtras per record: logit-lens KL, attention flow, static state, token stats
                      (only when one of them is asked)
    DIR/embeddings/   Level-1 sentence embeddings of both answers, one .npz per embedder
    DIR/extract.json  settings, model identity, counts

Every stage is resumable (records already written are skipped) and writes per batch.
Fitting and evaluation (:mod:`mnemoscope.pipelines.crm.eval`) read the folder and never need
the model, except the causal analyses, which re-run forwards under interventions.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from tqdm.auto import tqdm

from mnemoscope.data.records import Record, RecordError
from mnemoscope.divergence import kl_logprobs
from mnemoscope.errors import InputError, TraceStoreError
from mnemoscope.features.crm import CRMData, crm_data_from_pairs
from mnemoscope.features.tokens import TokenStats
from mnemoscope.io import atomic_savez, atomic_write_json
from mnemoscope.models.loader import LoadedModel
from mnemoscope.trace.interventions import logit_lens
from mnemoscope.trace.pair import PairConfig
from mnemoscope.trace.pipeline import Decode, RunSummary, run_pairs
from mnemoscope.trace.store import TraceWriter, load_traces, stored_ids
from mnemoscope.trace.templates import PromptBuilder
from mnemoscope.trace.tracer import Capture, Tracer, batch_ranges
from mnemoscope.trace.types import CRMExtras, PairTrace

__all__ = ["CRMExtractConfig", "CRMFolder", "extract", "load_folder", "resolve_task", "run_embeddings"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CRMExtractConfig:
    """What ``crm extract`` computes.

    Attributes:
        template: CRM prompt template A-D (appendix D.1).
        task: ``continuation`` (the paper's probe), ``plain``, ``summarization``, ``qa``.
        chat: wrap prompts in the model's chat template; ``"auto"`` (default) = when the
            tokenizer has one. Instruct models need it: SmolLM2-135M-Instruct without its
            chat template answers "Answer:" with an immediate end-of-turn (T = 1).
        max_new_tokens: T generated positions (the paper: 32 for continuation).
        batch_size: prompts per forward.
        attention_flow: run one extra eager-attention forward per record for the
            attention-flow baseline.
        static: trace each context alone (static MIA + likelihood baselines).
        logit_lens: compute the logit-lens KL per layer.
        gradient_norm: one forward + backward per record for the gradient-norm baseline:
            ``||d log p(answer | c, q) / d h_l||`` at the last prompt token, every layer
            (stored apart, in ``grad/``).
        embedder: Level-1 sentence encoder spec (``"default"`` = packaged all-MiniLM-L6-v2;
            ``"none"`` skips Level 1).
        stop: stop sequences that end a generated answer (:mod:`mnemoscope.trace.templates`;
            an audit profile's calibration sets them, CRM experiments keep none).
        hidden: capture the last-prompt-token hidden states of both paths (what CRM is made
            of; an audit profile calibrated without CRM needs none, and leaves them out).
        decode: ``"teacher-forced"`` (generate, then one full forward per path) or
            ``"lockstep"`` (both paths and the closed-book answer decoded in one padded batch,
            finished rows leaving it: :mod:`mnemoscope.trace.lockstep`, what the calibration
            uses); the traces agree to float tolerance, so it is not part of the folder's
            settings.
    """

    template: str = "A"
    task: Literal["continuation", "plain", "summarization", "qa"] = "continuation"
    chat: bool | Literal["auto"] = "auto"
    max_new_tokens: int = 32
    batch_size: int = 8
    attention_flow: bool = True
    static: bool = True
    logit_lens: bool = True
    gradient_norm: bool = True
    embedder: str = "default"
    stop: tuple[str, ...] = ()
    hidden: bool = True
    decode: Decode = "teacher-forced"

    def resolved(self, lm: LoadedModel) -> CRMExtractConfig:
        """The config with ``chat="auto"`` decided for this model."""
        if self.chat != "auto":
            return self
        return replace(self, chat=bool(lm.info.has_chat_template))

    def pair_config(self) -> PairConfig:
        if self.chat == "auto":
            raise InputError("resolve chat='auto' against a model first (config.resolved(lm))")
        return PairConfig(
            builder=PromptBuilder(
                template=self.template, task=self.task, chat=bool(self.chat), stop=tuple(self.stop)
            ),
            max_new_tokens=self.max_new_tokens,
            answer_without=True,
            hidden=self.hidden,
        )

    @property
    def any_extras(self) -> bool:
        """Whether the per-record extras stage has anything to compute."""
        return self.attention_flow or self.static or self.logit_lens

    def extras_settings(self) -> dict[str, Any]:
        # the pair settings are part of it: extras of other prompts must never be resumed
        return {
            "attention_flow": self.attention_flow,
            "static": self.static,
            "logit_lens": self.logit_lens,
            "pairs": self.pair_config().to_dict(),
        }


def resolve_task(records: Sequence[Record], task: str) -> str:
    """``"auto"``: continuation when every record's query was defaulted, plain when none was."""
    if task != "auto":
        return task
    defaulted = {bool(getattr(r, "query_defaulted", False)) for r in records}
    if defaulted == {True}:
        return "continuation"
    if defaulted == {False} or not defaulted:
        return "plain"
    raise InputError(
        "some records have a query and some do not; pass --task continuation or --task plain explicitly",
        field="query",
    )


@dataclass(frozen=True)
class CRMFolder:
    """What :func:`load_folder` returns: the data for the estimators plus the raw traces."""

    data: CRMData
    pairs: list[PairTrace]
    token_stats: list[TokenStats] | None
    meta: dict[str, Any]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:80]


def _context_span(tokenizer: Any, prompt: str, context: str, ids: list[int]) -> tuple[int, int]:
    """Token index range ``[start, end)`` of the context inside the tokenized prompt."""
    start = prompt.find(context) if context else -1
    if start < 0:
        return 0, 0
    end = start + len(context)
    try:
        enc = tokenizer(prompt, add_special_tokens=True, return_offsets_mapping=True)
        if list(enc["input_ids"]) == ids:
            offs = enc["offset_mapping"]
            inside = [i for i, (a, b) in enumerate(offs) if b > a and a < end and b > start]
            if inside:
                return inside[0], inside[-1] + 1
    except (NotImplementedError, TypeError, ValueError, KeyError):
        pass
    # slow tokenizers or chat-rendered prompts: count tokens of the prefixes
    n0 = len(tokenizer(prompt[:start], add_special_tokens=False)["input_ids"])
    n1 = len(tokenizer(prompt[:end], add_special_tokens=False)["input_ids"])
    offset = len(ids) - len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    return max(0, n0 + offset), min(len(ids), n1 + offset)


class _LogitLens:
    """The logit lens (:func:`~mnemoscope.trace.interventions.logit_lens`) on stored hidden states."""

    def __init__(self, lm: LoadedModel):
        if lm.model.get_output_embeddings() is None:
            raise InputError("the model has no output embeddings (LM head); the logit lens needs one")
        self.lm = lm

    def log_probs(self, h: np.ndarray) -> torch.Tensor:
        """``[layer d]`` hidden states (HF convention: the last row is already normed) -> log-probs."""
        x = torch.from_numpy(np.ascontiguousarray(h)).float()
        return torch.cat([logit_lens(self.lm, x[:-1], "final_norm"), logit_lens(self.lm, x[-1:], "raw")])

    def kl(self, h_with: np.ndarray, h_without: np.ndarray) -> np.ndarray:
        return kl_logprobs(self.log_probs(h_with), self.log_probs(h_without)).cpu().numpy()  # type: ignore[no-any-return]


def _extras_batch(
    tracer: Tracer, lens: _LogitLens | None, batch: list[PairTrace], config: CRMExtractConfig
) -> list[CRMExtras]:
    chat = bool(config.chat)
    fields: list[dict[str, Any]] = [{"id": p.id} for p in batch]
    if lens is not None:
        for f, p in zip(fields, batch, strict=True):
            assert p.h_with is not None and p.h_without is not None
            f["logit_lens_kl"] = lens.kl(p.h_with, p.h_without).astype(np.float32)
    if config.attention_flow:
        seqs = [tracer.encode(p.prompt_with, chat=chat) for p in batch]
        res = tracer.forward(seqs, hidden="none", keep_logits=0, attentions=True)
        assert res.attentions is not None
        # [layer batch head key] rows of the last query position
        last = torch.stack([a[:, :, -1, :] for a in res.attentions]).float()
        for b, (f, p) in enumerate(zip(fields, batch, strict=True)):
            s, e = _context_span(tracer.tokenizer, p.prompt_with, p.context, seqs[b])
            pad = res.pads[b]
            mass = last[:, b, :, pad + s : pad + e].sum(-1).mean(-1) if e > s else torch.zeros(last.shape[0])
            f["attn_flow"] = mass.cpu().numpy().astype(np.float32)
            f["n_context_tokens"] = int(e - s)
    if config.static:
        docs = [p.context if p.context.strip() else " " for p in batch]
        traces = tracer.trace(docs, capture=Capture(hidden="last", logprobs="none", token_stats=True))
        for f, t in zip(fields, traces, strict=True):
            assert t.hidden is not None
            f["static_hidden"] = t.hidden[-1].astype(np.float32)
            f["doc_token_logprobs"] = t.token_logprobs
            f["doc_token_mu"] = t.token_mu
            f["doc_token_sigma"] = t.token_sigma
    return [CRMExtras(**f) for f in fields]


def _run_records(
    lm: LoadedModel,
    pairs: list[PairTrace],
    folder: Path,
    settings: dict[str, Any],
    batch_size: int,
    compute: Callable[[list[PairTrace]], list[CRMExtras]],
    desc: str,
    progress: bool,
    overwrite: bool,
) -> int:
    """Compute per-record extras for the pairs not yet in ``folder``, one shard per batch."""
    writer = TraceWriter(
        folder, kind="crm_extras", model=lm.info.to_dict(), settings=settings, overwrite=overwrite
    )
    todo = [p for p in pairs if p.id not in writer.done_ids]
    bar = tqdm(total=len(todo), desc=desc, unit="rec", disable=not progress or not todo)
    try:
        for idx in batch_ranges(len(todo), batch_size):
            batch = [todo[i] for i in idx]
            writer.write(compute(batch))
            bar.update(len(batch))
    finally:
        bar.close()
    return len(todo)


def _run_extras(
    lm: LoadedModel,
    pairs: list[PairTrace],
    folder: Path,
    config: CRMExtractConfig,
    progress: bool,
    overwrite: bool,
) -> int:
    tracer = Tracer(lm, batch_size=config.batch_size)
    lens = _LogitLens(lm) if config.logit_lens else None
    return _run_records(
        lm,
        pairs,
        folder,
        config.extras_settings(),
        config.batch_size,
        lambda batch: _extras_batch(tracer, lens, batch, config),
        "crm extras",
        progress,
        overwrite,
    )


def _run_gradients(
    lm: LoadedModel,
    pairs: list[PairTrace],
    folder: Path,
    config: CRMExtractConfig,
    progress: bool,
    overwrite: bool,
) -> int:
    from mnemoscope.trace.gradients import gradient_batch

    tracer = Tracer(lm, batch_size=config.batch_size)
    chat = bool(config.chat)

    def compute(batch: list[PairTrace]) -> list[CRMExtras]:
        # an answer of 0 tokens has no likelihood to differentiate: norm 0 by definition
        rows = [p for p in batch if p.answer_ids.size > 0]
        norms: dict[str, np.ndarray] = {}
        if rows:
            g = gradient_batch(
                lm, [(tracer.encode(p.prompt_with, chat=chat), p.answer_ids.tolist()) for p in rows]
            )
            norms = {
                p.id: n for p, n in zip(rows, np.linalg.norm(g.grad, axis=-1).astype(np.float32), strict=True)
            }
        width = lm.info.n_layers + 1
        return [CRMExtras(id=p.id, grad_norm=norms.get(p.id, np.zeros(width, np.float32))) for p in batch]

    settings = {"gradient_norm": "last prompt token", "pairs": config.pair_config().to_dict()}
    return _run_records(
        lm, pairs, folder, settings, config.batch_size, compute, "crm gradients", progress, overwrite
    )


def run_embeddings(pairs: list[PairTrace], folder: Path, spec: str, progress: bool) -> Path | None:
    """Level-1 sentence embeddings of both answers of ``pairs`` in ``folder/<embedder>.npz``
    (those already there kept; ``None`` with ``spec="none"``)."""
    if spec == "none":
        return None
    path = folder / f"{_slug(spec)}.npz"
    have: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if path.is_file():
        with np.load(path, allow_pickle=False) as z:
            for i, k in enumerate(z["ids"].tolist()):
                have[str(k)] = (z["with"][i], z["without"][i])
    todo = [p for p in pairs if p.id not in have]
    if todo:
        from mnemoscope.models.embedder import load_embedder

        emb = load_embedder(spec)
        log.info("Level-1 embeddings of %d answer pairs with %s", len(todo), emb.name)
        ew = emb.encode([p.answer_with for p in todo])
        eo = emb.encode([p.answer_without or "" for p in todo])
        for p, a, b in zip(todo, ew, eo, strict=True):
            have[p.id] = (a, b)
        ids = sorted(have)
        folder.mkdir(parents=True, exist_ok=True)
        atomic_savez(
            path,
            {
                "ids": np.array(ids),
                "embedder": np.array(emb.name),
                "with": np.stack([have[i][0] for i in ids]),
                "without": np.stack([have[i][1] for i in ids]),
            },
        )
    return path


def extract(
    lm: LoadedModel,
    records: Sequence[Record],
    out: str | Path,
    config: CRMExtractConfig | None = None,
    *,
    input_errors: Sequence[RecordError] = (),
    overwrite: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """Trace ``records`` into a CRM folder (resumable; see the module doc).

    Returns:
        A summary (also written to ``extract.json``): counts, errors, settings, model identity.
    """
    config = (config or CRMExtractConfig()).resolved(lm)
    if config.logit_lens and not config.hidden:
        raise InputError("the logit lens reads the hidden states: trace with hidden=True", field="hidden")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summary: RunSummary = run_pairs(
        lm,
        records,
        out / "pairs",
        config=config.pair_config(),
        batch_size=config.batch_size,
        input_errors=input_errors,
        overwrite=overwrite,
        progress=progress,
        decode=config.decode,
    )
    n_pairs = len(stored_ids(out / "pairs"))
    if not n_pairs:
        raise InputError(
            f"no record could be traced ({summary.n_errors} errors; see {out / 'pairs' / 'errors.jsonl'})"
        )
    # the later stages read every trace back, hidden states included (a calibration calls this
    # once per draw round): only when one of them has something to compute
    later = config.any_extras or config.gradient_norm or config.embedder != "none"
    pairs = list(load_traces(out / "pairs")) if later else []
    n_extras = _run_extras(lm, pairs, out / "extras", config, progress, overwrite) if config.any_extras else 0
    n_grad = (
        _run_gradients(lm, pairs, out / "grad", config, progress, overwrite) if config.gradient_norm else 0
    )
    if overwrite or summary.n_traced:
        # embeddings are keyed by id only: stale as soon as any pair is (re)traced
        for old in (out / "embeddings").glob("*.npz"):
            old.unlink()
    emb_path = run_embeddings(pairs, out / "embeddings", config.embedder, progress)
    info = {
        "model": lm.info.to_dict(),
        "settings": asdict(config),
        "n_records": len(records) + len(input_errors),
        "n_traced": n_pairs,
        "n_errors": summary.n_errors,
        "errors": summary.errors,
        "n_extras_computed": n_extras,
        "n_gradients_computed": n_grad,
        "embeddings": None if emb_path is None else emb_path.name,
    }
    atomic_write_json(out / "extract.json", info)
    return info


def load_folder(
    folder: str | Path,
    *,
    kl_split: int | None = None,
    embedder: str | None = None,
    keep_without: bool = True,
) -> CRMFolder:
    """Read a CRM folder into :class:`CRMData` (+ the pair traces and document token stats).

    Args:
        embedder: which embeddings file to use for Level 1 (default: the one extraction used;
            ``"none"`` drops Level 1).
    """
    folder = Path(folder)
    meta_path = folder / "extract.json"
    if not meta_path.is_file():
        raise TraceStoreError(f"{folder} is not a CRM folder (no extract.json); run `mnemoscope crm extract`")
    meta = json.loads(meta_path.read_text())
    pairs = list(load_traces(folder / "pairs"))
    extras_by_id: dict[str, CRMExtras] = {}
    if (folder / "extras" / "meta.json").is_file():
        extras_by_id = {e.id: e for e in load_traces(folder / "extras")}
    spec = embedder if embedder is not None else meta.get("settings", {}).get("embedder", "none")
    embeddings = None
    if spec != "none":
        path = folder / "embeddings" / f"{_slug(spec)}.npz"
        if not path.is_file():
            raise TraceStoreError(f"{folder}: no Level-1 embeddings for embedder '{spec}' ({path} missing)")
        with np.load(path, allow_pickle=False) as z:
            rows = {str(k): i for i, k in enumerate(z["ids"].tolist())}
            missing = [p.id for p in pairs if p.id not in rows]
            if missing:
                raise TraceStoreError(
                    f"{path}: no embeddings for {len(missing)} record(s), e.g. {missing[0]}"
                )
            sel = [rows[p.id] for p in pairs]
            embeddings = (z["with"][sel], z["without"][sel])
    extras: dict[str, np.ndarray] = {}
    if (folder / "grad" / "meta.json").is_file():
        grads = {e.id: e.grad_norm for e in load_traces(folder / "grad")}
        if all(p.id in grads for p in pairs):
            extras["grad_norm"] = np.stack([grads[p.id] for p in pairs])
    token_stats: list[TokenStats] | None = None
    ex = [extras_by_id.get(p.id) for p in pairs]
    if ex and all(e is not None for e in ex):
        for key in ("logit_lens_kl", "attn_flow", "static_hidden"):
            vals = [getattr(e, key) for e in ex]
            if all(v is not None for v in vals):
                extras[key] = np.stack(vals)
        if all(e.doc_token_logprobs is not None for e in ex):  # type: ignore[union-attr]
            token_stats = [
                TokenStats(e.doc_token_logprobs, e.doc_token_mu, e.doc_token_sigma)  # type: ignore[union-attr, arg-type]
                for e in ex
            ]
    data = crm_data_from_pairs(
        pairs, embeddings=embeddings, kl_split=kl_split, extras=extras, keep_without=keep_without
    )
    return CRMFolder(data=data, pairs=pairs, token_stats=token_stats, meta=meta)
