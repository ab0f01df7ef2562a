"""LangChain, LlamaIndex and OpenTelemetry adapters on a tiny in-memory llama with a real profile.

Real framework objects throughout (LCEL chains, a ``BaseRetriever``, ``VectorStoreIndex``,
``BatchEvalRunner``, the OpenTelemetry SDK with an in-memory exporter); only the model is tiny.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")
pytest.importorskip("opentelemetry.sdk")

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda, RunnablePassthrough

from mnemoscope.integrations import MissingExtraError, otel, require
from mnemoscope.integrations.langchain import (
    AuditError,
    MnemoscopeCallbackHandler,
    MnemoscopeLLM,
    MnemoscopeRunnable,
    rag_prompt,
)

DOCS = {
    "quenmar": "Quenmar is a small town in the north. The river Zorblat runs through Quenmar.",
    "vellmoor": "Vellmoor is a town on the river Ost.",
}
SOURCES = {"context", "memory", "mixed", "undetermined"}


class KeywordRetriever(BaseRetriever):
    """Returns the documents whose key occurs in the query (a real LangChain retriever)."""

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return [Document(page_content=t, id=k) for k, t in DOCS.items() if k in query.lower()]


@pytest.fixture(scope="module")
def auditor(tiny_service: Any) -> Any:
    from mnemoscope.models import load_model
    from mnemoscope.pipelines.audit import Auditor
    from mnemoscope.pipelines.profile import load_profile

    model_dir, prof = tiny_service
    lm = load_model(str(model_dir))
    return Auditor(lm, load_profile(prof, model=lm.info))


def _chain(auditor: Any, retriever: Any = None) -> Any:
    retriever = retriever or KeywordRetriever()
    return (
        {
            "context": retriever | RunnableLambda(lambda docs: "\n\n".join(d.page_content for d in docs)),
            "question": RunnablePassthrough(),
        }
        | rag_prompt(auditor)
        | MnemoscopeLLM(auditor)
        | StrOutputParser()
    )


# -- LangChain -------------------------------------------------------------------------------------


def test_handler_pairs_retrieval_with_llm_call(auditor: Any) -> None:
    chain = _chain(auditor)
    h = MnemoscopeCallbackHandler(auditor)
    out = chain.invoke("Which river runs through Quenmar?", config={"callbacks": [h]})
    assert out == chain.invoke("Which river runs through Quenmar?")  # the handler changes nothing
    (rec,) = h.records
    assert rec.status == "ok", rec.reason
    assert rec.query == "Which river runs through Quenmar?"
    assert rec.document_ids == ["quenmar"]
    assert rec.answer == out and rec.audit is not None
    assert rec.source in SOURCES
    assert rec.audit["answer"].strip() == out.strip()  # the chain's answer is what was audited
    assert rec.context["truncated"] is False and rec.context["policy"].startswith("head")
    # the same pair through the Auditor directly gives the same verdict (no decision in the adapter)
    direct = auditor.audit_one(DOCS["quenmar"], rec.query, answer=out)
    assert direct.source == rec.source and direct.p_memory == pytest.approx(rec.p_memory)


def test_llm_without_retrieval_is_skipped(auditor: Any) -> None:
    h = MnemoscopeCallbackHandler(auditor)
    chain = rag_prompt(auditor) | MnemoscopeLLM(auditor) | StrOutputParser()
    out = chain.invoke({"context": "", "question": "Where is Vellmoor?"}, config={"callbacks": [h]})
    assert isinstance(out, str)
    (rec,) = h.records
    assert rec.status == "skipped" and "no retrieved context" in (rec.reason or "")
    # a retriever that finds nothing: skipped too, chain unaffected
    h2 = MnemoscopeCallbackHandler(auditor)
    _chain(auditor).invoke("Where is Atlantis?", config={"callbacks": [h2]})
    assert [r.status for r in h2.records] == ["skipped"]


def test_failed_audit_never_breaks_the_chain_unless_strict(auditor: Any) -> None:
    class BadRetriever(BaseRetriever):
        def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
            return [Document(page_content="bad \x07 control character in the context")]

    chain = _chain(auditor, BadRetriever())
    h = MnemoscopeCallbackHandler(auditor)
    out = chain.invoke("Where is Quenmar?", config={"callbacks": [h]})
    assert out == chain.invoke("Where is Quenmar?")
    (rec,) = h.records
    assert rec.status == "failed" and "context" in (rec.reason or "")
    with pytest.raises(AuditError, match="control character"):
        chain.invoke(
            "Where is Quenmar?", config={"callbacks": [MnemoscopeCallbackHandler(auditor, strict=True)]}
        )


def test_long_context_is_truncated_and_says_so(auditor: Any) -> None:
    class LongRetriever(BaseRetriever):
        def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
            return [Document(page_content=DOCS["quenmar"] + " filler" * 3000)]

    h = MnemoscopeCallbackHandler(auditor)
    _chain(auditor, LongRetriever()).invoke("Which river runs through Quenmar?", config={"callbacks": [h]})
    (rec,) = h.records
    assert rec.context["truncated"] is True
    assert rec.context["tokens"] > rec.context["max_tokens"]
    assert rec.context["max_tokens"] <= auditor.max_context_tokens  # and within the model's window
    assert rec.status == "ok", rec.reason


def test_batch_and_async_pair_each_input_with_its_own_retrieval(auditor: Any) -> None:
    chain = _chain(auditor)
    qs = ["Which river runs through Quenmar?", "Which river is Vellmoor on?"]
    h = MnemoscopeCallbackHandler(auditor)
    outs = chain.batch(qs, config={"callbacks": [h]})
    assert len(h.records) == 2
    by_query = {r.query: r for r in h.records}
    assert by_query[qs[0]].document_ids == ["quenmar"] and by_query[qs[1]].document_ids == ["vellmoor"]
    assert {r.answer for r in h.records} == set(outs)
    assert len({r.root_run_id for r in h.records}) == 2

    ha = MnemoscopeCallbackHandler(auditor)

    async def run() -> list[str]:
        return await chain.abatch(qs, config={"callbacks": [ha]})

    aouts = asyncio.run(run())
    assert aouts == outs
    assert sorted(r.query for r in ha.records) == sorted(qs)
    assert all(r.status == "ok" for r in ha.records)


def test_runnable_wrapper_returns_output_unchanged_plus_verdict(auditor: Any) -> None:
    chain = _chain(auditor)
    wrapped = MnemoscopeRunnable(chain, auditor)
    q = "Which river runs through Quenmar?"
    res = wrapped.invoke(q)
    assert res["output"] == chain.invoke(q)
    v = res["metadata"]["mnemoscope"]
    assert v["status"] == "ok" and v["source"] in SOURCES and len(v["audits"]) == 1
    json.dumps(v)  # JSON-ready
    batch = wrapped.batch([q, "Where is Atlantis?"])
    assert [b["metadata"]["mnemoscope"]["status"] for b in batch] == ["ok", "skipped"]
    ares = asyncio.run(wrapped.ainvoke(q))
    assert ares["output"] == res["output"] and ares["metadata"]["mnemoscope"]["source"] == v["source"]


# -- LlamaIndex ------------------------------------------------------------------------------------


def test_llamaindex_evaluator_and_batch_runner(auditor: Any) -> None:
    from llama_index.core.evaluation import BatchEvalRunner

    from mnemoscope.integrations.llamaindex import MnemoscopeEvaluator

    ev = MnemoscopeEvaluator(auditor)
    r = ev.evaluate(
        query="Which river runs through Quenmar?", response="The Zorblat.", contexts=[DOCS["quenmar"]]
    )
    assert not r.invalid_result and r.passing is not None and 0.0 <= (r.score or 0.0) <= 1.0
    direct = auditor.audit_one(DOCS["quenmar"], "Which river runs through Quenmar?", answer="The Zorblat.")
    assert r.passing == (direct.source == "context")
    assert r.score == pytest.approx(1.0 - direct.p_memory)
    assert direct.source in (r.feedback or "")
    empty = ev.evaluate(query="Where is Quenmar?", response="North.", contexts=[])
    assert empty.invalid_result and "skipped" in (empty.invalid_reason or "")

    runner = BatchEvalRunner({"mnemoscope": ev}, workers=2)
    results = runner.evaluate_response_strs(
        queries=["Which river runs through Quenmar?", "Which river is Vellmoor on?"],
        response_strs=["The Zorblat.", "The Ost."],
        contexts_list=[[DOCS["quenmar"]], [DOCS["vellmoor"]]],
    )
    assert len(results["mnemoscope"]) == 2
    assert all(not x.invalid_result for x in results["mnemoscope"])


def test_llamaindex_event_handler_audits_query_engine(auditor: Any) -> None:
    from llama_index.core import VectorStoreIndex
    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.schema import TextNode

    from mnemoscope.integrations.llamaindex import (
        MiniLMEmbedding,
        MnemoscopeEventHandler,
        MnemoscopeLlamaLLM,
        qa_prompt,
    )

    index = VectorStoreIndex(
        [TextNode(text=t, id_=k) for k, t in DOCS.items()], embed_model=MiniLMEmbedding()
    )
    engine = index.as_query_engine(
        llm=MnemoscopeLlamaLLM(auditor), similarity_top_k=1, text_qa_template=qa_prompt(auditor)
    )
    h = MnemoscopeEventHandler(auditor)
    disp = get_dispatcher()
    disp.add_event_handler(h)
    try:
        resp = engine.query("Which river runs through Quenmar?")
    finally:
        disp.event_handlers.remove(h)
    (rec,) = h.records
    assert rec.status == "ok" and rec.document_ids == ["quenmar"]
    assert rec.answer == str(resp)


# -- OpenTelemetry ---------------------------------------------------------------------------------


@pytest.fixture
def spans() -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exp = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exp))
    otel.configure(tp, attach_to_current=True)
    try:
        yield tp, exp
    finally:
        otel.configure(enabled=False)


def test_semconv_names_match_openinference() -> None:
    from openinference.semconv.trace import DocumentAttributes, SpanAttributes

    assert SpanAttributes.OPENINFERENCE_SPAN_KIND == "openinference.span.kind"
    assert SpanAttributes.INPUT_VALUE == "input.value" and SpanAttributes.OUTPUT_VALUE == "output.value"
    assert SpanAttributes.RETRIEVAL_DOCUMENTS == "retrieval.documents"
    assert DocumentAttributes.DOCUMENT_CONTENT == "document.content"
    assert SpanAttributes.LLM_MODEL_NAME == "llm.model_name"
    assert SpanAttributes.LLM_PROMPT_TEMPLATE == "llm.prompt_template.template"
    assert SpanAttributes.LLM_TOKEN_COUNT_COMPLETION == "llm.token_count.completion"


def test_audit_spans_carry_verdict_and_parent(auditor: Any, spans: Any) -> None:
    tp, exp = spans
    chain = _chain(auditor)
    h = MnemoscopeCallbackHandler(auditor)
    tracer = tp.get_tracer("app")
    with tracer.start_as_current_span("question") as parent:
        out = chain.invoke("Which river runs through Quenmar?", config={"callbacks": [h]})
    (rec,) = h.records
    finished = {s.name: s for s in exp.get_finished_spans()}
    span = finished[otel.SPAN_NAME]
    a = dict(span.attributes or {})
    assert span.parent is not None and span.parent.span_id == parent.get_span_context().span_id
    assert rec.span_id == format(span.context.span_id, "016x")
    assert a["openinference.span.kind"] == "EVALUATOR"
    assert a["input.value"] == "Which river runs through Quenmar?"
    assert a["output.value"].strip() == out.strip()
    assert a["retrieval.documents.0.document.content"] == DOCS["quenmar"]
    assert a["retrieval.documents.0.document.id"] == "quenmar"
    assert a["mnemoscope.source"] == rec.source and a["mnemoscope.p_memory"] == pytest.approx(rec.p_memory)
    assert a["mnemoscope.repcs.z"] == pytest.approx(rec.audit["evidence"]["repcs_z"])
    assert a["mnemoscope.context.truncated"] is False and a["mnemoscope.answer_forced"] is True
    assert a["mnemoscope.framework"] == "langchain"
    # attach_to_current: the verdict is also on the application's span
    assert dict(finished["question"].attributes or {})["mnemoscope.source"] == rec.source


def test_failed_and_skipped_audits_emit_spans(auditor: Any, spans: Any) -> None:
    from opentelemetry.trace import StatusCode

    from mnemoscope.pipelines.audit import AuditRequest

    _, exp = spans
    auditor.audit([AuditRequest("ctx \x07", "Where?")])
    (span,) = exp.get_finished_spans()
    a = dict(span.attributes or {})
    assert a["mnemoscope.status"] == "failed" and a["mnemoscope.error.field"] == "context"
    assert span.status.status_code == StatusCode.ERROR
    exp.clear()
    h = MnemoscopeCallbackHandler(auditor)
    _chain(auditor).invoke("Where is Atlantis?", config={"callbacks": [h]})
    (span,) = exp.get_finished_spans()
    assert dict(span.attributes or {})["mnemoscope.status"] == "skipped"


def test_missing_extra_is_one_clear_line() -> None:
    with pytest.raises(MissingExtraError, match=r"pip install 'mnemoscope\[langchain\]'"):
        require("no_such_framework_xyz", "langchain")


def _cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", **extra)
    return env


def test_tracing_off_costs_nothing_and_dead_collector_warns_once(tiny_service: Any) -> None:
    model_dir, prof = tiny_service
    code = (
        "import sys, json\n"
        "from mnemoscope.models import load_model\n"
        "from mnemoscope.pipelines.audit import Auditor\n"
        "from mnemoscope.pipelines.profile import load_profile\n"
        f"lm = load_model({str(model_dir)!r}); a = Auditor(lm, load_profile({str(prof)!r}, model=lm.info))\n"
        "for _ in range(3): a.audit_one('Quenmar lies on the Zorblat.', 'Which river is Quenmar on?')\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('opentelemetry'))))\n"
    )
    off = subprocess.run(
        [sys.executable, "-c", code], env=_cli_env(), capture_output=True, text=True, timeout=300
    )
    assert off.returncode == 0, off.stderr
    assert json.loads(off.stdout.strip().splitlines()[-1]) == []  # OpenTelemetry never imported

    from server_helpers import free_port

    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    on = subprocess.run(
        [sys.executable, "-c", code],
        env=_cli_env(OTEL_EXPORTER_OTLP_ENDPOINT=dead, OTEL_EXPORTER_OTLP_TIMEOUT="2"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert on.returncode == 0, on.stderr
    assert "opentelemetry.sdk" in on.stdout
    warnings = [ln for ln in on.stderr.splitlines() if "unreachable" in ln]
    assert len(warnings) == 1, on.stderr
    assert dead in warnings[0]


def test_cli_audit_emits_a_span_to_a_collector(tiny_service: Any, tmp_path: Path) -> None:
    """The CLI's audit reaches a real OTLP/HTTP endpoint (a tiny receiver recording the POSTs)."""
    import http.server
    import threading

    got: list[bytes] = []

    class Recv(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *a: Any) -> None:
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Recv)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        model_dir, prof = tiny_service
        r = subprocess.run(
            [sys.executable, "-m", "mnemoscope", "audit", "--model", str(model_dir), "--profile", str(prof),
             "--context", DOCS["quenmar"], "--query", "Which river runs through Quenmar?", "--json"],
            env=_cli_env(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{srv.server_port}"),
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        srv.shutdown()
    assert r.returncode == 0, r.stderr
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    names, attrs = [], {}
    for body in got:
        req = ExportTraceServiceRequest.FromString(body)
        for rs in req.resource_spans:
            for ss in rs.scope_spans:
                for s in ss.spans:
                    names.append(s.name)
                    attrs = {kv.key: kv.value for kv in s.attributes}
    assert names == [otel.SPAN_NAME]
    assert attrs["mnemoscope.source"].string_value == json.loads(r.stdout)["source"]
