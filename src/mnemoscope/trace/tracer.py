"""Run a causal LM on batches of prompts and return typed traces.

Batching pads on the **left** so every row's last token sits at the last column;
attention masks hide the padding and position ids restart at 0 on each row's first
real token, so a batched trace equals a one-at-a-time trace to float tolerance.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from mnemoscope.errors import InputError, InputTooLongError
from mnemoscope.models.loader import LoadedModel
from mnemoscope.trace.hooks import StateCapture, eager_attention, registered_hooks
from mnemoscope.trace.memory import trim_heap
from mnemoscope.trace.types import PromptTrace

__all__ = ["Capture", "ForwardResult", "Tracer"]

log = logging.getLogger(__name__)

HiddenMode = Literal["none", "last", "all"]


@dataclass(frozen=True)
class Capture:
    """What a trace keeps. Everything not asked for is never materialised.

    Attributes:
        hidden: ``"last"`` = every layer at the last prompt token (O(layers x d) per prompt),
            ``"all"`` = every layer at every position, ``"none"``.
        logprobs: ``"last"`` = full-vocabulary next-token log-probs after the last token,
            ``"all"`` = at every position, ``"none"``.
        attentions: attention weights per layer and head (switches to eager attention
            for the duration of the call).
        token_stats: per-position statistics of the prompt's own tokens (what likelihood
            attacks need) without keeping ``[seq vocab]`` arrays: log p of each actual next
            token, and the mean and standard deviation of log p(z) under each position's
            distribution (Min-K%++'s mu and sigma; -mu is the entropy).
    """

    hidden: HiddenMode = "last"
    logprobs: HiddenMode = "last"
    attentions: bool = False
    token_stats: bool = False


@dataclass
class ForwardResult:
    """Raw output of one padded forward (internal currency of the tracer).

    ``hidden[b]`` is ``[layer d]`` at ``positions[b]`` (or ``[layer seq d]`` padded when all
    positions were kept); ``logits`` holds the **last** ``k`` columns of the padded batch.
    """

    pads: list[int]
    hidden: torch.Tensor | None
    prenorm: torch.Tensor | None
    logits: torch.Tensor | None
    attentions: tuple[torch.Tensor, ...] | None


def batch_ranges(n: int, size: int) -> Iterator[range]:
    for start in range(0, n, size):
        yield range(start, min(n, start + size))


class Tracer:
    """Traces prompts on one loaded model.

    Args:
        lm: the model (from :func:`mnemoscope.models.load_model` or ``from_objects``).
        batch_size: prompts per forward pass.
        logits_budget_mb: when a trace keeps the logits of every position (token statistics,
            ``logprobs="all"``), a batch is split so that its ``[batch seq vocab]`` float32
            logits stay under this many MB: the forward's memory is then bounded by the budget,
            not by batch size x document length x vocabulary (a 262k-vocabulary model would
            need 2 GB for 8 x 256 tokens).
        eos_token_ids: tokens that end a generation (default: the tokenizer's EOS and the
            model's ``generation_config.eos_token_id``).

    Example:
        >>> tracer = Tracer(load_model("default"))             # doctest: +SKIP
        >>> t = tracer.trace(["The capital of France is"])[0]  # doctest: +SKIP
        >>> t.hidden.shape                                     # doctest: +SKIP
        (31, 576)
    """

    def __init__(
        self,
        lm: LoadedModel,
        *,
        batch_size: int = 8,
        eos_token_ids: Sequence[int] | None = None,
        logits_budget_mb: float = 96.0,
    ):
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if logits_budget_mb <= 0:
            raise ValueError("logits_budget_mb must be > 0")
        self.logits_budget_mb = logits_budget_mb
        self.lm = lm
        self.model = lm.model
        self.tokenizer = lm.tokenizer
        self.batch_size = batch_size
        params = inspect.signature(self.model.forward).parameters
        self.has_position_ids = "position_ids" in params
        self.has_logits_to_keep = "logits_to_keep" in params
        self.pad_id = self._pad_id()
        self.eos_ids = sorted(set(eos_token_ids)) if eos_token_ids is not None else self._eos_ids()

    # -- tokens -----------------------------------------------------------------------------------

    def _pad_id(self) -> int:
        tok = self.tokenizer
        for cand in (getattr(tok, "pad_token_id", None), getattr(tok, "eos_token_id", None)):
            if cand is not None:
                return int(cand)
        return 0

    def _eos_ids(self) -> list[int]:
        ids: set[int] = set()
        tok_eos = getattr(self.tokenizer, "eos_token_id", None)
        if tok_eos is not None:
            ids.add(int(tok_eos))
        gen = getattr(self.model, "generation_config", None)
        gen_eos = getattr(gen, "eos_token_id", None) if gen is not None else None
        if isinstance(gen_eos, int):
            ids.add(gen_eos)
        elif gen_eos:
            ids.update(int(x) for x in gen_eos)
        return sorted(ids)

    def encode(self, text: str, *, chat: bool = False) -> list[int]:
        """Token ids of a prompt. A chat-rendered prompt already holds its special tokens."""
        return list(self.tokenizer(text, add_special_tokens=not chat)["input_ids"])

    @property
    def max_positions(self) -> int | None:
        return self.lm.info.max_positions

    def check_length(
        self, n_tokens: int, *, record: str | int | None = None, field: str = "prompt", extra: int = 0
    ) -> None:
        """Raise :class:`InputError` when ``n_tokens + extra`` exceeds the model window."""
        limit = self.max_positions
        if n_tokens == 0:
            raise InputError("prompt is empty (0 tokens)", record=record, field=field)
        if limit is not None and n_tokens + extra > limit:
            more = f" plus {extra} generated tokens" if extra else ""
            raise InputTooLongError(
                f"prompt is {n_tokens} tokens{more}, over the model's window of {limit} tokens",
                record=record,
                field=field,
            )

    # -- one padded forward -------------------------------------------------------------------------

    def pad(
        self, seqs: Sequence[Sequence[int]]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[int]]:
        """Left-pad ``seqs`` into (ids, attention mask, position ids, pads per row) on the model's device."""
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        pads = []
        for i, s in enumerate(seqs):
            pad = width - len(s)
            ids[i, pad:] = torch.tensor(list(s), dtype=torch.long)
            mask[i, pad:] = 1
            pads.append(pad)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        dev = self.lm.device
        return ids.to(dev), mask.to(dev), pos.to(dev), pads

    @torch.no_grad()
    def forward(
        self,
        seqs: Sequence[Sequence[int]],
        *,
        hidden: HiddenMode = "last",
        positions: Sequence[int] | None = None,
        keep_logits: int | Literal["all"] = 1,
        attentions: bool = False,
    ) -> ForwardResult:
        """One left-padded forward over ``seqs`` (a single batch; no splitting here).

        Args:
            seqs: token id lists.
            hidden: which hidden states to capture.
            positions: with ``hidden="last"``, the token index *within each row's own sequence*
                to capture (default: its last token).
            keep_logits: number of final columns of logits to return (``0`` for none, ``"all"``).
            attentions: also return attention weights.
        """
        ids, mask, pos, pads = self.pad(seqs)
        width = ids.shape[1]
        if positions is None:
            positions = [len(s) - 1 for s in seqs]
        padded_pos = torch.tensor([p + pad for p, pad in zip(positions, pads, strict=True)], dtype=torch.long)

        kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask, "use_cache": False}
        if self.has_position_ids:
            kwargs["position_ids"] = pos
        k = width if keep_logits == "all" else int(keep_logits)
        if self.has_logits_to_keep:
            kwargs["logits_to_keep"] = max(k, 1)
        if attentions:
            kwargs["output_attentions"] = True

        arch = self.lm.arch
        use_hooks = hidden != "none" and arch is not None
        if hidden != "none" and arch is None:
            kwargs["output_hidden_states"] = True

        h = pre = None
        with eager_attention(self.model, attentions):
            if use_hooks:
                assert arch is not None
                cap = StateCapture(self.model, arch, padded_pos, all_positions=hidden == "all")
                with registered_hooks(cap.specs()):
                    out = self.model(**kwargs)
                h, pre = cap.result()
            else:
                out = self.model(**kwargs)
                if hidden != "none":
                    stacked = torch.stack(out.hidden_states, dim=1)  # [batch layer seq d]
                    if hidden == "all":
                        h = stacked
                    else:
                        rows = torch.arange(stacked.shape[0], device=stacked.device)
                        h = stacked[rows, :, padded_pos.to(stacked.device)]
        logits = out.logits[:, -k:] if k > 0 else None
        atts = tuple(out.attentions) if attentions and out.attentions is not None else None
        if attentions and (atts is None or any(a is None for a in atts)):
            raise RuntimeError(
                "the model returned no attention weights (its attention kernel may not support them)"
            )
        return ForwardResult(pads=pads, hidden=h, prenorm=pre, logits=logits, attentions=atts)

    # -- public: prompt traces --------------------------------------------------------------------

    def trace(
        self,
        prompts: Sequence[str] | Sequence[Sequence[int]],
        *,
        capture: Capture | None = None,
        chat: bool = False,
    ) -> list[PromptTrace]:
        """Trace prompts (strings, or token id lists) and return one :class:`PromptTrace` each."""
        capture = capture or Capture()
        texts: list[str] = []
        seqs: list[list[int]] = []
        for i, p in enumerate(prompts):
            if isinstance(p, str):
                texts.append(p)
                seqs.append(self.encode(p, chat=chat))
            else:
                texts.append("")
                seqs.append([int(t) for t in p])  # type: ignore[call-overload]
            self.check_length(len(seqs[-1]), record=i)
        out: list[PromptTrace] = []
        keep: int | Literal["all"] = {"none": 0, "last": 1, "all": "all"}[capture.logprobs]  # type: ignore[assignment]
        if capture.token_stats:
            keep = "all"
        for idx in batch_ranges(len(seqs), self.batch_size):
            parts = self._within_logits_budget(list(idx), seqs) if keep == "all" else [list(idx)]
            for part in parts:
                batch = [seqs[i] for i in part]
                res = self.forward(
                    batch, hidden=capture.hidden, keep_logits=keep, attentions=capture.attentions
                )
                out.extend(self._prompt_traces(res, batch, [texts[i] for i in part], capture))
                del res
                if keep == "all":  # large, differently shaped logits: give the freed heap back
                    trim_heap()
        return out

    @property
    def vocab_size(self) -> int:
        return self.lm.info.vocab_size

    def _within_logits_budget(self, idx: list[int], seqs: Sequence[Sequence[int]]) -> list[list[int]]:
        """Split a batch (in order) so each part's padded ``[rows width vocab]`` float32 logits
        fit :attr:`logits_budget_mb` (a row longer than the budget goes alone)."""
        per_token = 4 * max(self.vocab_size, 1) / 2**20  # MB of logits per (row, position)
        parts: list[list[int]] = []
        cur: list[int] = []
        width = 0
        for i in idx:
            w = max(width, len(seqs[i]))
            if cur and (len(cur) + 1) * w * per_token > self.logits_budget_mb:
                parts.append(cur)
                cur, w = [], len(seqs[i])
            cur.append(i)
            width = w
        if cur:
            parts.append(cur)
        return parts

    def _prompt_traces(
        self, res: ForwardResult, seqs: list[list[int]], texts: list[str], capture: Capture
    ) -> list[PromptTrace]:
        traces = []
        for b, seq in enumerate(seqs):
            pad = res.pads[b]
            fields: dict[str, Any] = {}
            # one row at a time: a [seq vocab] float block per row, never per batch; token
            # statistics alone never build it (they go through the logits in position chunks)
            logp = (
                res.logits[b].float().log_softmax(-1)
                if res.logits is not None and capture.logprobs != "none"
                else None
            )
            if res.hidden is not None:
                if capture.hidden == "all":
                    fields["hidden_all"] = to_numpy(res.hidden[b, :, pad:])
                    fields["hidden"] = to_numpy(res.hidden[b, :, -1])
                    if res.prenorm is not None:
                        fields["hidden_prenorm_all"] = to_numpy(res.prenorm[b, pad:])
                        fields["hidden_prenorm"] = to_numpy(res.prenorm[b, -1])
                else:
                    fields["hidden"] = to_numpy(res.hidden[b])
                    if res.prenorm is not None:
                        fields["hidden_prenorm"] = to_numpy(res.prenorm[b])
            if logp is not None:
                if capture.logprobs == "all":
                    fields["logprobs_all"] = to_numpy(logp[pad:])
                fields["logprobs"] = to_numpy(logp[-1])
            if capture.token_stats and res.logits is not None:
                fields.update(_token_stats(res.logits[b, pad:], seq))
            if res.attentions is not None:
                fields["attentions"] = to_numpy(torch.stack([a[b, :, pad:, pad:] for a in res.attentions]))
            traces.append(
                PromptTrace(
                    prompt=texts[b],
                    token_ids=np.asarray(seq, dtype=np.int64),
                    tokens=tuple(self.tokenizer.convert_ids_to_tokens(seq)),
                    **fields,
                )
            )
        return traces

    # -- generation -------------------------------------------------------------------------------

    @torch.no_grad()
    def generate(self, seqs: Sequence[Sequence[int]], max_new_tokens: int) -> list[list[int]]:
        """Greedy continuation of each sequence; each result stops after its first EOS (kept)."""
        from transformers import GenerationConfig

        if max_new_tokens < 1:
            raise ValueError("max_new_tokens must be >= 1")
        results: list[list[int]] = []
        cfg = GenerationConfig(
            max_new_tokens=max_new_tokens,
            do_sample=False,
            num_beams=1,
            pad_token_id=self.pad_id,
            eos_token_id=self.eos_ids or None,
        )
        eos = set(self.eos_ids)
        for idx in batch_ranges(len(seqs), self.batch_size):
            batch = [seqs[i] for i in idx]
            ids, mask, _, _ = self.pad(batch)
            out = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)
            results.extend(_cut_at_eos(row, eos) for row in out[:, ids.shape[1] :].tolist())
        return results

    @torch.no_grad()
    def generate_with_logits(self, seq: Sequence[int], max_new_tokens: int) -> tuple[list[int], torch.Tensor]:
        """Greedy continuation of one sequence and the ``[step vocab]`` logits that chose each token.

        The latency-sensitive path (one request, no padding): RePCS can compare these
        logits with a single teacher-forced no-context forward instead of re-scoring both paths.
        """
        from transformers import GenerationConfig

        cfg = GenerationConfig(
            max_new_tokens=max_new_tokens,
            do_sample=False,
            num_beams=1,
            pad_token_id=self.pad_id,
            eos_token_id=self.eos_ids or None,
            output_logits=True,
            return_dict_in_generate=True,
        )
        ids = torch.tensor([list(seq)], dtype=torch.long, device=self.lm.device)
        out = self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=cfg)
        tokens = _cut_at_eos(out.sequences[0, ids.shape[1] :].tolist(), set(self.eos_ids))
        logits = torch.stack([step[0] for step in out.logits[: len(tokens)]])
        return tokens, logits

    @torch.no_grad()
    def sample(
        self,
        seqs: Sequence[Sequence[int]],
        n: int,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int = 0,
    ) -> list[list[list[int]]]:
        """``n`` sampled continuations per sequence (seeded per batch, so reruns reproduce)."""
        from transformers import GenerationConfig

        if n < 1 or max_new_tokens < 1 or temperature <= 0:
            raise ValueError("n and max_new_tokens must be >= 1 and temperature > 0")
        cfg = GenerationConfig(
            max_new_tokens=max_new_tokens,
            do_sample=True,
            temperature=temperature,
            top_p=top_p,
            top_k=0,
            num_return_sequences=n,
            pad_token_id=self.pad_id,
            eos_token_id=self.eos_ids or None,
        )
        eos = set(self.eos_ids)
        results: list[list[list[int]]] = []
        for b, idx in enumerate(batch_ranges(len(seqs), self.batch_size)):
            ids, mask, _, _ = self.pad([seqs[i] for i in idx])
            torch.manual_seed(seed * 100_003 + b)
            out = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)
            rows = [_cut_at_eos(r, eos) for r in out[:, ids.shape[1] :].tolist()]
            results.extend(rows[i * n : (i + 1) * n] for i in range(len(idx)))
        return results


def _cut_at_eos(row: list[int], eos: set[int]) -> list[int]:
    cut = []
    for t in row:
        cut.append(int(t))
        if t in eos:
            break
    return cut


def _token_stats(logits: torch.Tensor, seq: list[int], chunk: int = 32) -> dict[str, np.ndarray]:
    """Per-position statistics for positions 0..n-2 (each predicts the next prompt token).

    Works through ``chunk`` positions at a time, so the extra memory is O(chunk x vocabulary)
    whatever the document's length (the float64 moments of a whole 256-token row of a
    50k vocabulary would be ~100 MB per temporary). Per position the arithmetic is the same
    as on the whole row (log-softmax in float32, moments in float64).
    """
    n = max(int(logits.shape[0]) - 1, 0)
    nxt = torch.tensor(seq[1:], dtype=torch.long, device=logits.device)
    lps, mus, sigmas = [], [], []
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        lp = logits[start:stop].float().log_softmax(-1).double()
        p = lp.exp()
        mu = (p * lp).sum(-1)
        var = (p * lp.square()).sum(-1) - mu.square()
        lps.append(lp.gather(-1, nxt[start:stop].unsqueeze(-1)).squeeze(-1).float().cpu())
        mus.append(mu.float().cpu())
        sigmas.append(var.clamp(min=0.0).sqrt().float().cpu())
        del lp, p
    if not lps:
        empty = np.zeros(0, dtype=np.float32)
        return {"token_logprobs": empty, "token_mu": empty.copy(), "token_sigma": empty.copy()}
    return {
        "token_logprobs": torch.cat(lps).numpy(),
        "token_mu": torch.cat(mus).numpy(),
        "token_sigma": torch.cat(sigmas).numpy(),
    }


def to_numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float32).cpu().numpy()
