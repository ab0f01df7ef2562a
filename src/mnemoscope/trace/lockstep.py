"""Lockstep decoding: both paths of a pair from one generation (the audit's cheap path).

:func:`mnemoscope.trace.pair.trace_prepared` generates the answer, then teacher-forces it on
both paths (two more full forwards). Here the with-context path generates greedily while the
no-context path of the same item is fed the same token at the same step, all ``2B`` rows of
a batch in one forward per step with KV caches::

    rows = [with_0 .. with_{B-1}, without_0 .. without_{B-1}]        (left-padded together)
    prefill(rows)                -> logits at the last prompt token, hidden states there
    for t in 0 .. T-1:
        y_t[b] = argmax logits_with[b]            (or the given answer's token)
        step(y_t[b] on rows b and B + b)          -> next logits of both paths

The per-step distributions are the same ones the teacher-forced forwards compute (the
same model, the same prefix; up to float rounding of cached vs full attention, ~1e-6 in
log-probability on CPU float32, tested < 1e-4), and the result is the same
:class:`~mnemoscope.trace.types.PairTrace`, so every consumer works unchanged.

With stop sequences (``config.builder.stop``), a generated row stops decoding once its text
holds one, and its answer is cut at a token boundary before it
(:func:`~mnemoscope.trace.pair.cut_at_stop`); the per-step distributions of the dropped tokens
are dropped with them, so RePCS and the token signals see only the answer an app returns.

A given answer (``forced_answers``) is teacher-forced on both paths instead of generated (and
never cut: it is the answer the app already returned):
how an integration audits what a RAG chain's own LLM said. When every pair of a batch has
one, nothing is decoded: each path is one teacher-forced forward over prompt + answer (two
forwards instead of one step per answer token).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch

from mnemoscope.errors import InputError
from mnemoscope.trace.hooks import StateCapture, registered_hooks
from mnemoscope.trace.pair import PairConfig, PreparedPair, build_pair_traces, cut_at_stop, teacher_forced
from mnemoscope.trace.tracer import Tracer, batch_ranges
from mnemoscope.trace.types import PairTrace

__all__ = ["LOCKSTEP_MIN_BATCH", "Schedule", "trace_lockstep"]

Schedule = Literal["auto", "lockstep", "fused"]
LOCKSTEP_MIN_BATCH = 4


def trace_lockstep(
    tracer: Tracer,
    prepared: Sequence[PreparedPair],
    config: PairConfig,
    *,
    forced_answers: Sequence[Sequence[int] | None] | None = None,
    schedule: Schedule = "auto",
) -> list[PairTrace]:
    """Trace prepared pairs by lockstep decoding, in batches of ``tracer.batch_size``.

    Args:
        tracer: the model's tracer.
        prepared: pairs from :func:`~mnemoscope.trace.pair.prepare_pair`.
        config: T (``max_new_tokens``), top-k, hidden states, ``answer_without``.
        forced_answers: per pair, token ids to teacher-force instead of generating (``None``
            entries generate); a forced answer is used whole (up to its length, not T).
        schedule: ``"lockstep"`` (both paths decoded together, 2B rows per step),
            ``"fused"`` (the with-context path decodes B rows, then the no-context path is
            scored in one teacher-forced forward over its prompt + the answer) or ``"auto"``:
            lockstep from :data:`LOCKSTEP_MIN_BATCH` pairs per batch, fused below (on a CPU a
            second row per decode step costs ~60 % of a step at batch 1 but little at batch 8;
            ``benchmarks/bench_audit.py`` measures both).

    Returns:
        one :class:`PairTrace` per pair, in order.
    """
    forced = list(forced_answers) if forced_answers is not None else [None] * len(prepared)
    if len(forced) != len(prepared):
        raise InputError(f"forced_answers has {len(forced)} entries for {len(prepared)} pairs")
    for p, f in zip(prepared, forced, strict=True):
        if f is not None and len(f) == 0:
            raise InputError("the given answer is empty", record=str(p.item.id), field="answer")
    if schedule not in ("auto", "lockstep", "fused"):
        raise InputError(f"unknown schedule {schedule!r}; choose auto, lockstep or fused", field="schedule")
    out: list[PairTrace] = []
    for idx in batch_ranges(len(prepared), tracer.batch_size):
        sched: Literal["lockstep", "fused"] = (
            ("lockstep" if len(idx) >= LOCKSTEP_MIN_BATCH else "fused") if schedule == "auto" else schedule
        )
        out.extend(
            _lockstep_batch(tracer, [prepared[i] for i in idx], [forced[i] for i in idx], config, sched)
        )
    return out


def _cache_kwargs(model: Any, out: Any) -> dict[str, Any]:
    """The KV cache of ``out`` as the next call's argument (``cache`` in transformers >= 5.x,
    ``past_key_values`` before)."""
    import inspect

    params = inspect.signature(model.forward).parameters
    cache = getattr(out, "cache", None)
    if cache is None:
        cache = getattr(out, "past_key_values", None)
    return {"cache": cache} if "cache" in params else {"past_key_values": cache}


@torch.no_grad()
def _lockstep_batch(
    tracer: Tracer,
    batch: list[PreparedPair],
    forced: list[Sequence[int] | None],
    config: PairConfig,
    schedule: Literal["lockstep", "fused"],
) -> list[PairTrace]:
    B = len(batch)
    model = tracer.model
    limits = [len(f) if f is not None else config.max_new_tokens for f in forced]
    for p, n in zip(batch, limits, strict=True):
        tracer.check_length(len(p.ids_with), record=str(p.item.id), field="context", extra=n)
    eos = set(tracer.eos_ids)
    if all(f is not None for f in forced):  # nothing to generate: two teacher-forced forwards
        given = [[int(y) for y in f] for f in forced if f is not None]
        tw, h_w, pre_w = teacher_forced(tracer, [p.ids_with for p in batch], given, config)
        to, h_o, pre_o = teacher_forced(tracer, [p.ids_without for p in batch], given, config)
        return build_pair_traces(tracer, batch, given, tw, to, (h_w, pre_w, h_o, pre_o), config)
    rows = [p.ids_with for p in batch]
    if schedule == "lockstep":
        rows += [p.ids_without for p in batch]
    R = len(rows)
    ids, mask, pos, pads = tracer.pad(rows)
    width = ids.shape[1]
    use_mask = any(pads)  # no padding: let the model take its causal fast path

    kwargs: dict[str, Any] = {"input_ids": ids, "use_cache": True}
    if use_mask:
        kwargs["attention_mask"] = mask
    if tracer.has_position_ids:
        kwargs["position_ids"] = pos
    if tracer.has_logits_to_keep:
        kwargs["logits_to_keep"] = 1
    h = pre = None
    arch = tracer.lm.arch
    if config.hidden and arch is not None:
        cap = StateCapture(model, arch, torch.full((R,), width - 1, dtype=torch.long), all_positions=False)
        with registered_hooks(cap.specs()):
            out = model(**kwargs)
        h, pre = cap.result()
    elif config.hidden:
        out = model(**kwargs, output_hidden_states=True)
        h = torch.stack([st[:, -1] for st in out.hidden_states], dim=1)
    else:
        out = model(**kwargs)

    answers: list[list[int]] = [[] for _ in range(B)]
    done = [False] * B
    stops = config.builder.stop
    logits_w: list[list[torch.Tensor]] = [[] for _ in range(B)]
    logits_o: list[list[torch.Tensor]] = [[] for _ in range(B)]
    next_pos = pos[:, -1:] + 1
    for t in range(max(limits)):
        last_logits = out.logits[:, -1].float()
        step = torch.empty(B, dtype=torch.long)
        for b in range(B):
            if done[b]:
                step[b] = tracer.pad_id
                continue
            f = forced[b]
            y = int(f[t]) if f is not None else int(last_logits[b].argmax())
            answers[b].append(y)
            logits_w[b].append(last_logits[b])
            if schedule == "lockstep":
                logits_o[b].append(last_logits[B + b])
            step[b] = y
            ended = f is None and (y in eos or bool(stops and _has_stop(tracer.tokenizer, answers[b], stops)))
            if len(answers[b]) >= limits[b] or ended:
                done[b] = True
        if all(done):
            break
        tok = (torch.cat([step, step]) if schedule == "lockstep" else step).unsqueeze(-1).to(ids.device)
        kw: dict[str, Any] = {"input_ids": tok, "use_cache": True}
        if use_mask:
            mask = torch.cat([mask, torch.ones((R, 1), dtype=mask.dtype, device=mask.device)], dim=1)
            kw["attention_mask"] = mask
        kw.update(_cache_kwargs(model, out))
        if tracer.has_position_ids:
            kw["position_ids"] = next_pos
        out = model(**kw)
        next_pos = next_pos + 1

    cuts: list[dict[str, Any] | None] = [None] * B
    if stops:
        for b in range(B):
            if forced[b] is None:
                keep, cuts[b] = cut_at_stop(tracer.tokenizer, answers[b], stops)
                answers[b] = answers[b][:keep]
                logits_w[b] = logits_w[b][:keep]
                if schedule == "lockstep":
                    logits_o[b] = logits_o[b][:keep]
    h_w, pre_w = (h[:B] if h is not None else None), (pre[:B] if pre is not None else None)
    if schedule == "lockstep":
        h_o, pre_o = (h[B:] if h is not None else None), (pre[B:] if pre is not None else None)
        lo = [torch.stack(x) for x in logits_o]
    else:  # the no-context path: one teacher-forced forward over prompt_without + y[:-1]
        lo, h_o, pre_o = teacher_forced(tracer, [p.ids_without for p in batch], answers, config)
    lw = [torch.stack(x) for x in logits_w]
    return build_pair_traces(tracer, batch, answers, lw, lo, (h_w, pre_w, h_o, pre_o), config, cuts=cuts)


def _has_stop(tokenizer: Any, ids: Sequence[int], stops: Sequence[str]) -> bool:
    """Whether the decoded answer holds a stop sequence after its first non-blank character."""
    text = tokenizer.decode(list(ids), skip_special_tokens=True)
    body = text.lstrip()
    return any(s in body for s in stops)
