"""What an endpoint audit costs, per scoring path, against the in-process audit and against serving
the answer alone (issue 25), measured in ONE run on the same machine and model.

For each server and scoring path (``--paths``: ``lcp:echo``, ``lcp:positions``, ``lcp:grammar`` on
llama-cpp-python, ``native:native`` on llama.cpp's C++ llama-server when ``$MNEMOSCOPE_LLAMA_SERVER``
names the binary),
each item of a stratified subset of the verified context-reliance set (both labels) is:

1. **served**: one greedy ``/v1/completions`` request on the with-context prompt (what the
   application pays without any audit);
2. **audited, generating** (``mnemoscope audit --endpoint``): ``trace_endpoint_pair`` (the audit
   generates the answer itself and scores both paths) with, unless ``--no-closed-book``, the
   model's closed-book greedy answer (``closed_book_tokens = T``: what an audit of a profile whose
   verdict reads ``closed_book_agreement`` makes, as the default calibration's profiles do). Each
   of its requests is attributed to a phase (``gen_phases``): ``with_context`` (the generation with
   log-probs, which replaces serving), ``no_context`` (the forced no-context pass), ``closed_book``
   (what the closed-book answer asked beyond the no-context pass) and ``tokenize``. Right after
   it, not flushed (the cache as the audit left it), the closed-book answer generated whole on the
   no-context prompt is measured too (``cb_whole``: how audits made it before it was read off the
   no-context pass);
3. **audited, given answer** (the proxy's case): ``trace_endpoint_pair(answer=served text)``;
4. on ``positions``/``grammar``/``native``, **served with log-probs, then audited on them** (the proxy asks
   the upstream for the answer's top-k log-probs, so the audit scores the no-context path only):
   the serving request with ``logprobs: k`` (its extra server CPU counts as audit load) and, right
   after it, ``trace_endpoint_prompts(answer=..., served=...)``. (Before 2026-11-27 the serving
   request ran before modes 2-3 and the served audit followed the given-answer audit, whose
   no-context pass had left the no-context prompt in the server's cache: the served audit's
   figures were too low by that prompt's evaluation.)

Every mode starts cold: the server's cached prompt is replaced first (``--no-flush``: not).

For each, the wall time and the server process's CPU seconds (``/proc/<pid>/stat``, utime + stime,
all threads) are recorded; the client's CPU too. The in-process reference is the in-process RePCS
trace of the same items (``trace_lockstep``, batch 1, hidden states off and on) with torch on
``--torch-threads`` threads.

Ratios reported per path (targets of issue 25):
* ``wall_ratio`` = mean endpoint audit wall / mean in-process audit wall (target <= 1.5);
* ``extra_load_generating`` = (server CPU of the generating audit's trace - server CPU of serving) /
  server CPU of serving (the audit did the serving itself; target <= 0.5), without the closed-book
  answer (as measured before it was added here); ``extra_load_generating_closed_book`` with it, and
  ``extra_load_generating_closed_book_whole`` with it generated whole; ``decomposition``: serving,
  with-context scoring (the audit's generation beyond serving), the no-context pass, the
  closed-book pass (read off the no-context pass + generated on), the closed-book answer generated
  whole, and tokenization, in CPU-seconds and as x of serving;
* ``extra_load_given`` = server CPU of the given-answer audit / server CPU of serving (the proxy's
  audit comes on top of the app's request);
* ``extra_load_given_served`` = (server CPU of serving with log-probs - of serving without + of the
  audit on the served log-probs) / server CPU of serving.

    OMP_NUM_THREADS=1 python benchmarks/bench_endpoint_cost.py --n-per-label 10 --server-threads 1

``--wait-load L`` waits (polling every 30 s, at most ``--wait-max`` seconds) until the 1-minute
load average is below L before measuring; the loads at start and end are recorded either way.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # llama_servers: loopback server launchers
VERIFIED = ROOT / "benchmarks" / "results" / "verdict" / "verified.jsonl"
OUT = ROOT / "benchmarks" / "results" / "endpoint" / "cost.json"
TICK = os.sysconf("SC_CLK_TCK")
FLUSH_PROMPT = "Unrelated text that shares no prefix with the audited prompts."


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system, all threads) of a process, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def subset(items: list[dict[str, Any]], n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for lab in (0, 1):
        pool = [it for it in items if it["label"] == lab]
        rng.shuffle(pool)
        out += pool[:n]
    return out


def stats(xs: list[float]) -> dict[str, float]:
    a = np.asarray([x for x in xs if x == x], float)
    if a.size == 0:
        return {"mean": float("nan"), "median": float("nan"), "n": 0}
    return {"mean": float(a.mean()), "median": float(np.median(a)), "n": int(a.size)}


def phase_of(path: str, body: dict[str, Any] | None, ids_with: list[int], p_with: str) -> str:
    """Which part of a generating audit one request is (:func:`run_path`'s ``gen_phases``)."""
    if "tokenize" in path:
        return "tokenize"
    body = body or {}
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt[: len(ids_with)] == ids_with:
        return "with_context"
    if isinstance(prompt, str) and prompt.startswith(p_with):
        return "with_context"
    if (
        body.get("grammar")
        or body.get("logit_bias")
        or body.get("echo")
        or body.get("logprobs")
        or body.get("n_probs")
    ):
        return "no_context"
    return "closed_book"


def wait_for_load(limit: float, max_s: float, poll_s: float = 30.0) -> dict[str, Any]:
    """Wait until the 1-minute load average is below ``limit`` (at most ``max_s`` seconds)."""
    t0 = time.time()
    seen = [os.getloadavg()[0]]
    while seen[-1] >= limit and time.time() - t0 < max_s:
        time.sleep(poll_s)
        seen.append(os.getloadavg()[0])
    return {
        "limit": limit,
        "waited_s": round(time.time() - t0, 1),
        "reached": seen[-1] < limit,
        "load_1min_polled": seen,
    }


def mean_of(rows: list[dict[str, Any]], key: str) -> float:
    return stats([r[key] for r in rows if key in r])["mean"]


def run_path(
    server_kind: str, method: str, items: list[dict[str, Any]], args: argparse.Namespace
) -> dict[str, Any]:
    from llama_servers import LlamaCppServer, LlamaServerNative
    from mnemoscope.models.endpoint import EndpointClient, EndpointConfig
    from mnemoscope.models.loader import default_gguf_path
    from mnemoscope.trace.endpoint import (
        EndpointPairConfig,
        load_chat_template,
        trace_endpoint_pair,
        trace_endpoint_prompts,
    )
    from mnemoscope.trace.endpoint_score import served_scores
    from mnemoscope.trace.templates import PromptBuilder

    cls = LlamaServerNative if server_kind == "native" else LlamaCppServer
    # llama-server keeps evicted prompts' KV in RAM (--cache-ram, 8 GiB by default) and restores them:
    # off, so that no measured request re-uses another mode's prompt (llama-cpp-python has no such cache)
    extra = ["--cache-ram", "0"] if server_kind == "native" else []
    server = cls(default_gguf_path(), n_threads=args.server_threads, extra_args=extra).start(timeout=300)
    builder = PromptBuilder(template="A", chat=True)
    tpl = load_chat_template("default")
    cfg = EndpointPairConfig(builder=builder, template=tpl, max_new_tokens=args.T, top_k=args.k)
    rows: list[dict[str, Any]] = []
    load_start = os.getloadavg()
    try:
        client = EndpointClient(EndpointConfig(server.base_url, concurrency=1, timeout=900, method=method))
        caps = client.require_teacher_forcing()
        pid = int(server.pid or 0)
        cb_tokens = args.T if args.closed_book else None
        # warm-up (not timed): loads pages, fills caches
        w = items[0]
        trace_endpoint_pair(client, "warmup", w["context"], w["query"], cfg, closed_book_tokens=cb_tokens)
        # every request's server CPU, attributed to a phase of the generating audit (phase_of)
        request = client.request
        phases: dict[str, float] | None = None
        ids_with: list[int] = []
        p_with = ""

        def attributed(method_: str, path: str, body: Any = None, *, root: bool = False) -> Any:
            c0 = proc_cpu(pid)
            try:
                return request(method_, path, body, root=root)
            finally:
                if phases is not None:
                    ph = phase_of(path, body, ids_with, p_with)
                    phases[ph] = phases.get(ph, 0.0) + proc_cpu(pid) - c0

        client.request = attributed  # type: ignore[method-assign]
        for it in items:
            row: dict[str, Any] = {"id": it["id"], "label": it["label"]}
            p_with, p_without = builder.pair(it["context"], it["query"], tpl)
            ids_with = client.tokenize(p_with) if server_kind == "native" else []

            def flush() -> None:
                """Not timed: replace the server's cached prompt, so that each measured request starts
                cold (no KV prefix of the previous mode's identical prompt to re-use)."""
                if args.flush:
                    client.completion(FLUSH_PROMPT, max_tokens=1)

            # 1. serving alone
            flush()
            c0, t0 = proc_cpu(pid), time.perf_counter()
            ch = client.completion(p_with, max_tokens=args.T, extra={"stop": list(tpl.end_texts)})
            row["serve_wall"] = time.perf_counter() - t0
            row["serve_server_cpu"] = proc_cpu(pid) - c0
            served = str(ch.get("text", ""))
            row["served_tokens"] = (ch.get("usage") or {}).get("completion_tokens")
            # 2. audit that generates, 3. audit of the given (served) answer
            modes: list[tuple[str, Any, Any]] = [("gen", None, None), ("given", served, None)]
            if method in ("positions", "grammar", "native"):
                modes.append(("served", None, None))
            for mode, answer, sv in modes:
                flush()
                if mode == "served":
                    # 4. the proxy asks the upstream for the answer's log-probs: serving costs more, the audit
                    # less; the audit follows its serving request at once, as in the proxy (the server's cache
                    # then holds the with-context prompt, not the no-context one)
                    c0, t0 = proc_cpu(pid), time.perf_counter()
                    ch2 = client.completion(
                        p_with, max_tokens=args.T, logprobs=args.k, extra={"stop": list(tpl.end_texts)}
                    )
                    row["serve_lp_wall"] = time.perf_counter() - t0
                    row["serve_lp_server_cpu"] = proc_cpu(pid) - c0
                    sv = served_scores(
                        {"choices": [ch2], "usage": ch2.get("usage")}, by_id=method == "native"
                    )
                    answer = str(ch2.get("text", ""))
                if mode == "gen":
                    phases = {}
                c0, p0, t0 = proc_cpu(pid), time.process_time(), time.perf_counter()
                n0 = client.n_requests
                try:
                    if sv is not None:
                        p_w, p_wo = builder.pair(it["context"], it["query"], tpl)
                        tr, _ = trace_endpoint_prompts(
                            client, it["id"], p_w, p_wo, cfg, answer=answer, served=sv
                        )
                    else:
                        tr, _ = trace_endpoint_pair(
                            client,
                            it["id"],
                            it["context"],
                            it["query"],
                            cfg,
                            answer=answer,
                            closed_book_tokens=cb_tokens if mode == "gen" else None,
                        )
                    if mode == "gen" and cb_tokens:
                        row["gen_closed_book"] = tr.backend.get("closed_book")
                        row["gen_closed_book_answer"] = tr.answer_without
                    row[f"{mode}_method"] = tr.backend.get("method")
                    row[f"{mode}_steps"] = tr.n_steps
                    row[f"{mode}_notes"] = tr.backend.get("notes", [])
                    from mnemoscope.detectors.repcs import RePCS

                    row[f"{mode}_z"] = float(RePCS(estimator="topk", k=args.k).z([tr])[0])
                except Exception as e:  # an item the path refuses is recorded, not hidden
                    row[f"{mode}_error"] = f"{type(e).__name__}: {e}"
                row[f"{mode}_wall"] = time.perf_counter() - t0
                row[f"{mode}_server_cpu"] = proc_cpu(pid) - c0
                row[f"{mode}_client_cpu"] = time.process_time() - p0
                row[f"{mode}_requests"] = client.n_requests - n0
                if mode == "gen":
                    row["gen_phases"], phases = phases, None
                    if cb_tokens:
                        # the closed-book answer generated whole, as audits made it before (not flushed: the
                        # cache as the audit left it, the no-context prompt in it)
                        c0 = proc_cpu(pid)
                        whole = client.completion(p_without, max_tokens=cb_tokens)
                        row["cb_whole_server_cpu"] = proc_cpu(pid) - c0
                        row["cb_whole_same"] = str(whole.get("text", "")) == row.get("gen_closed_book_answer")
            rows.append(row)
            print(
                f"{server_kind}:{method} {it['id']}: serve {row['serve_wall']:.2f}s/{row['serve_server_cpu']:.2f}cpu "
                f"audit {row['gen_wall']:.2f}s/{row['gen_server_cpu']:.2f}cpu given {row['given_wall']:.2f}s "
                f"{row.get('gen_error', '')[:80]}",
                flush=True,
            )
        client.close()
    finally:
        server.stop()
    ok = [r for r in rows if "gen_error" not in r]
    serve_cpu = stats([r["serve_server_cpu"] for r in ok])["mean"]
    for r in ok:
        ph = r.get("gen_phases") or {}
        for k in ("with_context", "no_context", "closed_book", "tokenize"):
            r[f"gen_{k}_server_cpu"] = ph.get(k, 0.0)
    cb_cpu = mean_of(ok, "gen_closed_book_server_cpu")
    gen_cpu = stats([r["gen_server_cpu"] for r in ok])["mean"] - cb_cpu  # the trace alone
    parts = {
        "serving": serve_cpu,
        "with_context_scoring": mean_of(ok, "gen_with_context_server_cpu") - serve_cpu,
        "no_context_pass": mean_of(ok, "gen_no_context_server_cpu"),
        "closed_book_pass": cb_cpu,
        "closed_book_generated_whole": mean_of(ok, "cb_whole_server_cpu") if args.closed_book else None,
        "tokenize": mean_of(ok, "gen_tokenize_server_cpu"),
    }
    decomposition = {
        k: {"server_cpu_s": v, "x_serving": (v / serve_cpu if serve_cpu and v is not None else None)}
        for k, v in parts.items()
    }
    given_cpu = stats([r["given_server_cpu"] for r in ok if "given_error" not in r])["mean"]
    served_part: dict[str, Any] = {}
    sv_ok = [r for r in ok if "served_server_cpu" in r and "served_error" not in r]
    if sv_ok:
        lp_cpu = stats([r["serve_lp_server_cpu"] for r in sv_ok])["mean"]
        sv_cpu = stats([r["served_server_cpu"] for r in sv_ok])["mean"]
        base_cpu = stats([r["serve_server_cpu"] for r in sv_ok])["mean"]
        served_part = {
            "n_refused_served": sum("served_error" in r for r in rows),
            "serve_logprobs_server_cpu": stats([r["serve_lp_server_cpu"] for r in sv_ok]),
            "audit_served_wall": stats([r["served_wall"] for r in sv_ok]),
            "audit_served_server_cpu": stats([r["served_server_cpu"] for r in sv_ok]),
            "extra_load_given_served": (lp_cpu - base_cpu + sv_cpu) / base_cpu if base_cpu else None,
        }
    return {
        "server": server_kind,
        "server_command": " ".join(server.command[1:] if server_kind != "native" else server.command),
        "server_threads": args.server_threads,
        "method": method,
        "endpoint_method": caps.method,
        "n": len(rows),
        "n_refused": {"gen": len(rows) - len(ok), "given": sum("given_error" in r for r in rows)},
        "errors": sorted({r[k] for r in rows for k in ("gen_error", "given_error") if k in r})[:10],
        "serve_wall": stats([r["serve_wall"] for r in ok]),
        "serve_server_cpu": stats([r["serve_server_cpu"] for r in ok]),
        "audit_gen_wall": stats([r["gen_wall"] for r in ok]),
        "audit_gen_server_cpu": stats([r["gen_server_cpu"] for r in ok]),
        "audit_gen_client_cpu": stats([r["gen_client_cpu"] for r in ok]),
        "audit_gen_requests": stats([r["gen_requests"] for r in ok]),
        "audit_given_wall": stats([r["given_wall"] for r in ok if "given_error" not in r]),
        "audit_given_server_cpu": stats([r["given_server_cpu"] for r in ok if "given_error" not in r]),
        "extra_load_generating": (gen_cpu - serve_cpu) / serve_cpu if serve_cpu else None,
        "extra_load_generating_closed_book": (
            (gen_cpu + cb_cpu - serve_cpu) / serve_cpu if serve_cpu and args.closed_book else None
        ),
        "extra_load_generating_closed_book_whole": (
            (gen_cpu + parts["closed_book_generated_whole"] - serve_cpu) / serve_cpu
            if serve_cpu and args.closed_book
            else None
        ),
        "decomposition": decomposition,
        "closed_book": {
            "read_whole": sum(1 for r in ok if (r.get("gen_closed_book") or {}).get("generated") is False),
            "tokens_read": stats([(r.get("gen_closed_book") or {}).get("tokens_read", 0) for r in ok]),
            "same_as_generated_whole": sum(1 for r in ok if r.get("cb_whole_same")),
        }
        if args.closed_book
        else None,
        "extra_load_given": given_cpu / serve_cpu if serve_cpu else None,
        **served_part,
        "loadavg_start": load_start,
        "loadavg_end": os.getloadavg(),
        "rows": rows,
    }


def run_inprocess(items: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from mnemoscope.models import load_model
    from mnemoscope.trace import PairConfig, PairItem, Tracer, prepare_pair
    from mnemoscope.trace.lockstep import trace_lockstep
    from mnemoscope.trace.templates import PromptBuilder

    torch.set_num_threads(args.torch_threads)
    lm = load_model("default")
    tracer = Tracer(lm, batch_size=1)
    builder = PromptBuilder(template="A", chat=True)
    out: dict[str, Any] = {"torch_threads": args.torch_threads}
    for hidden in (False, True):
        pc = PairConfig(
            builder=builder, max_new_tokens=args.T, answer_without=False, top_k=args.k, hidden=hidden
        )
        w = items[0]
        trace_lockstep(tracer, [prepare_pair(tracer, PairItem("warmup", w["context"], w["query"]), pc)], pc)
        walls, cpus = [], []
        for it in items:
            t0, p0 = time.perf_counter(), time.process_time()
            prep = prepare_pair(tracer, PairItem(it["id"], it["context"], it["query"]), pc)
            trace_lockstep(tracer, [prep], pc)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - p0)
        out["hidden" if hidden else "no_hidden"] = {"wall": stats(walls), "cpu": stats(cpus)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-per-label", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--server-threads", type=int, default=1)
    ap.add_argument("--torch-threads", type=int, default=1)
    ap.add_argument("--T", type=int, default=32)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--paths", default="lcp:grammar,lcp:positions,lcp:echo,native:native")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument(
        "--no-flush",
        dest="flush",
        action="store_false",
        help="do not flush the server's cached prompt before each measured request (the default flushes)",
    )
    ap.add_argument(
        "--no-closed-book",
        dest="closed_book",
        action="store_false",
        help="the generating audit without the closed-book answer (a profile that does not read it)",
    )
    ap.add_argument("--wait-load", type=float, default=None, help="wait until the 1-min load is below this")
    ap.add_argument("--wait-max", type=float, default=1500.0, help="seconds to wait at most (--wait-load)")
    ap.add_argument("--note", default="")
    args = ap.parse_args()

    from llama_servers import native_server_binary
    from mnemoscope.provenance import provenance

    items = subset(
        [json.loads(x) for x in VERIFIED.read_text().splitlines() if x.strip()], args.n_per_label, args.seed
    )
    waited = wait_for_load(args.wait_load, args.wait_max) if args.wait_load is not None else None
    load0 = os.getloadavg()
    t_start = time.time()
    report: dict[str, Any] = {
        "provenance": provenance(),
        "what": "per-item cost of an endpoint audit per scoring path vs the in-process audit and vs serving alone",
        "items": {
            "n": len(items),
            "subset": f"{args.n_per_label} per label, seed {args.seed}",
            "ids": [i["id"] for i in items],
        },
        "settings": {
            "template": "A",
            "chat": True,
            "chat_template": "default",
            "T": args.T,
            "k": args.k,
            "flush_between_modes": args.flush,
            "native_server_args": ["--cache-ram", "0"],
            "closed_book": args.closed_book,
        },
        "machine": {"cpus": os.cpu_count(), "shared": True, "loadavg_start": load0, "wait_for_load": waited},
        "note": args.note,
        "paths": [],
    }
    report["inprocess"] = run_inprocess(items, args)
    inproc_wall = report["inprocess"]["no_hidden"]["wall"]["mean"]
    for spec in [p.strip() for p in args.paths.split(",") if p.strip()]:
        kind, method = spec.split(":")
        if kind == "native" and native_server_binary() is None:
            report["paths"].append(
                {
                    "server": kind,
                    "method": method,
                    "skipped": "no llama-server binary ($MNEMOSCOPE_LLAMA_SERVER)",
                }
            )
            continue
        r = run_path(kind, method, items, args)
        r["wall_ratio_vs_inprocess"] = r["audit_gen_wall"]["mean"] / inproc_wall if inproc_wall else None
        r["wall_ratio_vs_inprocess_hidden"] = (
            r["audit_gen_wall"]["mean"] / report["inprocess"]["hidden"]["wall"]["mean"]
        )
        report["paths"].append(r)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    report["machine"]["loadavg_end"] = os.getloadavg()
    report["seconds_total"] = time.time() - t_start
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    summary = [
        {
            k: p.get(k)
            for k in (
                "server",
                "method",
                "endpoint_method",
                "n_refused",
                "wall_ratio_vs_inprocess",
                "extra_load_generating",
                "extra_load_generating_closed_book",
                "extra_load_generating_closed_book_whole",
                "extra_load_given",
                "extra_load_given_served",
                "skipped",
            )
        }
        | {
            "audit_wall": p.get("audit_gen_wall", {}).get("mean"),
            "serve_cpu": p.get("serve_server_cpu", {}).get("mean"),
        }
        for p in report["paths"]
    ]
    print(json.dumps({"inprocess": report["inprocess"], "paths": summary}, indent=1))


if __name__ == "__main__":
    main()
