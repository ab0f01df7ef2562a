"""Paired tracing: the same query with and without its context.

For each item::

    1. render prompt_with = T(context, query) and prompt_without = T("", query)
    2. greedily generate up to ``max_new_tokens`` tokens y on the with-context path; with stop
       sequences (``builder.stop``) y is cut at a token boundary before the first one
       (:func:`cut_at_stop`), so every statistic below is computed on the answer an app returns
    3. teacher-force y on both paths: one forward over prompt_with + y[:-1] and one over
       prompt_without + y[:-1]; the logits at the last |y| positions of each give
       p_with(. | c, q, y_<t) and p_without(. | q, y_<t) for t = 1..|y|
    4. reduce each step's two full-vocabulary distributions to KL (both directions),
       entropies, log p(y_t) and top-k, then drop the [step vocab] arrays
    5. optionally generate the no-context answer greedily as well

Both paths are scored by the same procedure (a full teacher-forced forward), so when
the two prompts are the same token sequence the two distributions are computed
identically and every KL is 0 (exactly, when the pair is traced in a batch of one;
to ~1e-7 in a mixed batch whose padding differs). The hidden states of each path are
captured in those same forwards at the last *prompt* token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from mnemoscope.divergence import kl_logprobs
from mnemoscope.errors import InputError
from mnemoscope.trace.templates import PromptBuilder
from mnemoscope.trace.tracer import Tracer, batch_ranges, to_numpy
from mnemoscope.trace.types import PairTrace

__all__ = [
    "PairConfig",
    "PairItem",
    "PairLike",
    "PreparedPair",
    "build_pair_traces",
    "cut_at_stop",
    "cut_pieces_at_stop",
    "find_stop",
    "prepare_pair",
    "step_stats",
    "teacher_forced",
    "trace_pairs",
    "trace_prepared",
]


class PairLike(Protocol):
    """Anything with these attributes can be traced as a pair (e.g. :class:`mnemoscope.data.Record`)."""

    @property
    def id(self) -> str: ...
    @property
    def context(self) -> str: ...
    @property
    def query(self) -> str: ...
    @property
    def label(self) -> int | None: ...


@dataclass(frozen=True)
class PairItem:
    """A minimal pair input."""

    id: str
    context: str
    query: str
    label: int | None = None


@dataclass(frozen=True)
class PairConfig:
    """Settings of a paired trace (stored with the traces; a resumed run must match them).

    Attributes:
        builder: prompt template / task / chat settings.
        max_new_tokens: T, the number of aligned generated positions (CRM and RePCS use 32).
        answer_without: also generate the no-context answer greedily (CRM Level 1 needs it;
            doubles generation cost, so latency-sensitive callers turn it off).
        top_k: how many top tokens and log-probs to keep per step and path (OpenAI-compatible
            servers return at most 20, which RePCS's truncated estimator mirrors).
        hidden: capture the last-prompt-token hidden states of both paths.
    """

    builder: PromptBuilder = field(default_factory=PromptBuilder)
    max_new_tokens: int = 32
    answer_without: bool = True
    top_k: int = 20
    hidden: bool = True

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise InputError("max_new_tokens must be >= 1", field="max_new_tokens")
        if self.top_k < 1:
            raise InputError("top_k must be >= 1", field="top_k")

    def to_dict(self) -> dict[str, object]:
        return {
            **self.builder.to_dict(),
            "max_new_tokens": self.max_new_tokens,
            "answer_without": self.answer_without,
            "top_k": self.top_k,
            "hidden": self.hidden,
            # only when set: the settings of every trace made without stop sequences stay as they were
            **({"stop": list(self.builder.stop)} if self.builder.stop else {}),
        }


@dataclass(frozen=True)
class PreparedPair:
    """A pair rendered and tokenized, ready to trace."""

    item: PairLike
    prompt_with: str
    prompt_without: str
    ids_with: list[int]
    ids_without: list[int]


def prepare_pair(tracer: Tracer, item: PairLike, config: PairConfig) -> PreparedPair:
    """Render and tokenize one pair; raises :class:`InputError` naming the record and field."""
    if not isinstance(item.query, str) or (
        config.builder.task_template.uses_query and not item.query.strip()
    ):
        raise InputError("query is empty", record=item.id, field="query")
    if not isinstance(item.context, str):
        raise InputError("context must be a string", record=item.id, field="context")
    p_with, p_without = config.builder.pair(item.context, item.query, tracer.tokenizer)
    ids_with = tracer.encode(p_with, chat=config.builder.chat)
    ids_without = tracer.encode(p_without, chat=config.builder.chat)
    # The teacher-forced sequence is prompt + (T - 1) answer tokens; generation needs prompt + T.
    tracer.check_length(len(ids_with), record=item.id, field="context", extra=config.max_new_tokens)
    return PreparedPair(item, p_with, p_without, ids_with, ids_without)


def trace_pairs(
    tracer: Tracer, items: Sequence[PairLike], config: PairConfig | None = None
) -> list[PairTrace]:
    """Trace each item with and without its context (see the module doc for the procedure).

    Raises:
        InputError: for the first invalid item (use :func:`prepare_pair` to screen items first).
    """
    config = config or PairConfig()
    return trace_prepared(tracer, [prepare_pair(tracer, it, config) for it in items], config)


def trace_prepared(tracer: Tracer, prepared: Sequence[PreparedPair], config: PairConfig) -> list[PairTrace]:
    """Trace pairs already screened by :func:`prepare_pair`, in batches of ``tracer.batch_size``."""
    out: list[PairTrace] = []
    for idx in batch_ranges(len(prepared), tracer.batch_size):
        out.extend(_trace_batch(tracer, [prepared[i] for i in idx], config))
    return out


def find_stop(text: str, stops: Sequence[str]) -> tuple[int, str] | None:
    """Where an app's stop sequences end the generated ``text``: ``(character offset, stop)`` of the
    earliest occurrence of any of ``stops`` from the first non-blank character on (a leading blank
    line does not end an answer before it starts; the longest stop on a tie), or ``None``. The one
    search :func:`cut_at_stop`, :func:`cut_pieces_at_stop` and the endpoint's text-only cut share.

    Example:
        >>> find_stop("\\n\\nParis.\\n\\nQuestion: x", ["\\n\\n", "\\nQuestion:"])
        (8, '\\n\\n')
    """
    begin = len(text) - len(text.lstrip())
    hits = [(text.find(x, begin), x) for x in stops if x]
    hits = [(at, x) for at, x in hits if at >= 0]
    return min(hits, key=lambda h: (h[0], -len(h[1]))) if hits else None


def cut_at_stop(
    tokenizer: Any, ids: Sequence[int], stops: Sequence[str]
) -> tuple[int, dict[str, Any] | None]:
    """Where an app ends a generated answer under stop sequences: ``(tokens kept, cut)``.

    The decoded answer (special tokens skipped) is searched for each stop from its first
    non-blank character on (a leading blank line does not end an answer before it starts); the
    earliest occurrence wins. The answer is cut at a **token boundary**: the tokens kept are
    those whose text ends at or before the stop, so the audited tokens are exactly the answer's
    first ``kept`` tokens and every per-token statistic is computed on them. At least one token is
    kept. ``cut`` is ``None`` when no stop occurs, else ``{"at": character offset of the stop in
    the generated text, "stop": the stop, "token": kept}`` (``token``: the index of the first token
    not audited, = the number of answer tokens audited).
    """
    ids = [int(i) for i in ids]
    if not stops or not ids:
        return len(ids), None
    full = tokenizer.decode(ids, skip_special_tokens=True)
    hit = find_stop(full, stops)
    if hit is None:
        return len(ids), None
    at, stop = hit
    keep = 0
    for k in range(1, len(ids) + 1):
        text = tokenizer.decode(ids[:k], skip_special_tokens=True)
        if len(text.rstrip("\ufffd")) > at:
            break
        if full.startswith(text):
            keep = k
    keep = max(keep, 1)
    return keep, {"at": int(at), "stop": stop, "token": keep}


def cut_pieces_at_stop(pieces: Sequence[str], stops: Sequence[str]) -> tuple[int, dict[str, Any] | None]:
    """:func:`cut_at_stop` for an answer given as the text each token adds (a served model's
    tokens as the server spells them): the same search and the same ``(tokens kept, cut)``."""
    pieces = [str(p) for p in pieces]
    if not stops or not pieces:
        return len(pieces), None
    hit = find_stop("".join(pieces), stops)
    if hit is None:
        return len(pieces), None
    at, stop = hit
    keep, end = 0, 0
    for p in pieces:
        if end + len(p) > at:
            break
        end += len(p)
        keep += 1
    keep = max(keep, 1)
    return keep, {"at": int(at), "stop": stop, "token": keep}


def _cut_answers(
    tracer: Tracer, answers: Sequence[list[int]], config: PairConfig
) -> tuple[list[list[int]], list[dict[str, Any] | None]]:
    """Each answer cut at the builder's stop sequences (unchanged without any)."""
    stops = config.builder.stop
    out, cuts = [], []
    for a in answers:
        keep, cut = cut_at_stop(tracer.tokenizer, a, stops) if stops else (len(a), None)
        out.append(list(a[:keep]))
        cuts.append(cut)
    return out, cuts


def _trace_batch(tracer: Tracer, batch: list[PreparedPair], config: PairConfig) -> list[PairTrace]:
    answers = tracer.generate([p.ids_with for p in batch], config.max_new_tokens)
    answers, cuts = _cut_answers(tracer, answers, config)
    logits_w, h_w, pre_w = teacher_forced(tracer, [p.ids_with for p in batch], answers, config)
    logits_o, h_o, pre_o = teacher_forced(tracer, [p.ids_without for p in batch], answers, config)
    return build_pair_traces(
        tracer, batch, answers, logits_w, logits_o, (h_w, pre_w, h_o, pre_o), config, cuts=cuts
    )


def teacher_forced(
    tracer: Tracer, prompts: Sequence[list[int]], answers: Sequence[list[int]], config: PairConfig
) -> tuple[list[torch.Tensor], Any, Any]:
    """One forward over each prompt + answer[:-1]: per pair the ``[n vocab]`` logits that predict
    the answer's n tokens, and (with ``config.hidden``) the states at the last prompt token
    (``[b layer d]`` and the pre-norm ``[b d]``, or ``None``)."""
    fo = tracer.forward(
        [list(ids) + list(a[:-1]) for ids, a in zip(prompts, answers, strict=True)],
        hidden="last" if config.hidden else "none",
        positions=[len(ids) - 1 for ids in prompts],
        keep_logits=max(len(a) for a in answers),
    )
    assert fo.logits is not None
    return [fo.logits[b, -len(a) :].float() for b, a in enumerate(answers)], fo.hidden, fo.prenorm


def build_pair_traces(
    tracer: Tracer,
    batch: Sequence[PreparedPair],
    answers: Sequence[list[int]],
    logits_w: Sequence[torch.Tensor],
    logits_o: Sequence[torch.Tensor],
    states: tuple[Any, Any, Any, Any],
    config: PairConfig,
    *,
    cuts: Sequence[dict[str, Any] | None] | None = None,
    answers_without: Sequence[Sequence[int]] | None = None,
) -> list[PairTrace]:
    """The :class:`PairTrace` of each pair from its answer and both paths' per-step logits
    ``[n vocab]``; ``states`` = (h_with, prenorm_with, h_without, prenorm_without), batched or
    ``None``; ``cuts``: each answer's stop-sequence cut (:func:`cut_at_stop`), already applied.
    With ``config.answer_without`` the no-context greedy answer is cut the same way; it is
    ``answers_without`` when the caller decoded it already (the lockstep decoder does, in the
    same batch as the two paths), else generated here."""
    h_w, pre_w, h_o, pre_o = states
    no_ctx = None
    if config.answer_without:
        raw = (
            [list(a) for a in answers_without]
            if answers_without is not None
            else tracer.generate([p.ids_without for p in batch], config.max_new_tokens)
        )
        no_ctx = _cut_answers(tracer, raw, config)[0]
    eos = set(tracer.eos_ids)
    traces = []
    for b, p in enumerate(batch):
        ans = list(answers[b])
        stats = step_stats(logits_w[b], logits_o[b], ans, config.top_k)
        traces.append(
            PairTrace(
                id=str(p.item.id),
                context=p.item.context,
                query=p.item.query,
                prompt_with=p.prompt_with,
                prompt_without=p.prompt_without,
                n_prompt_tokens_with=len(p.ids_with),
                n_prompt_tokens_without=len(p.ids_without),
                h_with=to_numpy(h_w[b]) if h_w is not None else None,
                h_without=to_numpy(h_o[b]) if h_o is not None else None,
                h_with_prenorm=to_numpy(pre_w[b]) if pre_w is not None else None,
                h_without_prenorm=to_numpy(pre_o[b]) if pre_o is not None else None,
                answer_ids=np.asarray(ans, dtype=np.int64),
                answer_with=tracer.tokenizer.decode(ans, skip_special_tokens=True),
                stopped_at_eos=bool(ans and ans[-1] in eos),
                identical_prompts=p.ids_with == p.ids_without,
                answer_without_ids=np.asarray(no_ctx[b], dtype=np.int64) if no_ctx is not None else None,
                answer_without=tracer.tokenizer.decode(no_ctx[b], skip_special_tokens=True)
                if no_ctx
                else None,
                label=p.item.label,
                template=config.builder.to_dict(),
                answer_cut=cuts[b] if cuts is not None else None,
                **stats,
            )
        )
    return traces


def _kl_both(
    logits_with: torch.Tensor, logits_without: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(log p_with, log p_without, KL(with || without), KL(without || with)) per step, in float64."""
    lw = logits_with.double().log_softmax(-1)
    lo = logits_without.double().log_softmax(-1)
    return lw, lo, kl_logprobs(lw, lo), kl_logprobs(lo, lw)


def step_stats(
    logits_with: torch.Tensor, logits_without: torch.Tensor, answer: list[int], k: int
) -> dict[str, np.ndarray]:
    """Per-step KL, entropies, answer log-probs and top-k from two ``[step vocab]`` logit blocks (float64)."""
    lw, lo, kl, kl_rev = _kl_both(logits_with, logits_without)
    pw, po = lw.exp(), lo.exp()
    y = torch.tensor(answer, dtype=torch.long, device=lw.device).unsqueeze(-1)
    k = min(k, lw.shape[-1])
    tw, to = lw.topk(k, dim=-1), lo.topk(k, dim=-1)
    return {
        "kl_steps": kl.cpu().numpy(),
        "kl_rev_steps": kl_rev.cpu().numpy(),
        "entropy_with": (-(pw * lw).sum(-1)).cpu().numpy(),
        "entropy_without": (-(po * lo).sum(-1)).cpu().numpy(),
        "logprob_answer_with": lw.gather(-1, y).squeeze(-1).float().cpu().numpy(),
        "logprob_answer_without": lo.gather(-1, y).squeeze(-1).float().cpu().numpy(),
        "topk_ids_with": tw.indices.cpu().numpy().astype(np.int64),
        "topk_logprobs_with": tw.values.float().cpu().numpy(),
        "topk_ids_without": to.indices.cpu().numpy().astype(np.int64),
        "topk_logprobs_without": to.values.float().cpu().numpy(),
    }


@dataclass(frozen=True)
class OnlineKL:
    """Result of the one-request path: the answer and the per-step KL series."""

    answer_ids: list[int]
    kl_steps: np.ndarray
    kl_rev_steps: np.ndarray


def online_kl(tracer: Tracer, prepared: PreparedPair, max_new_tokens: int) -> OnlineKL:
    """Answer one request and score it with a single extra forward pass.

    p_with comes from the logits that generation already produced; p_without from one
    teacher-forced forward over prompt_without + y[:-1]. This is what a serving path pays
    for RePCS. It agrees with :func:`trace_pairs` up to the float difference between cached
    decoding and a full forward (~1e-5 nats here), not bit for bit.
    """
    answer, gen_logits = tracer.generate_with_logits(prepared.ids_with, max_new_tokens)
    n = len(answer)
    fo = tracer.forward([prepared.ids_without + answer[:-1]], hidden="none", keep_logits=n)
    assert fo.logits is not None
    _, _, kl, kl_rev = _kl_both(gen_logits, fo.logits[0, -n:])
    return OnlineKL(answer, kl.cpu().numpy(), kl_rev.cpu().numpy())
