"""The audit proxy's audits: one answer audited on the application's own prompt, and a bounded queue.

:func:`audit_app_prompt` audits what the application sent: its messages (system prompt, few-shot
turns, history) rendered with the profile's chat template are the with-context prompt; the same
messages with only the retrieved context removed (:func:`mnemoscope.audit.layout.
locate_context`) are the no-context prompt. Both are traced over the endpoint
(``AuditRequest(prompts=...)`` through :meth:`Auditor.audit`: the upstream's answer teacher-forced,
the audit's hooks and span as for any audit) and the verdict is the pipeline's, decided nowhere else.

:class:`AuditQueue` bounds the audits in flight (running + waiting). When it is full the answer
still passes and its audit is ``skipped`` with the reason, in the response and in the log
(shedding is visible, never silent).

Record statuses: ``audited``; ``undetermined`` (the context could not be located: reason);
``refused`` (a layout the profile was not calibrated for); ``skipped`` (shed: queue full);
``failed`` (upstream error, cut stream, client gone, audit error: ``error`` says which).

**Passages.** The located context is split into the documents it holds by the one split rule,
:func:`mnemoscope.trace.passages.split_passages` (labelled ``[1]``/``Document 1:`` blocks, a
numbered or bulleted list, or blank-line-separated blocks; :func:`located_passages`). The
context stays exactly as located (the prompts are the application's, already rendered); the
passages are verbatim slices of it and go with the request as ``AuditRequest.passages`` (the
contract for pre-rendered prompts: each passage is in the context, in order). A context of one
block, or whose blocks repeat a text, is audited as one context (``passages`` unset), as before.

Every record :func:`audit_app_prompt` writes (the context was located: ``audited``, ``refused``,
or ``failed`` in the audit) also carries the request's skeleton, ``prompt_template``
(:func:`template_record`): its messages with ``{context}`` and ``{query}`` in place of the
located context and the question, and their fingerprint, for ``calibrate --prompt-from-log``.
No retrieved document and no question is in it; the system prompt, fixed turns and any earlier
conversation turns are, verbatim.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from typing import Any

from mnemoscope.audit.layout import LayoutMismatch, Located, check_layout
from mnemoscope.audit.prompt_match import NOT_CALIBRATED_NOTE, app_prompt_of, skeleton_of
from mnemoscope.errors import InputError

__all__ = ["AuditQueue", "audit_app_prompt", "base_record", "located_passages", "summary", "template_record"]


def base_record(aid: str, meta: dict[str, Any], status: str, **fields: Any) -> dict[str, Any]:
    """A log record with what every record needs (the store hashes the whole dict)."""
    rec: dict[str, Any] = {
        "id": aid,
        "created_at": time.time(),
        "via": "proxy",
        **meta,
        "status": status,
        "anomaly_flag": False,
        "memory_flag": None,
        "latency_ms": 0.0,
    }
    rec.update(fields)
    return rec


def template_record(
    located: Located, header: dict[str, Any] | None, query_role: str = "user"
) -> dict[str, Any]:
    """``{"prompt_template": ...}``: the request's skeleton
    (:func:`~mnemoscope.audit.prompt_match.skeleton_of`, with the profile ``header``'s calibrated
    prompt if any) as the profile records a prompt (``AppPrompt.to_dict``: the messages or the
    completion prompt and the fingerprint), or ``{}`` when the request has none (never raises:
    the answer and its audit come first)."""
    try:
        sk = skeleton_of(located, app_prompt_of(header or {}), query_role=query_role)
    except Exception:  # a malformed calibrated prompt in the header: no skeleton, the audit goes on
        return {}
    if isinstance(sk, str):
        return {}
    d = sk.to_dict()
    d.pop("source", None)
    return {"prompt_template": d}


def located_passages(context: str) -> tuple[str, ...] | None:
    """The passages of a located context (:func:`~mnemoscope.trace.passages.split_passages`),
    or ``None`` when it holds fewer than two, or the same text twice (then it is one context).

    >>> located_passages("[1] Paris is in France.\\n[2] Lyon is on the Rhone.")
    ('[1] Paris is in France.', '[2] Lyon is on the Rhone.')
    >>> located_passages("One document only.") is None
    True
    """
    from mnemoscope.trace.passages import split_passages

    ps = tuple(split_passages(context))
    if len(ps) < 2 or len(set(ps)) < len(ps):
        return None
    return ps


def summary(rec: dict[str, Any]) -> dict[str, Any]:
    """The compact ``X-Mnemoscope-Audit`` header."""
    ev = rec.get("evidence") or {}
    return {
        "id": rec.get("id"),
        "status": rec.get("status"),
        "source": rec.get("source"),
        "memory_flag": rec.get("memory_flag"),
        "p_memory": rec.get("p_memory"),
        "repcs_z": ev.get("repcs_z"),
        "error": rec.get("error"),
        "reason": rec.get("reason"),
    }


def audit_app_prompt(
    auditor: Any,
    located: Located,
    answer: str,
    aid: str,
    meta: dict[str, Any],
    *,
    accept_layouts: tuple[str, ...] = (),
    record_of: Callable[[Any], dict[str, Any]],
    served: Any = None,
    query_role: str = "user",
) -> dict[str, Any]:
    """Blocking: audit one answer on the application's prompt and build its log record (never raises).

    Args:
        auditor: an endpoint :class:`~mnemoscope.audit.auditor.Auditor` (``Auditor.from_endpoint``).
        located: where the context is (:func:`~mnemoscope.audit.layout.locate_context`).
        answer: the upstream's answer text (teacher-forced on both paths).
        accept_layouts: layouts audited although the profile was not calibrated on them
            (recorded as ``layout.calibrated: false``).
        record_of: the server's result -> record shaping (``server.records.audit_record``).
        served: the with-context log-probs the upstream returned with the answer
            (``trace.endpoint_score.served_scores``): the audit then scores the no-context path only.
        query_role: the role of the query's message (``ProxySettings.query_role``), for the
            request's skeleton (:func:`template_record`).
    """
    from mnemoscope.audit.requests import AuditFailure, AuditRequest

    t0 = time.perf_counter()
    lay = {**located.to_dict(), "calibrated": True}
    header = auditor.profile.header if auditor is not None else None
    rec = base_record(
        aid, meta, "failed", layout=lay, query=located.query, **template_record(located, header, query_role)
    )
    try:
        if auditor is None:
            raise RuntimeError("no auditor configured")
        if not answer.strip():
            raise ValueError("the upstream answer is empty: nothing to audit")
        try:
            check_layout(auditor.profile.header, located, profile_name=f"the profile {auditor.profile.path}")
        except LayoutMismatch as e:
            if located.layout not in accept_layouts:
                rec.update(status="refused", reason=e.reason)
                return rec
            lay["calibrated"] = False
        pc = auditor.backend.settings.pair_config
        if located.messages_with is not None:
            if pc.template.chat_template is None:
                rec.update(
                    status="refused",
                    reason=f"the profile {auditor.profile.path} has no chat template, so chat messages cannot be "
                    "rendered as the server renders them; calibrate it with --chat-template (e.g. default)",
                )
                return rec
            assert located.messages_without is not None
            p_with = pc.template.apply_chat_template(located.messages_with, add_generation_prompt=True)
            p_without = pc.template.apply_chat_template(located.messages_without, add_generation_prompt=True)
        else:
            assert located.prompt_with is not None and located.prompt_without is not None
            p_with, p_without = located.prompt_with, located.prompt_without
        (res,) = auditor.audit(
            [
                AuditRequest(
                    located.context,
                    located.query or "(no separate query: the question is part of the prompt)",
                    answer=answer,
                    id=aid,
                    prompts=(p_with, p_without),
                    prompt_info={"layout": lay, "chat_template": pc.template.source},
                    served_logprobs=served,
                    passages=located_passages(located.context),
                )
            ]
        )
        if isinstance(res, AuditFailure):
            where = f" (field {res.field})" if res.field else ""
            rec.update(
                status="failed", error=f"{res.kind or 'AuditFailure'} {res.status}: {res.message}{where}"
            )
            return rec
        prompt = located.prompt or {}
        if prompt.get("status") == "different":
            differs = "; ".join(prompt.get("differs") or []) or "it differs"
            res = dataclasses.replace(
                res,
                notes=[
                    *res.notes,
                    f"{NOT_CALIBRATED_NOTE}: the profile was calibrated on another application prompt "
                    f"({differs}); the verdict does not carry the profile's guarantee",
                ],
            )
        if not lay["calibrated"]:
            res = dataclasses.replace(
                res,
                notes=[
                    *res.notes,
                    f"layout {located.layout!r} is not the profile's: audited anyway (--accept-layout); "
                    "the verdict does not carry the profile's guarantee",
                ],
            )
        rec.update(record_of(res), status="audited")
        rec["layout"] = lay
        rec["model"] = {k: auditor.model_info.get(k) for k in ("name", "fingerprint", "spec", "adapter")}
        rec["profile_hash"] = auditor.profile.content_hash
    except Exception as e:
        rec.update(status="failed", error=f"{type(e).__name__}: {e}")
    finally:
        rec["latency_ms"] = (time.perf_counter() - t0) * 1000.0
    return rec


class AuditQueue:
    """At most ``max_pending`` audits in flight (running + waiting), ``workers`` of them running.

    :meth:`submit` returns ``None`` when full: the caller records the audit as ``skipped``.
    Audits run in threads (``asyncio.to_thread``) and are not cancelled when the client that
    caused them goes away; :meth:`drain` waits for them at shutdown.
    """

    def __init__(self, max_pending: int = 16, workers: int = 1):
        if max_pending < 1 or workers < 1:
            raise InputError("the audit queue needs max_pending >= 1 and workers >= 1", field="audit_queue")
        self.max_pending = max_pending
        self.workers = workers
        self._sem: asyncio.Semaphore | None = None
        self.tasks: set[asyncio.Task[Any]] = set()
        self.n_shed = 0

    @property
    def pending(self) -> int:
        return len(self.tasks)

    def submit(self, job: Callable[[], Any]) -> asyncio.Task[Any] | None:
        """Schedule ``job`` (blocking, run in a thread) or ``None`` when the queue is full."""
        if len(self.tasks) >= self.max_pending:
            self.n_shed += 1
            return None
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.workers)
        task = asyncio.create_task(self._run(job, self._sem))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    @staticmethod
    async def _run(job: Callable[[], Any], sem: asyncio.Semaphore) -> Any:
        async with sem:
            return await asyncio.to_thread(job)

    async def drain(self, timeout: float) -> int:
        """Wait up to ``timeout`` s for the audits in flight; returns how many did not finish."""
        if not self.tasks:
            return 0
        _, left = await asyncio.wait(set(self.tasks), timeout=timeout)
        return len(left)
