"""End to end with a real Arize Phoenix server: a small offline RAG chain on the default model,
its audit spans exported over OTLP/HTTP, read back through Phoenix's REST API, and the verdicts
written back as span annotations (optionally photographed in headless Chromium).

Phoenix runs from its own virtualenv (``scripts/ci_services.sh`` installs it; ``MNEMOSCOPE_PHOENIX``
or ``~/.cache/mnemoscope-phoenix-venv/bin/phoenix``), with SQLite in a temporary folder, on
loopback ports, started once per session and always stopped. Without it the tests skip, unless
``MNEMOSCOPE_REQUIRE_SERVICES=1``, which turns the skip into a failure.

``MNEMOSCOPE_SCREENSHOT_DIR=docs/img`` refreshes ``docs/img/phoenix_trace.png``.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("httpx")

import httpx

from server_helpers import free_port

PROJECT = "mnemoscope-rag-test"
QUESTIONS = ("rel-mem-000", "rel-clean-001", "rel-mem-060")
START_TIMEOUT_S = 240


def _unavailable(reason: str) -> None:
    if os.environ.get("MNEMOSCOPE_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{reason} (MNEMOSCOPE_REQUIRE_SERVICES=1)")
    pytest.skip(reason)


def _phoenix_bin() -> Path:
    env = os.environ.get("MNEMOSCOPE_PHOENIX")
    if env:
        return Path(env)
    return Path.home() / ".cache" / "mnemoscope-phoenix-venv" / "bin" / "phoenix"


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    exe = _phoenix_bin()
    if not exe.is_file():
        _unavailable(f"Phoenix is not installed at {exe}: bash scripts/ci_services.sh installs it")
    work = tmp_path_factory.mktemp("phoenix")
    port, grpc = free_port(), free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PHOENIX_"))},
        "PHOENIX_WORKING_DIR": str(work),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc),
        "PHOENIX_TELEMETRY_ENABLED": "false",
        "OMP_NUM_THREADS": "1",
    }
    log = (work / "phoenix.log").open("wb")
    proc = subprocess.Popen([str(exe), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"Phoenix exited ({proc.returncode}): {(work / 'phoenix.log').read_text()[-2000:]}"
                )
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(
                    f"Phoenix did not start in {START_TIMEOUT_S} s: {(work / 'phoenix.log').read_text()[-2000:]}"
                )
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _attr(attrs: dict[str, Any], key: str) -> Any:
    """A flat OpenInference key, whether Phoenix returns it flat or nested."""
    if key in attrs:
        return attrs[key]
    cur: Any = attrs
    for part in key.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return None
    return cur


@pytest.fixture(scope="session")
def rag_run(phoenix: str, real_lm: Any) -> dict[str, Any]:
    """The offline RAG chain, traced into Phoenix: {question id: (question span id, record)}."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.runnables import RunnableLambda, RunnablePassthrough
    from langchain_core.vectorstores import InMemoryVectorStore

    from mnemoscope.audit.auditor import Auditor
    from mnemoscope.audit.profile import default_profile_path, load_profile
    from mnemoscope.bench.reliance import load_reliance
    from mnemoscope.integrations import otel
    from mnemoscope.integrations.langchain import (
        MiniLMEmbeddings,
        MnemoscopeCallbackHandler,
        MnemoscopeLLM,
        rag_prompt,
    )
    from mnemoscope.integrations.phoenix import tracer_provider

    items = load_reliance()
    by_id = {it["id"]: it for it in items}
    mem = [it for it in items if it["kind"] == "memorized"]
    docs = mem[:10] + mem[60:65] + [it for it in items if it["kind"] == "clean"][:15]
    store = InMemoryVectorStore(MiniLMEmbeddings())
    store.add_texts([d["context"] for d in docs], ids=[d["id"] for d in docs])
    auditor = Auditor(real_lm, load_profile(default_profile_path(real_lm.info), model=real_lm.info))
    chain = (
        {
            "context": store.as_retriever(search_kwargs={"k": 1})
            | RunnableLambda(lambda ds: "\n\n".join(d.page_content for d in ds)),
            "question": RunnablePassthrough(),
        }
        | rag_prompt(auditor)
        | MnemoscopeLLM(auditor)
        | StrOutputParser()
    )
    tp = tracer_provider(phoenix, PROJECT, simple=True)
    otel.configure(tp)
    tracer = tp.get_tracer("rag-app")
    handler = MnemoscopeCallbackHandler(auditor)
    out: dict[str, Any] = {}
    try:
        for qid in QUESTIONS:
            q = by_id[qid]["query"]
            with tracer.start_as_current_span(
                "rag.question", attributes={"openinference.span.kind": "CHAIN", "input.value": q}
            ) as span:
                answer = chain.invoke(q, config={"callbacks": [handler]})
                span.set_attribute("output.value", answer)
            out[qid] = (format(span.get_span_context().span_id, "016x"), handler.records[-1], q, answer)
        out["_model"] = auditor.model_info["name"]
        out["_contexts"] = {d["id"]: d["context"] for d in docs}
        tp.force_flush()
    finally:
        otel.configure(enabled=False)
        tp.shutdown()
    return out


def _wait_spans(url: str, n_audit: int) -> list[dict[str, Any]]:
    from mnemoscope.integrations.phoenix import get_spans

    deadline = time.monotonic() + 60
    while True:
        spans = get_spans(url, PROJECT)
        if sum(s["name"] == "mnemoscope.audit" for s in spans) >= n_audit or time.monotonic() > deadline:
            return spans
        time.sleep(0.5)


@pytest.mark.real_model
def test_audit_spans_arrive_in_phoenix_on_the_right_spans(phoenix: str, rag_run: dict[str, Any]) -> None:
    spans = _wait_spans(phoenix, len(QUESTIONS))
    by_id = {s["context"]["span_id"]: s for s in spans}
    audits = [s for s in spans if s["name"] == "mnemoscope.audit"]
    assert len(audits) == len(QUESTIONS)
    for qid in QUESTIONS:
        qspan, rec, question, answer = rag_run[qid]
        assert rec.status == "ok", (qid, rec.reason)
        s = by_id[rec.span_id]
        a = s["attributes"]
        assert s["span_kind"] == "EVALUATOR" and s["parent_id"] == qspan  # under its question's span
        assert by_id[qspan]["name"] == "rag.question"
        assert s["context"]["trace_id"] == by_id[qspan]["context"]["trace_id"]
        assert _attr(a, "input.value") == question
        assert _attr(a, "output.value").strip() == answer.strip()
        assert _attr(a, "mnemoscope.source") == rec.source
        assert _attr(a, "mnemoscope.memory_flag") == rec.memory_flag  # the verdict's flag, not CRM's
        assert _attr(a, "mnemoscope.p_memory") == pytest.approx(rec.p_memory)
        assert _attr(a, "mnemoscope.repcs.z") == pytest.approx(rec.audit["evidence"]["repcs_z"])
        assert _attr(a, "mnemoscope.rule") == "combined"
        assert _attr(a, "llm.model_name") == rag_run["_model"]
        assert _attr(a, "mnemoscope.framework") == "langchain"
        (doc_id,) = rec.document_ids
        assert _attr(a, "retrieval.documents.0.document.id") == doc_id
        assert _attr(a, "retrieval.documents.0.document.content") == rag_run["_contexts"][doc_id]


@pytest.mark.real_model
def test_verdicts_written_back_as_span_annotations(phoenix: str, rag_run: dict[str, Any]) -> None:
    from mnemoscope.integrations.phoenix import annotate

    _wait_spans(phoenix, len(QUESTIONS))
    items = [(rag_run[q][0], rag_run[q][1].audit) for q in QUESTIONS]
    assert annotate(phoenix, items) == len(QUESTIONS)
    ids = [qspan for qspan, _ in items]
    deadline = time.monotonic() + 30
    while True:
        r = httpx.get(
            f"{phoenix}/v1/projects/{PROJECT}/span_annotations", params={"span_ids": ids}, timeout=30
        )
        r.raise_for_status()
        got = {d["span_id"]: d for d in r.json()["data"] if d["name"] == "mnemoscope"}
        if len(got) == len(ids) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    for q in QUESTIONS:
        qspan, rec, _, _ = rag_run[q]
        res = got[qspan]["result"]
        assert res["label"] == rec.source
        assert res["score"] == pytest.approx(rec.p_memory)
        assert res["explanation"] == rec.audit["summary"]
        assert got[qspan]["metadata"]["memory_flag"] == rec.memory_flag


CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
]


@pytest.mark.real_model
def test_phoenix_ui_shows_the_audit_span(phoenix: str, rag_run: dict[str, Any], tmp_path: Path) -> None:
    """Phoenix's own UI, in headless Chromium, shows the audit span's verdict in the trace view."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed: pip install playwright (no browser download needed)")
    if not CHROMIUM.is_file():
        _unavailable(f"{CHROMIUM} is missing: apt-get install chromium")
    from mnemoscope.integrations.phoenix import annotate

    spans = _wait_spans(phoenix, len(QUESTIONS))
    qspan, rec, question, _ = rag_run[QUESTIONS[1]]
    annotate(phoenix, [(qspan, rec.audit), (rec.span_id, rec.audit)])
    node = next(s for s in spans if s["context"]["span_id"] == rec.span_id)
    projects = httpx.get(f"{phoenix}/v1/projects", timeout=30).json()["data"]
    pid = next(p["id"] for p in projects if p["name"] == PROJECT)
    url = f"{phoenix}/projects/{pid}/traces/{node['context']['trace_id']}?selectedSpanNodeId={node['id']}"
    out_dir = Path(os.environ.get("MNEMOSCOPE_SCREENSHOT_DIR") or tmp_path)
    out_dir.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
            page.set_default_timeout(90_000)
            page.goto(url)
            page.get_by_text("mnemoscope.audit").first.wait_for()
            page.get_by_text(question).first.wait_for()
            page.wait_for_timeout(1500)  # let the panels settle before the picture
            page.screenshot(path=str(out_dir / "phoenix_trace.png"))
        finally:
            browser.close()
    assert (out_dir / "phoenix_trace.png").stat().st_size > 10_000
