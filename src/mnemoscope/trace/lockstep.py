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

**The closed-book answer** (``config.answer_without``: what label verification and CRM Level 1
read) is the answer :meth:`~mnemoscope.trace.tracer.Tracer.generate` gives on the no-context
prompt (greedy, up to T tokens, the EOS kept), cut at the stop sequences the same way. It is
the audited answer up to the first step ``d`` where the no-context path's argmax differs from
the answer's token (that path is fed the answer, so its argmax at every step is known), and
needs decoding of its own only from there: its prefix is ``answer[:d]`` + that argmax, and it
continues greedily from the no-context path's KV cache at prompt + ``d`` tokens (**the fork**).
A pair whose answer ends (EOS, a stop sequence, T tokens) without a divergence has the answer
as its closed-book answer, at no cost. Under lockstep a closed-book row is forked (a copy of its
no-context row's cache) at the step where it diverges; under fused, after the no-context
teacher-forced forward (run with a cache), the diverging rows are decoded together from that
cache cut back to their fork (the answer tokens past a row's fork masked, position ids
continuing from it). A model without position ids or with sliding-window layers, or a cache
that cannot select rows or crop, decodes the closed-book rows from the prefill instead
(``B`` more rows, copies of the no-context rows) or, failing that, generates them apart.

**Per-row early stop.** A row whose answer ended (EOS, a stop sequence, T tokens) leaves the
batch: its KV cache rows are dropped, so the remaining steps cost what the unfinished rows
cost; the others' arithmetic is unchanged (attention is per row).

**A shared prompt prefix** (a chat template's system turn, the same in every row) is prefilled
once and its cache repeated for every row, each row's own tokens following it
(:func:`_prefill`; not with sliding-window layers shorter than the sequence, nor for a model
without position ids). The default model's calibration prompts share their first 26 tokens.

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

from collections.abc import Callable, Sequence
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


def _cache_of(out: Any) -> Any:
    """The KV cache a forward returned (``cache`` in transformers >= 5.x, ``past_key_values`` before)."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else getattr(out, "past_key_values", None)


def _cache_kwargs(model: Any, out: Any) -> dict[str, Any]:
    """The KV cache of ``out`` as the next call's argument (``cache`` in transformers >= 5.x,
    ``past_key_values`` before)."""
    return _cache_arg(model, _cache_of(out))


def _cache_arg(model: Any, cache: Any) -> dict[str, Any]:
    """``cache`` as the next call's argument."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return {"cache": cache} if "cache" in params else {"past_key_values": cache}


def _selectable(cache: Any) -> bool:
    """Whether rows of the cache can be selected (and repeated) in place: how finished rows
    leave the batch and how the closed-book rows share the no-context prefill."""
    return callable(getattr(cache, "batch_select_indices", None))


def _croppable(cache: Any) -> bool:
    """Whether the cache can be cut back to fewer tokens (how a fused closed-book row forks)."""
    return (
        _selectable(cache) and callable(getattr(cache, "crop", None)) and getattr(cache, "is_croppable", True)
    )


def _can_fork(tracer: Tracer) -> bool:
    """Whether a fused closed-book row can continue from the no-context teacher-forced cache:
    its masked answer tokens need explicit position ids, and would count against a sliding window."""
    return tracer.has_position_ids and _sliding_window(tracer.model.config) is None


#: the shortest prompt prefix common to every row of a batch that is prefilled once for all
#: of them (a chat template's system turn: 26 tokens of SmolLM2's 47-72-token calibration prompts)
MIN_SHARED_PREFIX = 8


def _sliding_window(config: Any) -> int | None:
    """The attention window of the model's sliding layers (``None``: every layer attends to all)."""
    window = getattr(config, "sliding_window", None)
    if not window or getattr(config, "use_sliding_window", True) is False:
        return None
    types = getattr(config, "layer_types", None)
    if types is not None and not any("sliding" in str(t) for t in types):
        return None
    return int(window)


def _shared_prefix(tracer: Tracer, rows: Sequence[Sequence[int]], extra: int) -> int:
    """How many leading tokens every row shares, when worth one prefill for all (else 0).

    Each row keeps at least its last prompt token (its logits and states are read there). A model
    without position ids cannot continue a cache past padding; with sliding-window layers the
    padding between the prefix and a row's own tokens would count against the window, so sharing
    needs the longest sequence (``extra`` generated tokens included) to fit in it.
    """
    if len(rows) < 2 or not tracer.has_position_ids:
        return 0
    first, n = rows[0], min(len(r) for r in rows) - 1
    k = 0
    while k < n and all(r[k] == first[k] for r in rows):
        k += 1
    if k < MIN_SHARED_PREFIX:
        return 0
    window = _sliding_window(tracer.model.config)
    if window is not None and max(len(r) for r in rows) + extra > window:
        return 0
    return k


def _prefill(
    tracer: Tracer, rows: list[list[int]], hidden: bool, *, extra: int
) -> tuple[Any, Any, Any, torch.Tensor, torch.Tensor, bool]:
    """The first forward of a lockstep batch: ``(output, hidden [R layer d] or None, pre-norm
    states or None, attention mask, position ids, whether the mask must be passed)``.

    Rows are left-padded together. When they share a prefix (:func:`_shared_prefix`), it is
    prefilled once and its cache repeated for every row; each row's own tokens follow,
    left-padded after the prefix (masked), with position ids continuing from it: the same
    attention as the unshared prefill, without computing the prefix ``R`` times.
    """
    model = tracer.model
    shared = _shared_prefix(tracer, rows, extra)
    past: dict[str, Any] = {}
    if shared:
        head = torch.tensor([list(rows[0][:shared])], dtype=torch.long, device=tracer.lm.device)
        kw: dict[str, Any] = {
            "input_ids": head,
            "use_cache": True,
            "position_ids": torch.arange(shared)[None].to(head.device),
        }
        if tracer.has_logits_to_keep:
            kw["logits_to_keep"] = 1
        first = model(**kw)
        cache = _cache_of(first)
        if _selectable(cache):
            cache.batch_select_indices(torch.zeros(len(rows), dtype=torch.long, device=head.device))
            past = _cache_kwargs(model, first)
        else:  # a cache that cannot repeat its row: prefill every row whole
            shared = 0
    ids, mask, pos, pads = tracer.pad([list(r[shared:]) for r in rows])
    width = ids.shape[1]
    use_mask = any(pads)  # no padding: let the model take its causal fast path
    if shared:
        mask = torch.cat([torch.ones((len(rows), shared), dtype=mask.dtype, device=mask.device), mask], dim=1)
        pos = pos + shared
    kwargs: dict[str, Any] = {"input_ids": ids, "use_cache": True, **past}
    if use_mask:
        kwargs["attention_mask"] = mask
    if tracer.has_position_ids:
        kwargs["position_ids"] = pos
    if tracer.has_logits_to_keep:
        kwargs["logits_to_keep"] = 1
    h = pre = None
    arch = tracer.lm.arch
    if hidden and arch is not None:
        cap = StateCapture(
            model, arch, torch.full((len(rows),), width - 1, dtype=torch.long), all_positions=False
        )
        with registered_hooks(cap.specs()):
            out = model(**kwargs)
        h, pre = cap.result()
    elif hidden:
        out = model(**kwargs, output_hidden_states=True)
        h = torch.stack([st[:, -1] for st in out.hidden_states], dim=1)
    else:
        out = model(**kwargs)
    return out, h, pre, mask, pos, use_mask


# the three kinds of decoded row: the with-context path (greedy, or the given answer), the
# no-context path fed the same tokens, the closed-book path (greedy on its own tokens)
_WITH, _WITHOUT, _CLOSED = 0, 1, 2


@torch.no_grad()
def _lockstep_batch(
    tracer: Tracer,
    batch: list[PreparedPair],
    forced: list[Sequence[int] | None],
    config: PairConfig,
    schedule: Literal["lockstep", "fused"],
    *,
    fork: bool = True,
) -> list[PairTrace]:
    """One batch; ``fork=False`` decodes the closed-book rows from the prefill (the reference
    the fork is tested against)."""
    B = len(batch)
    model = tracer.model
    T = config.max_new_tokens
    limits = [len(f) if f is not None else T for f in forced]
    for p, n in zip(batch, limits, strict=True):
        tracer.check_length(len(p.ids_with), record=str(p.item.id), field="context", extra=n)
    eos = set(tracer.eos_ids)
    if all(f is not None for f in forced):  # nothing to generate: two teacher-forced forwards
        given = [[int(y) for y in f] for f in forced if f is not None]
        tw, h_w, pre_w = teacher_forced(tracer, [p.ids_with for p in batch], given, config)
        to, h_o, pre_o = teacher_forced(tracer, [p.ids_without for p in batch], given, config)
        return build_pair_traces(tracer, batch, given, tw, to, (h_w, pre_w, h_o, pre_o), config)
    lockstep = schedule == "lockstep"
    stops = config.builder.stop

    def ended(c: list[int]) -> bool:
        """Whether a closed-book answer is complete (its last token EOS, a stop, T tokens)."""
        return len(c) >= T or c[-1] in eos or bool(stops and _has_stop(tracer.tokenizer, c, stops))

    # fused: the closed-book answer forks from the no-context teacher-forced forward afterwards
    fork_fused = config.answer_without and not lockstep and fork and _can_fork(tracer)
    # the prefill: the with-context rows, then the no-context prompts (the no-context path under
    # lockstep; under fused, only as the closed-book rows' start when they do not fork)
    rows = [p.ids_with for p in batch]
    if lockstep or (config.answer_without and not fork_fused):
        rows += [p.ids_without for p in batch]
    R = len(rows)
    out, h, pre, mask, pos, use_mask = _prefill(tracer, rows, config.hidden, extra=max([*limits, T]))
    ids_device = mask.device

    meta = [(_WITH, b) for b in range(B)]
    if lockstep:
        meta += [(_WITHOUT, b) for b in range(B)]
    cache = _cache_of(out)
    prunable = _selectable(cache)
    last_logits = out.logits[:, -1].float()
    next_pos = pos[:, -1:] + 1
    # the closed-book answer (config.answer_without) decodes in the same batch: under lockstep
    # forked from its no-context row when it diverges from the answer; without the fork, its rows
    # are copies of the no-context rows after the prefill (lockstep) or the prefill's second half
    # (fused); a cache that cannot copy rows leaves it to build_pair_traces, which generates it apart
    fork_lock = config.answer_without and lockstep and prunable and fork
    carried = config.answer_without and not fork_fused and not fork_lock and (prunable or not lockstep)
    if carried and lockstep:
        sel = list(range(R)) + list(range(B, R))
        idx = torch.tensor(sel, dtype=torch.long, device=ids_device)
        cache.batch_select_indices(idx)
        mask, next_pos, last_logits = mask[idx], next_pos[idx], last_logits[idx]
    if carried:
        meta += [(_CLOSED, b) for b in range(B)]

    answers: list[list[int]] = [[] for _ in range(B)]
    done = [False] * B
    closed_answers: list[list[int]] = [[] for _ in range(B)]
    closed_done = [not (carried or fork_lock)] * B
    follow = [bool(fork_lock)] * B  # lockstep fork: the closed-book answer is still the answer
    logits_w: list[list[torch.Tensor]] = [[] for _ in range(B)]
    logits_o: list[list[torch.Tensor]] = [[] for _ in range(B)]
    steps = max([*limits, T if carried or fork_lock else 0])
    for t in range(steps):
        row_of = {m: r for r, m in enumerate(meta)}
        greedy = last_logits.argmax(-1).tolist()
        for b in range(B):
            if done[b]:
                continue
            rw = row_of[(_WITH, b)]
            f = forced[b]
            y = int(f[t]) if f is not None else int(greedy[rw])
            answers[b].append(y)
            logits_w[b].append(last_logits[rw].clone())
            if lockstep:
                logits_o[b].append(last_logits[row_of[(_WITHOUT, b)]].clone())
            stopped = f is None and (
                y in eos or bool(stops and _has_stop(tracer.tokenizer, answers[b], stops))
            )
            if len(answers[b]) >= limits[b] or stopped:
                done[b] = True
        forks: list[int] = []
        for b in range(B):
            if closed_done[b]:
                continue
            if follow[b]:  # the no-context row was fed answers[b][-1]: its argmax is the closed-book token
                g = int(greedy[row_of[(_WITHOUT, b)]])
                closed_answers[b].append(g)
                if ended(closed_answers[b]):
                    closed_done[b], follow[b] = True, False
                elif g != answers[b][-1] or done[b]:  # diverges (or the answer leaves): fork
                    follow[b] = False
                    forks.append(b)
                continue
            closed_answers[b].append(int(greedy[row_of[(_CLOSED, b)]]))
            closed_done[b] = ended(closed_answers[b])
        if all(done) and all(closed_done):
            break

        def finished(m: tuple[int, int]) -> bool:
            return closed_done[m[1]] if m[0] == _CLOSED else done[m[1]]

        alive = [r for r, m in enumerate(meta) if not finished(m)]
        if forks or (prunable and len(alive) < len(meta)):
            # finished rows leave the batch (and its cache); a fork copies its no-context row
            sel = alive + [row_of[(_WITHOUT, b)] for b in forks]
            idx = torch.tensor(sel, dtype=torch.long, device=ids_device)
            cache.batch_select_indices(idx)
            mask, next_pos = mask[idx], next_pos[idx]
            meta = [meta[r] for r in alive] + [(_CLOSED, b) for b in forks]
        step = torch.tensor(
            [
                tracer.pad_id
                if finished(m)
                else (closed_answers[m[1]][-1] if m[0] == _CLOSED else answers[m[1]][-1])
                for m in meta
            ],
            dtype=torch.long,
        )
        kw: dict[str, Any] = {"input_ids": step.unsqueeze(-1).to(ids_device), "use_cache": True}
        if use_mask:
            mask = torch.cat([mask, torch.ones((len(meta), 1), dtype=mask.dtype, device=mask.device)], dim=1)
            kw["attention_mask"] = mask
        kw.update(_cache_kwargs(model, out))
        if tracer.has_position_ids:
            kw["position_ids"] = next_pos
        if tracer.has_logits_to_keep:
            kw["logits_to_keep"] = 1
        out = model(**kw)
        cache = _cache_of(out)
        last_logits = out.logits[:, -1].float()
        next_pos = next_pos + 1
    del out, cache

    raw = [list(a) for a in answers]  # before the stop cut: what the closed-book answer follows
    cuts: list[dict[str, Any] | None] = [None] * B
    if stops:
        for b in range(B):
            if forced[b] is None:
                keep, cuts[b] = cut_at_stop(tracer.tokenizer, answers[b], stops)
                answers[b] = answers[b][:keep]
                logits_w[b] = logits_w[b][:keep]
                if lockstep:
                    logits_o[b] = logits_o[b][:keep]
    h_w, pre_w = (h[:B] if h is not None else None), (pre[:B] if pre is not None else None)
    closed = carried or fork_lock
    if lockstep:
        h_o, pre_o = (h[B : 2 * B] if h is not None else None), (pre[B : 2 * B] if pre is not None else None)
        lo = [torch.stack(x) for x in logits_o]
    elif fork_fused:  # the no-context forward over the whole answer, then the diverging rows decode
        lo_raw, h_o, pre_o, forked = _closed_by_fork(
            tracer, [p.ids_without for p in batch], raw, config, ended
        )
        lo = [x[: len(a)] for x, a in zip(lo_raw, answers, strict=True)]
        if forked is not None:
            closed, closed_answers = True, forked
    else:  # the no-context path: one teacher-forced forward over prompt_without + y[:-1]
        lo, h_o, pre_o = teacher_forced(tracer, [p.ids_without for p in batch], answers, config)
    lw = [torch.stack(x) for x in logits_w]
    extra: dict[str, Any] = {"cuts": cuts}
    if closed:
        extra["answers_without"] = closed_answers
    return build_pair_traces(tracer, batch, answers, lw, lo, (h_w, pre_w, h_o, pre_o), config, **extra)


def _closed_by_fork(
    tracer: Tracer,
    prompts: list[list[int]],
    answers: list[list[int]],
    config: PairConfig,
    ended: Callable[[list[int]], bool],
) -> tuple[list[torch.Tensor], Any, Any, list[list[int]] | None]:
    """The fused schedule's no-context path and closed-book answers: ``(per-step logits [n vocab]
    of each answer, states, pre-norm states, closed-book answers or None)``.

    One teacher-forced forward over each prompt + answer[:-1] (as
    :func:`~mnemoscope.trace.pair.teacher_forced`, keeping its KV cache). A closed-book answer
    follows the no-context argmax of each step while it equals the answer's token; the rows that
    diverge (or outlast a given answer) continue greedily from that cache, cut back to their fork
    (the row's prompt + the answer before it; later answer tokens of a longer row masked). ``None``
    when rows must fork but the cache cannot select rows or crop (build_pair_traces generates them).
    """
    model = tracer.model
    seqs = [list(p) + list(a[:-1]) for p, a in zip(prompts, answers, strict=True)]
    ids, mask, pos, pads = tracer.pad(seqs)
    width = ids.shape[1]
    k = max(len(a) for a in answers)
    kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask, "use_cache": True}
    if tracer.has_position_ids:
        kwargs["position_ids"] = pos
    if tracer.has_logits_to_keep:
        kwargs["logits_to_keep"] = k
    h = pre = None
    arch = tracer.lm.arch
    if config.hidden and arch is not None:
        at = torch.tensor([len(p) - 1 + pad for p, pad in zip(prompts, pads, strict=True)], dtype=torch.long)
        cap = StateCapture(model, arch, at, all_positions=False)
        with registered_hooks(cap.specs()):
            out = model(**kwargs)
        h, pre = cap.result()
    elif config.hidden:
        out = model(**kwargs, output_hidden_states=True)
        stacked = torch.stack(out.hidden_states, dim=1)  # [batch layer seq d]
        at = torch.tensor([len(p) - 1 + pad for p, pad in zip(prompts, pads, strict=True)], dtype=torch.long)
        h = stacked[torch.arange(len(seqs), device=stacked.device), :, at.to(stacked.device)]
    else:
        out = model(**kwargs)
    logits = out.logits[:, -k:]
    lo = [logits[b, logits.shape[1] - len(a) :].float() for b, a in enumerate(answers)]

    closed: list[list[int]] = []
    forks: list[tuple[int, int]] = []  # (row, step): the row decodes on from prompt + answer[:step]
    for b, a in enumerate(answers):
        g = lo[b].argmax(-1).tolist()
        c: list[int] = []
        for t, y in enumerate(a):
            c.append(int(g[t]))
            if ended(c):
                break
            if c[-1] != y or t == len(a) - 1:
                forks.append((b, t))
                break
        closed.append(c)
    if not forks:
        return lo, h, pre, closed
    cache = _cache_of(out)
    del out, logits
    if not _croppable(cache):
        return lo, h, pre, None
    dev = ids.device
    rows = [b for b, _ in forks]
    if rows != list(range(len(seqs))):
        cache.batch_select_indices(torch.tensor(rows, dtype=torch.long, device=dev))
    ends = [pads[b] + len(prompts[b]) + t for b, t in forks]
    keep = max(ends)
    if keep < width:
        cache.crop(keep - width)  # negative: tokens removed (every transformers version reads it so)
    fmask = torch.zeros((len(forks), keep), dtype=mask.dtype, device=dev)
    for i, (b, _) in enumerate(forks):
        fmask[i, pads[b] : ends[i]] = 1
    use_mask = bool((fmask == 0).any())
    fpos = torch.tensor([[len(prompts[b]) + t] for b, t in forks], dtype=torch.long, device=dev)
    while rows:
        kw: dict[str, Any] = {
            "input_ids": torch.tensor([[closed[b][-1]] for b in rows], dtype=torch.long, device=dev),
            "use_cache": True,
            **_cache_arg(model, cache),
        }
        if use_mask:
            fmask = torch.cat([fmask, torch.ones((len(rows), 1), dtype=fmask.dtype, device=dev)], dim=1)
            kw["attention_mask"] = fmask
        if tracer.has_position_ids:
            kw["position_ids"] = fpos
        if tracer.has_logits_to_keep:
            kw["logits_to_keep"] = 1
        step = model(**kw)
        cache = _cache_of(step)
        greedy = step.logits[:, -1].float().argmax(-1).tolist()
        alive = []
        for i, b in enumerate(rows):
            closed[b].append(int(greedy[i]))
            if not ended(closed[b]):
                alive.append(i)
        if len(alive) < len(rows):
            if alive:
                idx = torch.tensor(alive, dtype=torch.long, device=dev)
                cache.batch_select_indices(idx)
                fmask, fpos = fmask[idx], fpos[idx]
            rows = [rows[i] for i in alive]
        fpos = fpos + 1
    return lo, h, pre, closed


def _has_stop(tokenizer: Any, ids: Sequence[int], stops: Sequence[str]) -> bool:
    """Whether the decoded answer holds a stop sequence after its first non-blank character."""
    text = tokenizer.decode(list(ids), skip_special_tokens=True)
    body = text.lstrip()
    return any(s in body for s in stops)
