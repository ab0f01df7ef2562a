"""SCAR audit orchestration: extract signals of a suspect and an anchor, detect, write the card.

Extraction is resumable: the hidden states (and gradients) of each model are written to
``OUT/signals/<role>/chunk-NNNNN.npz`` as soon as a chunk of prompts is done, next to a
``meta.json`` that pins the model fingerprint, the prompt ids and the extraction settings.
A re-run skips finished chunks; a folder written with other settings or another model is
refused (pass another output folder).

Example:
    >>> from mnemoscope.models import load_model                          # doctest: +SKIP
    >>> res = run_audit(load_model("default", adapter="runs/contamination-0.05"),
    ...                 load_model("default", adapter="runs/contamination-0"),
    ...                 default_battery_path(), "card/")                  # doctest: +SKIP
    >>> res.bands, res.rupture_layer                                      # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import numpy as np
from tqdm.auto import tqdm

from mnemoscope.detectors.scar import Reference, Rule, ScarData, ScarDetector, ScarResult, resolve_k
from mnemoscope.errors import InputError, MnemoscopeError
from mnemoscope.features.spectral import Center, Metric, SlopeMethod
from mnemoscope.io import atomic_savez
from mnemoscope.models.loader import LoadedModel, check_same_model
from mnemoscope.trace.gradients import Position, encode_pair, gradient_batch

__all__ = [
    "AuditConfig",
    "BatteryRecord",
    "ModelSource",
    "default_battery_path",
    "extract_signals",
    "read_battery",
    "run_audit",
]

log = logging.getLogger(__name__)

ModelSource = LoadedModel | Callable[[], LoadedModel]
_FORMAT = 1


@dataclass(frozen=True)
class BatteryRecord:
    """One prompt of a battery: ``{id, prompt, target?, category?}`` (extra fields kept)."""

    id: str
    prompt: str
    target: str | None = None
    category: str | None = None
    line: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def default_battery_path() -> Path:
    """The shipped battery (math, commonsense, translation-style and natural prompts with targets)."""
    return Path(str(resources.files("mnemoscope.bench") / "data" / "scar_battery.jsonl"))


def read_battery(path: str | Path, *, require_target: bool = True) -> list[BatteryRecord]:
    """Read and validate a prompt battery (JSONL). Any bad line raises :class:`InputError`
    naming the record and field; ``require_target`` makes a missing target an error."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"prompt battery not found: {path}")
    records: list[BatteryRecord] = []
    seen: dict[str, int] = {}
    with path.open(encoding="utf-8") as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as e:
                raise InputError(
                    f"{path}: invalid JSON ({e.msg}, column {e.colno})", record=f"line {lineno}"
                ) from e
            if not isinstance(obj, dict):
                raise InputError(f"{path}: expected a JSON object", record=f"line {lineno}")
            rid = obj.get("id")
            if (
                rid is None
                or isinstance(rid, bool)
                or not isinstance(rid, (str, int))
                or str(rid).strip() == ""
            ):
                raise InputError(f"{path}: missing or empty id", record=f"line {lineno}", field="id")
            where = f"{rid} (line {lineno})"
            if str(rid) in seen:
                raise InputError(
                    f"{path}: duplicate id (first on line {seen[str(rid)]})", record=where, field="id"
                )
            seen[str(rid)] = lineno
            prompt = obj.get("prompt")
            if not isinstance(prompt, str) or not prompt.strip():
                raise InputError(f"{path}: missing or empty", record=where, field="prompt")
            target = obj.get("target")
            if target is not None and (not isinstance(target, str) or not target.strip()):
                raise InputError(f"{path}: must be a non-empty string", record=where, field="target")
            if target is None and require_target:
                raise InputError(
                    f"{path}: missing; belief drift needs a target for every prompt (or disable drift)",
                    record=where,
                    field="target",
                )
            cat = obj.get("category")
            extra = {k: v for k, v in obj.items() if k not in {"id", "prompt", "target", "category"}}
            records.append(
                BatteryRecord(
                    id=str(rid),
                    prompt=prompt,
                    target=target,
                    category=None if cat is None else str(cat),
                    line=lineno,
                    extra=extra,
                )
            )
    if not records:
        raise InputError(f"{path}: no prompts")
    return records


@dataclass(frozen=True)
class AuditConfig:
    """Extraction and detection settings of one audit (all recorded in the card).

    ``position``: which token representation feeds the signals (``"last"`` prompt token or
    ``"mean"`` over prompt tokens; the same for hidden states and gradients).
    """

    position: Position = "last"
    drift: bool = True
    batch_size: int = 8
    chunk_size: int = 32
    k: int | Literal["auto"] = "auto"
    slope: SlopeMethod = "loglog"
    metric: Metric = "whitened"
    center: Center = "median"
    drift_aggregate: Center = "mean"
    reference: Reference = "within"
    smooth: bool = False
    weights: tuple[float, float, float] = (1.0, 1.0, 1.0)
    percentiles: tuple[float, float, float] = (90.0, 10.0, 90.0)
    q_fdr: float = 0.05
    min_width: int = 2
    rule: Rule = "paper"
    n_permutations: int = 999
    n_bootstrap: int = 200
    seed: int = 0
    progress: bool = True

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.chunk_size < 1:
            raise InputError("batch_size and chunk_size must be >= 1")
        if self.position not in ("last", "mean"):
            raise InputError(f"position must be 'last' or 'mean', got {self.position!r}", field="position")

    def extraction(self) -> dict[str, Any]:
        """The settings that change extracted signals (pinned in each ``meta.json``)."""
        return {
            "position": self.position,
            "drift": self.drift,
            "chunk_size": self.chunk_size,
            "format": _FORMAT,
        }

    def detector(self, progress: Callable[[int, int], None] | None = None) -> ScarDetector:
        return ScarDetector(
            k=self.k,
            slope=self.slope,
            metric=self.metric,
            center=self.center,
            drift=self.drift,
            drift_aggregate=self.drift_aggregate,
            reference=self.reference,
            smooth=self.smooth,
            weights=self.weights,
            percentiles=self.percentiles,
            q_fdr=self.q_fdr,
            min_width=self.min_width,
            rule=self.rule,
            n_permutations=self.n_permutations,
            n_bootstrap=self.n_bootstrap,
            seed=self.seed,
            progress=progress,
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["weights"] = list(self.weights)
        d["percentiles"] = list(self.percentiles)
        return d


# -- extraction --------------------------------------------------------------------------------------


def _ids_digest(records: Sequence[BatteryRecord]) -> str:
    h = hashlib.sha256()
    for r in records:
        h.update(f"{r.id}\0{r.prompt}\0{r.target}\n".encode())
    return h.hexdigest()


def _resolve(source: ModelSource) -> LoadedModel:
    return source if isinstance(source, LoadedModel) else source()


def _states_no_grad(lm: LoadedModel, seqs: list[list[int]], position: Position) -> np.ndarray:
    """Residual-stream states without gradients (prompts without targets, drift disabled)."""
    from mnemoscope.trace.tracer import Tracer

    tracer = Tracer(lm, batch_size=len(seqs))
    if position == "last":
        res = tracer.forward(seqs, hidden="last", keep_logits=0)
        assert res.hidden is not None
        h = res.hidden.clone()
        if res.prenorm is not None:
            h[:, -1] = res.prenorm
        return np.asarray(h.double().cpu().numpy())
    res = tracer.forward(seqs, hidden="all", keep_logits=0)
    assert res.hidden is not None
    rows = []
    for b, s in enumerate(seqs):
        pad = res.pads[b]
        hb = res.hidden[b, :, pad:].clone()
        if res.prenorm is not None:
            hb[-1] = res.prenorm[b, pad:]
        rows.append(hb[:, : len(s)].double().mean(dim=1))
    import torch

    return np.asarray(torch.stack(rows).cpu().numpy())


def extract_signals(
    model: ModelSource,
    records: Sequence[BatteryRecord],
    folder: str | Path,
    *,
    config: AuditConfig,
    role: str = "model",
    expect: dict[str, Any] | None = None,
) -> ScarData:
    """Hidden states (and gradients) of every prompt, chunk by chunk, resumable.

    The model is only loaded (if ``model`` is a loader) when some chunk is missing. ``expect``
    (another model's ``ModelInfo`` dict, e.g. the suspect's when extracting the anchor) makes a
    model of another architecture, layer count or width an error *before* any extraction.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if config.drift:
        missing = [r for r in records if r.target is None]
        if missing:
            raise InputError(
                "missing; belief drift needs a target for every prompt (or disable drift)",
                record=missing[0].id,
                field="target",
            )
    digest = _ids_digest(records)
    meta_path = folder / "meta.json"
    chunks = [
        list(range(i, min(len(records), i + config.chunk_size)))
        for i in range(0, len(records), config.chunk_size)
    ]
    paths = [folder / f"chunk-{c:05d}.npz" for c in range(len(chunks))]
    todo = [c for c, p in enumerate(paths) if not p.is_file()]
    meta: dict[str, Any] | None = json.loads(meta_path.read_text()) if meta_path.is_file() else None
    if meta is not None and (meta.get("battery") != digest or meta.get("extraction") != config.extraction()):
        raise MnemoscopeError(
            f"{folder} holds signals of another battery or other extraction settings; "
            "use a new output folder (or delete it)"
        )
    lm: LoadedModel | None = None
    if todo:
        lm = _resolve(model)
        info = lm.info.to_dict()
        if expect is not None:
            _check_infos(expect, info)
        if meta is not None:
            check_same_model(
                meta.get("model", {}), info, what=f"the signals in {folder}", remedy="use a new output folder"
            )
        meta = {"battery": digest, "extraction": config.extraction(), "model": info, "role": role}
        meta_path.write_text(json.dumps(meta, indent=1))
        bar = tqdm(
            total=sum(len(chunks[c]) for c in todo),
            desc=f"SCAR signals ({role})",
            unit="prompt",
            disable=not config.progress,
        )
        try:
            for c in todo:
                _extract_chunk(lm, [records[i] for i in chunks[c]], paths[c], config, bar)
        finally:
            bar.close()
    assert meta is not None
    parts = [np.load(p) for p in paths]
    hidden = np.concatenate([p["hidden"] for p in parts]).astype(np.float64)
    grad = np.concatenate([p["grad"] for p in parts]).astype(np.float64) if config.drift else None
    return ScarData(
        hidden=hidden,
        grad=grad,
        ids=tuple(r.id for r in records),
        model=dict(meta["model"]),
        n_prompt_tokens=np.concatenate([p["n_prompt_tokens"] for p in parts]),
        n_target_tokens=np.concatenate([p["n_target_tokens"] for p in parts]) if config.drift else None,
        logp=np.concatenate([p["logp"] for p in parts]) if config.drift else None,
    )


def _extract_chunk(
    lm: LoadedModel, recs: list[BatteryRecord], path: Path, config: AuditConfig, bar: Any
) -> None:
    hid, grd, lps, npt, ntt = [], [], [], [], []
    for start in range(0, len(recs), config.batch_size):
        batch = recs[start : start + config.batch_size]
        if config.drift:
            pairs = [encode_pair(lm.tokenizer, r.prompt, r.target or "") for r in batch]
            for r, (p, t) in zip(batch, pairs, strict=True):
                if not p:
                    raise InputError("prompt is empty (0 tokens)", record=r.id, field="prompt")
                if not t:
                    raise InputError("target is empty (0 tokens)", record=r.id, field="target")
            g = gradient_batch(lm, pairs, position=config.position)
            hid.append(g.hidden)
            grd.append(g.grad)
            lps.append(g.logp)
            npt.append(g.n_prompt_tokens)
            ntt.append(g.n_target_tokens)
        else:
            seqs = [list(lm.tokenizer(r.prompt, add_special_tokens=True)["input_ids"]) for r in batch]
            for r, s in zip(batch, seqs, strict=True):
                if not s:
                    raise InputError("prompt is empty (0 tokens)", record=r.id, field="prompt")
            hid.append(_states_no_grad(lm, seqs, config.position))
            npt.append(np.array([len(s) for s in seqs], dtype=np.int64))
        bar.update(len(batch))
    arrays: dict[str, np.ndarray] = {
        "hidden": np.concatenate(hid).astype(np.float32),
        "n_prompt_tokens": np.concatenate(npt),
        "ids": np.array([r.id for r in recs]),
    }
    if config.drift:
        arrays.update(
            grad=np.concatenate(grd).astype(np.float32),
            logp=np.concatenate(lps),
            n_target_tokens=np.concatenate(ntt),
        )
    atomic_savez(path, arrays)


# -- the audit ----------------------------------------------------------------------------------------


def _check_infos(s: dict[str, Any], a: dict[str, Any]) -> None:
    keys = ("architecture", "n_layers", "hidden_size")
    if any(s.get(k) != a.get(k) for k in keys):
        raise MnemoscopeError(
            f"suspect ({s.get('name')}: {s.get('architecture')}, {s.get('n_layers')} layers, "
            f"d={s.get('hidden_size')}) and anchor ({a.get('name')}: {a.get('architecture')}, "
            f"{a.get('n_layers')} layers, d={a.get('hidden_size')}) must share architecture, layer "
            "count and width"
        )


def _check_models(suspect: ModelSource, anchor: ModelSource) -> None:
    if isinstance(suspect, LoadedModel) and isinstance(anchor, LoadedModel):
        _check_infos(suspect.info.to_dict(), anchor.info.to_dict())


def _token_summary(x: np.ndarray | None) -> dict[str, float] | None:
    if x is None:
        return None
    return {"mean": float(np.mean(x)), "min": int(np.min(x)), "max": int(np.max(x)), "total": int(np.sum(x))}


def run_audit(
    suspect: ModelSource,
    anchor: ModelSource,
    battery: str | Path | Sequence[BatteryRecord],
    out: str | Path,
    *,
    config: AuditConfig | None = None,
    plots: bool = True,
) -> ScarResult:
    """Audit ``suspect`` against the clean ``anchor`` on ``battery``; write the card to ``out``.

    Args:
        suspect, anchor: loaded models, or zero-argument loaders (called only when signals
            are missing, so a finished extraction never reloads a model).
        battery: a JSONL path or records.
        out: the card folder (``card.json``, arrays, ``card.html``, PNGs, ``signals/``).
        config: settings (default :class:`AuditConfig`).
        plots: also save the PNG figures.

    Returns:
        The :class:`~mnemoscope.detectors.scar.ScarResult` (also in ``out/card.json``).
    """
    from mnemoscope.report.scar_card import write_card

    config = config or AuditConfig()
    out = Path(out)
    _check_models(suspect, anchor)
    if isinstance(battery, (str, Path)):
        battery_name = str(battery)
        records = read_battery(battery, require_target=config.drift)
    else:
        battery_name = "<records>"
        records = list(battery)
    d_model = (
        suspect.info.hidden_size if isinstance(suspect, LoadedModel) else 10**9
    )  # the detector checks k against the real width again
    resolve_k(config.k, len(records), d_model)
    sig_s = extract_signals(suspect, records, out / "signals" / "suspect", config=config, role="suspect")
    sig_a = extract_signals(
        anchor, records, out / "signals" / "anchor", config=config, role="anchor", expect=sig_s.model
    )
    total = config.n_permutations + config.n_bootstrap
    bar = tqdm(total=total, desc="SCAR permutations + bootstrap", disable=not config.progress)

    def progress(done: int, _total: int) -> None:
        bar.update(done - bar.n)

    try:
        det = config.detector(progress=progress).fit(sig_a)
        result = det.audit(sig_s)
    finally:
        bar.close()
    extra = {
        "suspect": sig_s.model,
        "anchor": sig_a.model,
        "battery": battery_name,
        "battery_sha256": _ids_digest(records),
        "categories": sorted({r.category for r in records if r.category}),
        "precision": sig_s.model.get("dtype"),
        "token_representation": config.position,
        "prompt_tokens": _token_summary(sig_s.n_prompt_tokens),
        "target_tokens": _token_summary(sig_s.n_target_tokens),
        "audit_config": config.to_dict(),
        "inference": "eval mode, no KV cache, left padding with attention mask, gradients only for activations",
    }
    write_card(result, out, extra_settings=extra, plots=plots)
    log.info("SCAR card written to %s (bands %s, l* %s)", out, result.bands, result.rupture_layer)
    return result
