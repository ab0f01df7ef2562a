"""Leave-one-passage-out scoring of the answer the model gave (in process, teacher-forced).

A retrieved context is often a list of passages, joined by
:func:`~mnemoscope.trace.passages.join_passages`. For an answer already traced with and
without the whole context (:class:`~mnemoscope.trace.types.PairTrace`), this scores the same
answer tokens ``y`` on the context with passage ``j`` left out
(:func:`~mnemoscope.trace.passages.without_passage`)::

    row j: log p(y_t | T(without_passage(passages, j), query), y_<t)   for t = 0 .. |y|-1

aligned step for step with ``logprob_answer_with`` / ``logprob_answer_without``. No generation:
each ablated prompt is one teacher-forced forward over prompt + ``y[:-1]``
(:func:`mnemoscope.trace.pair.teacher_forced`, left-padded batches of ``tracer.batch_size`` rows,
rows of every job of a run batched together, longest first so a batch pads little). The prompt is
rendered by the pair's own :class:`~mnemoscope.trace.templates.PromptBuilder` (``builder.build``,
the renderer of ``prompt_with``) and tokenized as :func:`~mnemoscope.trace.pair.prepare_pair` does.

A row whose ablated context is empty (one passage, or every other passage blank) *is* the
no-context path, which the pair trace already scored: it is copied from the job's ``no_context``
log-probs, never re-scored.

The log-probabilities use the pair trace's arithmetic (float64 log-softmax of the float32 logits,
:func:`mnemoscope.trace.pair.step_stats`), so a row equals what a single unbatched forward gives
on that prompt to float tolerance (tested < 1e-5).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from mnemoscope.errors import InputError
from mnemoscope.trace.pair import PairConfig, teacher_forced
from mnemoscope.trace.passages import without_passage
from mnemoscope.trace.templates import PromptBuilder
from mnemoscope.trace.tracer import Tracer

__all__ = ["AblationJob", "ablated_prompt", "passage_logprobs", "score_ablations"]

# teacher_forced reads only ``hidden`` from its config: no state is captured here
_NO_STATES = PairConfig(hidden=False)


@dataclass(frozen=True)
class AblationJob:
    """One answer to score with some of its passages left out.

    Attributes:
        query: the query.
        passages: every retrieved passage, in the order they were joined.
        ablate: the indices ``j`` to leave out (one output row each, in this order).
        answer_ids: ``[step]`` the answer's token ids (the pair trace's ``answer_ids``).
        no_context: ``[step]`` the no-context path's log p(y_t) (``logprob_answer_without``): the row
            of a ``j`` whose removal leaves no context; required only then.
        id: the record id (named in errors).
    """

    query: str
    passages: tuple[str, ...]
    ablate: tuple[int, ...]
    answer_ids: np.ndarray
    no_context: np.ndarray | None = None
    id: str = ""


def ablated_prompt(
    builder: PromptBuilder, tracer: Tracer, query: str, passages: Sequence[str], j: int
) -> list[int]:
    """The token ids of the prompt with passage ``j`` left out: the pair's own renderer
    (``builder.build``) on :func:`~mnemoscope.trace.passages.without_passage`, tokenized as the
    pair's prompts are (:func:`~mnemoscope.trace.pair.prepare_pair`)."""
    text = builder.build(without_passage(passages, j), query, tracer.tokenizer)
    return tracer.encode(text, chat=builder.chat)


def _check(job: AblationJob) -> list[int]:
    n = len(job.passages)
    answer = [int(y) for y in np.asarray(job.answer_ids).reshape(-1)]
    if not answer:
        raise InputError("the answer is empty", record=job.id, field="answer")
    for j in job.ablate:
        if not 0 <= int(j) < n:
            raise InputError(
                f"passage index {j} is out of range for {n} passages", record=job.id, field="passages"
            )
    if len(set(job.ablate)) != len(job.ablate):
        raise InputError(f"passage indices repeat: {list(job.ablate)}", record=job.id, field="passages")
    return answer


@torch.no_grad()
def score_ablations(tracer: Tracer, builder: PromptBuilder, jobs: Sequence[AblationJob]) -> list[np.ndarray]:
    """Score every job's answer with each of its passages in ``ablate`` left out (module doc).

    Args:
        tracer: the model's tracer (its ``batch_size`` rows per forward).
        builder: the prompt builder that rendered the pairs' prompts.
        jobs: the answers and the passages to leave out.

    Returns:
        per job, ``[len(ablate) step]`` float32 log-probabilities of its answer tokens (a ``[0 step]``
        array when ``ablate`` is empty).

    Raises:
        InputError: an index out of range or repeated, an empty answer, a row with no context left
            but no ``no_context`` log-probs, an ablated prompt over the model's window.
    """
    answers = [_check(job) for job in jobs]
    out = [
        np.zeros((len(job.ablate), len(a)), dtype=np.float32) for job, a in zip(jobs, answers, strict=True)
    ]
    rows: list[tuple[int, int, list[int]]] = []  # (job, row, prompt ids) to score
    for b, job in enumerate(jobs):
        for r, j in enumerate(job.ablate):
            if not without_passage(job.passages, j):  # no context left: the no-context path
                if job.no_context is None:
                    raise InputError(
                        f"leaving passage {j} out leaves no context; pass the no-context log-probs",
                        record=job.id,
                        field="passages",
                    )
                nc = np.asarray(job.no_context, dtype=np.float32).reshape(-1)
                if nc.shape != (len(answers[b]),):
                    raise InputError(
                        f"no_context has shape {nc.shape}, expected ({len(answers[b])},)", record=job.id
                    )
                out[b][r] = nc
                continue
            ids = ablated_prompt(builder, tracer, job.query, job.passages, j)
            tracer.check_length(len(ids), record=job.id, field="passages", extra=len(answers[b]))
            rows.append((b, r, ids))
    # longest sequences first: the rows of a batch are of similar length, so little padding
    rows.sort(key=lambda x: -(len(x[2]) + len(answers[x[0]])))
    for start in range(0, len(rows), tracer.batch_size):
        chunk = rows[start : start + tracer.batch_size]
        given = [answers[b] for b, _, _ in chunk]
        logits, _, _ = teacher_forced(tracer, [ids for _, _, ids in chunk], given, _NO_STATES)
        for (b, r, _), lg, a in zip(chunk, logits, given, strict=True):
            lp = lg.double().log_softmax(-1)  # as step_stats computes logprob_answer_*
            y = torch.tensor(a, dtype=torch.long, device=lp.device).unsqueeze(-1)
            out[b][r] = lp.gather(-1, y).squeeze(-1).float().cpu().numpy()
        del logits
    return out


def passage_logprobs(
    tracer: Tracer,
    builder: PromptBuilder,
    query: str,
    passages: Sequence[str],
    ablate: Sequence[int],
    answer_ids: Any,
    *,
    no_context: np.ndarray | None = None,
) -> np.ndarray:
    """``[len(ablate) step]`` log p of ``answer_ids`` with each passage of ``ablate`` left out: one
    job of :func:`score_ablations`."""
    job = AblationJob(
        query=query,
        passages=tuple(passages),
        ablate=tuple(int(j) for j in ablate),
        answer_ids=np.asarray(answer_ids, dtype=np.int64),
        no_context=no_context,
    )
    return score_ablations(tracer, builder, [job])[0]
