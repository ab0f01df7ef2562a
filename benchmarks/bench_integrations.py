"""What the integrations cost: a RAG chain's wall time with and without the audit, and the
install footprint of each extra.

``overhead`` (default): one run on the default model, the offline RAG pipelines of the examples
(in-memory MiniLM store over context-reliance documents, k=1, the profile's prompt, greedy
answers up to the profile's T). For each question, interleaved so that load drift hits every
variant alike (the order alternates per question):

* LangChain ``bare``: ``chain.invoke(q)`` (plain greedy generation, no mnemoscope);
  ``handler_teacher_forced``: the same chain with ``MnemoscopeCallbackHandler``, which audits the
  chain's answer teacher-forced (what any LLM gets); ``handler_audit_while_generating``: the LLM
  answers through the audit itself (``MnemoscopeLLM(audit_while_generating=True)``, both paths in
  one lockstep pass) and the handler reuses that audit; ``...+otel``: the same with audit spans on
  (OpenTelemetry SDK, batch processor, in-memory exporter: span building without a network);
* LlamaIndex ``bare``: ``engine.query(q)``; ``handler_teacher_forced`` and
  ``handler_audit_while_generating`` with ``MnemoscopeEventHandler``, as above.

Also the cost of the span hook while tracing is off (``otel.on_audit``, per call).
Reported: per-question seconds (median, total) and the ratio of totals against ``bare``.

``footprint``: for each extra, the packages it adds on top of ``pip install mnemoscope`` (its
requirement closure in this environment minus the core dependencies' closure), their installed
size (the files each distribution's RECORD lists) and their wheel download size
(``pip download --no-deps`` of the installed versions); the Phoenix virtualenv's size.

Usage:
    python benchmarks/bench_integrations.py overhead [--n 8] [--rounds 2] [--threads 1]
    python benchmarks/bench_integrations.py footprint
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "integrations"
EXTRAS = ("langchain", "llamaindex", "otel")


def _join(docs: Any) -> str:
    return "\n\n".join(d.page_content for d in docs)


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def overhead(args: argparse.Namespace) -> dict[str, Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(args.threads)
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.runnables import RunnableLambda, RunnablePassthrough
    from langchain_core.vectorstores import InMemoryVectorStore
    from llama_index.core import VectorStoreIndex
    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.schema import TextNode
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from mnemoscope.audit.auditor import Auditor
    from mnemoscope.bench.reliance import load_reliance
    from mnemoscope.integrations import otel
    from mnemoscope.integrations.langchain import (
        MiniLMEmbeddings,
        MnemoscopeCallbackHandler,
        MnemoscopeLLM,
        rag_prompt,
    )
    from mnemoscope.integrations.llamaindex import (
        MiniLMEmbedding,
        MnemoscopeEventHandler,
        MnemoscopeLlamaLLM,
        qa_prompt,
    )
    from mnemoscope.provenance import provenance

    load_start = _load()
    items = load_reliance()
    mem = [it for it in items if it["kind"] == "memorized"]
    clean = [it for it in items if it["kind"] == "clean"]
    docs = mem[:10] + mem[60:70] + clean[:20]
    half = args.n // 2
    questions = [it["query"] for it in (mem[:half] + clean[: args.n - half])]

    auditor = Auditor.from_spec("default")
    store = InMemoryVectorStore(MiniLMEmbeddings())
    store.add_texts([d["context"] for d in docs], ids=[d["id"] for d in docs])

    def lc_chain(fused: bool) -> Any:
        return (
            {
                "context": store.as_retriever(search_kwargs={"k": 1}) | RunnableLambda(_join),
                "question": RunnablePassthrough(),
            }
            | rag_prompt(auditor)
            | MnemoscopeLLM(auditor, audit_while_generating=fused)
            | StrOutputParser()
        )

    plain, fused = lc_chain(False), lc_chain(True)
    index = VectorStoreIndex(
        [TextNode(text=d["context"], id_=d["id"]) for d in docs], embed_model=MiniLMEmbedding()
    )

    def li_engine(fused: bool) -> Any:
        return index.as_query_engine(
            llm=MnemoscopeLlamaLLM(auditor, audit_while_generating=fused),
            similarity_top_k=1,
            text_qa_template=qa_prompt(auditor),
        )

    li_plain, li_fused = li_engine(False), li_engine(True)
    handler = MnemoscopeCallbackHandler(auditor)
    li_handler = MnemoscopeEventHandler(auditor)
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(BatchSpanProcessor(exporter))
    disp = get_dispatcher()

    def lc(chain: Any, with_handler: bool, spans: bool = False) -> Callable[[str], str]:
        def run(q: str) -> str:
            if spans:
                otel.configure(tp)
            try:
                cfg: Any = {"callbacks": [handler]} if with_handler else None
                return str(chain.invoke(q, config=cfg))
            finally:
                if spans:
                    otel.configure(enabled=False)

        return run

    def li(engine: Any, with_handler: bool) -> Callable[[str], str]:
        def run(q: str) -> str:
            if not with_handler:
                return str(engine.query(q))
            disp.add_event_handler(li_handler)
            try:
                return str(engine.query(q))
            finally:
                disp.event_handlers.remove(li_handler)

        return run

    variants: dict[str, dict[str, Callable[[str], str]]] = {
        "langchain": {
            "bare": lc(plain, False),
            "handler_teacher_forced": lc(plain, True),
            "handler_audit_while_generating": lc(fused, True),
            "handler_audit_while_generating+otel": lc(fused, True, spans=True),
        },
        "llamaindex": {
            "bare": li(li_plain, False),
            "handler_teacher_forced": li(li_plain, True),
            "handler_audit_while_generating": li(li_fused, True),
        },
    }
    for fns in variants.values():  # warm-up: first calls pay one-off costs
        for fn in fns.values():
            fn(questions[0])
    times: dict[str, dict[str, list[float]]] = {fw: {k: [] for k in v} for fw, v in variants.items()}
    answers: dict[str, dict[str, list[str]]] = {fw: {k: [] for k in v} for fw, v in variants.items()}
    for r in range(args.rounds):
        for i, q in enumerate(questions):
            for fw, vs in variants.items():
                order = list(vs) if (i + r) % 2 == 0 else list(reversed(vs))
                for name in order:
                    t0 = time.perf_counter()
                    a = vs[name](q)
                    times[fw][name].append(time.perf_counter() - t0)
                    if r == 0:
                        answers[fw][name].append(a)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    tp.force_flush()
    n_spans = len(exporter.get_finished_spans())
    reuse = {
        "langchain": sum(r.audited_while_generating for r in handler.records),
        "llamaindex": sum(r.audited_while_generating for r in li_handler.records),
    }
    statuses = sorted({r.status for r in handler.records + li_handler.records})

    # the span hook while tracing is off: one flag check per Auditor.audit call
    otel.configure(enabled=False)
    reps = 200_000
    t0 = time.perf_counter()
    for _ in range(reps):
        otel.on_audit(None, (), (), 0)
    off_ns = (time.perf_counter() - t0) / reps * 1e9

    out: dict[str, Any] = {
        "provenance": provenance(),
        "settings": {
            "model": auditor.model_info.get("name"),
            "torch_threads": args.threads,
            "questions": len(questions),
            "rounds": args.rounds,
            "store_documents": len(docs),
            "k": 1,
            "max_new_tokens": auditor.profile.max_new_tokens,
            "load_average_start": load_start,
            "load_average_end": _load(),
            "note": "2-core VM shared with other jobs; load averages above say how busy it was",
        },
        "frameworks": {},
        "spans_exported": n_spans,
        "records_audited_while_generating": reuse,
        "record_statuses": statuses,
        "otel_hook_off_ns_per_call": round(off_ns, 1),
    }
    for fw, ts in times.items():
        bare = sum(ts["bare"])
        out["frameworks"][fw] = {
            name: {
                "median_s": round(statistics.median(v), 4),
                "total_s": round(sum(v), 3),
                "ratio_to_bare": round(sum(v) / bare, 3),
                "added_s_per_question": round((sum(v) - bare) / len(v), 4),
                "n": len(v),
            }
            for name, v in ts.items()
        }
        out["frameworks"][fw]["same_answers"] = all(
            answers[fw][name] == answers[fw]["bare"] for name in answers[fw]
        )
    return out


# -- footprint -------------------------------------------------------------------------------------


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _closure(reqs: list[str], extras: tuple[str, ...] = ()) -> set[str]:
    from packaging.requirements import Requirement

    seen: set[str] = set()
    todo = [(r, extras) for r in reqs]
    while todo:
        raw, ex = todo.pop()
        req = Requirement(raw)
        env_ok = req.marker is None or any(req.marker.evaluate({"extra": e}) for e in (ex or ("",)))
        if not env_ok:
            continue
        name = _norm(req.name)
        if name in seen:
            continue
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            continue
        seen.add(name)
        for sub in dist.requires or []:
            sr = Requirement(sub)
            if sr.marker is not None and "extra" in str(sr.marker):
                if not any(sr.marker.evaluate({"extra": e}) for e in req.extras):
                    continue
            elif sr.marker is not None and not sr.marker.evaluate({"extra": ""}):
                continue
            todo.append((sub.split(";")[0], tuple(req.extras)))
    return seen


def _installed_bytes(name: str) -> int:
    dist = metadata.distribution(name)
    total = 0
    for f in dist.files or []:
        p = Path(str(dist.locate_file(f)))
        if p.is_file():
            total += p.stat().st_size
    return total


def footprint(args: argparse.Namespace) -> dict[str, Any]:
    import tomllib

    from mnemoscope.provenance import provenance

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = list(project["dependencies"])
    by_extra = {e: list(project["optional-dependencies"][e]) for e in EXTRAS}
    base = _closure(core)
    out: dict[str, Any] = {"provenance": provenance(), "base_packages": len(base), "extras": {}}
    tmp = Path(tempfile.mkdtemp(prefix="mnemoscope-footprint-"))
    for e in EXTRAS:
        added = sorted(_closure(by_extra[e]) - base)
        pins = [f"{n}=={metadata.version(n)}" for n in added]
        dl = tmp / e
        dl.mkdir()
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--disable-pip-version-check", "-d", str(dl), *pins],
            check=True,
        )  # fmt: skip
        wheel_bytes = sum(p.stat().st_size for p in dl.iterdir())
        out["extras"][e] = {
            "requirements": by_extra[e],
            "packages_added": pins,
            "n_packages": len(pins),
            "download_mb": round(wheel_bytes / 1e6, 2),
            "installed_mb": round(sum(_installed_bytes(n) for n in added) / 1e6, 2),
            "download_seconds": round(time.perf_counter() - t0, 1),
        }
    venv = Path(os.environ.get("MNEMOSCOPE_PHOENIX_VENV", Path.home() / ".cache" / "mnemoscope-phoenix-venv"))
    if venv.is_dir():
        size = sum(p.stat().st_size for p in venv.rglob("*") if p.is_file() and not p.is_symlink())
        py = venv / "bin" / "python"
        ver = subprocess.run(
            [str(py), "-c", "import phoenix; print(phoenix.__version__)"], capture_output=True, text=True
        )
        n = subprocess.run([str(py), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True)
        out["phoenix_venv"] = {
            "path": str(venv),
            "arize_phoenix": ver.stdout.strip(),
            "n_packages": len(n.stdout.splitlines()),
            "installed_mb": round(size / 1e6, 1),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", nargs="?", choices=["overhead", "footprint"], default="overhead")
    ap.add_argument("--n", type=int, default=8, help="questions (half well-known facts, half invented)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None, help="default: benchmarks/results/integrations/<what>.json")
    args = ap.parse_args()
    res = overhead(args) if args.what == "overhead" else footprint(args)
    path = Path(args.out) if args.out else OUT / f"{args.what}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
