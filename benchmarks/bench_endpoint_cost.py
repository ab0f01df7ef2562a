"""What an endpoint audit costs, per scoring path, against the in-process audit and against serving
the answer alone (issue 25), measured in ONE run on the same machine and model.

For each server and scoring path (``--paths``: ``lcp:echo``, ``lcp:positions``, ``lcp:grammar`` on
llama-cpp-python, ``native:native`` on llama.cpp's C++ llama-server when ``$MNEMOSCOPE_LLAMA_SERVER``
names the binary),
each item of a stratified subset of the verified context-reliance set (both labels) is:

1. **served**: one greedy ``/v1/completions`` request on the with-context prompt (what the
   application pays without any audit);
2. **audited, generating** (``mnemoscope audit --endpoint``): ``trace_endpoint_pair`` (the audit
   generates the answer itself and scores both paths);
3. **audited, given answer** (the proxy's case): ``trace_endpoint_pair(answer=served text)``;
4. on ``positions``/``grammar``/``native``, **served with log-probs, then audited on them** (the proxy asks
   the upstream for the answer's top-k log-probs, so the audit scores the no-context path only):
   the serving request with ``logprobs: k`` (its extra server CPU counts as audit load) and
   ``trace_endpoint_pair(answer=..., served=...)``.

For each, the wall time and the server process's CPU seconds (``/proc/<pid>/stat``, utime + stime,
all threads) are recorded; the client's CPU too. The in-process reference is the in-process RePCS
trace of the same items (``trace_lockstep``, batch 1, hidden states off and on) with torch on
``--torch-threads`` threads.

Ratios reported per path (targets of issue 25):
* ``wall_ratio`` = mean endpoint audit wall / mean in-process audit wall (target <= 1.5);
* ``extra_load_generating`` = (server CPU of the generating audit - server CPU of serving) / server
  CPU of serving (the audit did the serving itself; target <= 0.5);
* ``extra_load_given`` = server CPU of the given-answer audit / server CPU of serving (the proxy's
  audit comes on top of the app's request);
* ``extra_load_given_served`` = (server CPU of serving with log-probs - of serving without + of the
  audit on the served log-probs) / server CPU of serving.

    OMP_NUM_THREADS=1 python benchmarks/bench_endpoint_cost.py --n-per-label 10 --server-threads 1
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
        # warm-up (not timed): loads pages, fills caches
        w = items[0]
        trace_endpoint_pair(client, "warmup", w["context"], w["query"], cfg)
        for it in items:
            row: dict[str, Any] = {"id": it["id"], "label": it["label"]}
            p_with, _ = builder.pair(it["context"], it["query"], tpl)

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
                # 4. the proxy asks the upstream for the answer's log-probs: serving costs more, the audit less
                flush()
                c0, t0 = proc_cpu(pid), time.perf_counter()
                ch2 = client.completion(
                    p_with, max_tokens=args.T, logprobs=args.k, extra={"stop": list(tpl.end_texts)}
                )
                row["serve_lp_wall"] = time.perf_counter() - t0
                row["serve_lp_server_cpu"] = proc_cpu(pid) - c0
                sv = served_scores({"choices": [ch2], "usage": ch2.get("usage")}, by_id=method == "native")
                modes.append(("served", str(ch2.get("text", "")), sv))
            for mode, answer, sv in modes:
                if mode != "served":  # the served audit follows its serving request, as in the proxy
                    flush()
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
                            client, it["id"], it["context"], it["query"], cfg, answer=answer
                        )
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
    gen_cpu = stats([r["gen_server_cpu"] for r in ok])["mean"]
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
    ap.add_argument("--note", default="")
    args = ap.parse_args()

    from llama_servers import native_server_binary
    from mnemoscope.provenance import provenance

    items = subset(
        [json.loads(x) for x in VERIFIED.read_text().splitlines() if x.strip()], args.n_per_label, args.seed
    )
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
        },
        "machine": {"cpus": os.cpu_count(), "shared": True, "loadavg_start": load0},
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
