"""Endpoint vs in-process: does black-box RePCS over a llama.cpp server agree with the model loaded here?

The server (``llama-cpp-python``) serves the embedded default model's GGUF file (Q4_1 weights,
llama.cpp kernels); the in-process model is the same file de-quantized to fp32 (transformers).
Both use the shipped profile's prompt settings (template A, chat template, T = 32). On the
verified context-reliance items (``benchmarks/results/verdict/verified.jsonl``, 312 items:
212 memory, 100 context) this measures:

* per-item Z over the endpoint (top-k estimate, k = 20, and k = 5, 1 by truncating the same
  top-20 lists; a few items also request k = 5 directly, to check truncation = asking for k);
* per-item in-process Z on the in-process model's own greedy answer (top-k k = 20 and the
  full-vocabulary KL), and on the endpoint's answer tokens teacher-forced (same tokens, so
  the only difference is the weights' numerics);
* Pearson and Spearman correlations between them, the share of identical answers, the AUC
  of -Z (memory = 1) for each with a bootstrap CI (``mnemoscope.stats.auc_ci``), and wall time
  per item per backend (batch 1 in-process; one request stream over the endpoint).

Usage:
    python benchmarks/endpoint_agreement.py [--limit N] [--endpoint URL] [--out benchmarks/results/endpoint/agreement.json]

Without ``--endpoint`` it starts ``python -m llama_cpp.server`` on a free loopback port and
stops it at the end. ``--limit N`` takes a seeded stratified subset (N per label at most).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # llama_servers: the loopback server launchers
VERIFIED = ROOT / "benchmarks" / "results" / "verdict" / "verified.jsonl"
OUT = ROOT / "benchmarks" / "results" / "endpoint" / "agreement.json"


def provenance() -> dict[str, str]:
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()
    return {
        "git_commit": commit,
        "command": " ".join(["python", *sys.argv]),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _auc(scores: Any, labels: Any, seed: int = 0) -> dict[str, Any]:
    from mnemoscope.stats import auc_ci

    e = auc_ci(np.asarray(scores, float), np.asarray(labels, int), n_resamples=2000, rng=seed)
    return {"auc": e.estimate, "ci": [e.ci_low, e.ci_high], "n_pos": e.n_pos, "n_neg": e.n_neg}


def _corr(a: Any, b: Any) -> dict[str, Any]:
    from scipy.stats import pearsonr, spearmanr

    a, b = np.asarray(a, float), np.asarray(b, float)
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 3:
        return {"n": int(ok.sum()), "pearson": None, "spearman": None}
    return {
        "n": int(ok.sum()),
        "pearson": float(pearsonr(a[ok], b[ok])[0]),
        "spearman": float(spearmanr(a[ok], b[ok])[0]),
        "mean_abs_diff": float(np.mean(np.abs(a[ok] - b[ok]))),
    }


def _subset(items: list[dict], limit: int | None, seed: int) -> list[dict]:
    if not limit:
        return items
    rng = np.random.default_rng(seed)
    out = []
    for lab in (0, 1):
        group = [it for it in items if it["label"] == lab]
        idx = rng.permutation(len(group))[:limit]
        out += [group[i] for i in sorted(idx)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--verified", default=str(VERIFIED))
    ap.add_argument("--endpoint", default=None, help="an already running server's /v1 URL")
    ap.add_argument("--limit", type=int, default=None, help="at most N items per label (seeded)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--k-check", type=int, default=10, help="items also traced with k=5 requested")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()

    from llama_servers import LlamaCppServer
    from mnemoscope.detectors.repcs import RePCS
    from mnemoscope.models.endpoint import EndpointClient, EndpointConfig
    from mnemoscope.models.loader import default_gguf_path
    from mnemoscope.trace.endpoint import EndpointPairConfig, load_chat_template, trace_endpoint_pair
    from mnemoscope.trace.templates import PromptBuilder

    items = [json.loads(x) for x in Path(args.verified).read_text().splitlines() if x.strip()]
    items = _subset(items, args.limit, args.seed)
    labels = np.array([it["label"] for it in items])
    builder = PromptBuilder(template="A", chat=True)
    tpl = load_chat_template("default")
    T, K = 32, 20
    cfg = EndpointPairConfig(builder=builder, template=tpl, max_new_tokens=T, top_k=K)

    server = None
    if args.endpoint is None:
        server = LlamaCppServer(default_gguf_path(), n_threads=2).start()
        url = server.base_url
    else:
        url = args.endpoint
    rows: list[dict[str, Any]] = []
    ep_traces: dict[str, Any] = {}
    k_check: list[dict[str, Any]] = []
    server_cmd = " ".join(server.command[1:]) if server else None
    try:
        client = EndpointClient(EndpointConfig(url, concurrency=1, timeout=300))
        caps = client.require_teacher_forcing()
        fp = client.fingerprint()
        import psutil

        srv = psutil.Process(server.proc.pid) if server is not None else None

        def server_cpu() -> float:
            if srv is None:
                return float("nan")
            c = srv.cpu_times()
            return float(c.user + c.system + c.children_user + c.children_system)

        t_all = time.perf_counter()
        for n, it in enumerate(items):
            t0 = time.perf_counter()
            c0, p0 = server_cpu(), time.process_time()
            row: dict[str, Any] = {"id": it["id"], "label": it["label"], "kind": it.get("kind")}
            try:
                t, _ = trace_endpoint_pair(client, it["id"], it["context"], it["query"], cfg)
                ep_traces[it["id"]] = t
                row["endpoint_seconds"] = time.perf_counter() - t0
                row["endpoint_cpu_seconds"] = (server_cpu() - c0) + (time.process_time() - p0)
                row["endpoint_answer"] = t.answer_with
                row["endpoint_steps"] = t.n_steps
                for k in (1, 5, 20):
                    row[f"z_endpoint_k{k}"] = float(RePCS(estimator="topk", k=k).z([t])[0])
                row["endpoint_notes"] = t.backend.get("notes", [])
            except Exception as e:
                row["endpoint_error"] = f"{type(e).__name__}: {e}"
            rows.append(row)
            if n < args.k_check and it["id"] in ep_traces:
                t5, _ = trace_endpoint_pair(
                    client, it["id"], it["context"], it["query"], EndpointPairConfig(builder, tpl, T, 5)
                )
                k_check.append(
                    {
                        "id": it["id"],
                        "z_requested_k5": float(RePCS(estimator="topk", k=5).z([t5])[0]),
                        "z_truncated_k5": row["z_endpoint_k5"],
                        "same_answer": t5.answer_with == row["endpoint_answer"],
                    }
                )
            if (n + 1) % 25 == 0:
                print(f"endpoint {n + 1}/{len(items)} {time.perf_counter() - t_all:.0f} s", flush=True)
        endpoint_total = time.perf_counter() - t_all
        tokenize_check = []
        for it in items[:20]:
            p_with, _ = builder.pair(it["context"], it["query"], tpl)
            tokenize_check.append((p_with, client.tokenize(p_with)))
        client.close()
    finally:
        if server is not None:
            server.stop()

    # the endpoint phase is the slow one: keep its rows even if the in-process phase fails
    partial = Path(args.out).with_name("agreement_items.endpoint.jsonl")
    partial.parent.mkdir(parents=True, exist_ok=True)
    with partial.open("w") as f:
        for r in rows:
            t = ep_traces.get(r["id"])
            f.write(
                json.dumps({**r, "endpoint_answer_ids": None if t is None else t.answer_ids.tolist()}) + "\n"
            )

    # -- in-process --------------------------------------------------------------------------
    from mnemoscope.models import load_model
    from mnemoscope.trace import PairConfig, PairItem, Tracer, prepare_pair
    from mnemoscope.trace.lockstep import trace_lockstep

    lm = load_model("default")
    tracer = Tracer(lm, batch_size=1)
    pc = PairConfig(builder=builder, max_new_tokens=T, answer_without=False, top_k=K, hidden=False)
    same_prompt = 0
    same_ids = 0
    for p_with, ids in tokenize_check:  # the server's token ids vs transformers' for the same text
        same_ids += int(tracer.encode(p_with, chat=True) == ids)
    for it in items[:20]:
        a, _ = builder.pair(it["context"], it["query"], tpl)
        b, _ = builder.pair(it["context"], it["query"], lm.tokenizer)
        same_prompt += int(a == b)
    t_all = time.perf_counter()
    for row, it in zip(rows, items, strict=True):
        prep = prepare_pair(tracer, PairItem(it["id"], it["context"], it["query"]), pc)
        t0, p0 = time.perf_counter(), time.process_time()
        (tr,) = trace_lockstep(tracer, [prep], pc)
        row["inprocess_seconds"] = time.perf_counter() - t0
        row["inprocess_cpu_seconds"] = time.process_time() - p0
        row["inprocess_answer"] = lm.tokenizer.decode(tr.answer_ids, skip_special_tokens=True)
        row["inprocess_steps"] = tr.n_steps
        row["z_inprocess_full"] = float(RePCS().z([tr])[0])
        for k in (1, 5, 20):
            row[f"z_inprocess_topk{k}"] = float(RePCS(estimator="topk", k=k).z([tr])[0])
        et = ep_traces.get(it["id"])
        if et is not None:
            row["same_answer"] = bool(np.array_equal(tr.answer_ids, et.answer_ids))
            (tf,) = trace_lockstep(tracer, [prep], pc, forced_answers=[et.answer_ids.tolist()])
            row["z_forced_full"] = float(RePCS().z([tf])[0])
            row["z_forced_topk20"] = float(RePCS(estimator="topk", k=20).z([tf])[0])
            row["max_abs_logprob_diff_forced"] = float(
                max(
                    np.max(np.abs(tf.logprob_answer_with - et.logprob_answer_with), initial=0.0),
                    np.max(np.abs(tf.logprob_answer_without - et.logprob_answer_without), initial=0.0),
                )
            )
    inprocess_total = time.perf_counter() - t_all

    ok = [r for r in rows if "z_endpoint_k20" in r]
    y = np.array([r["label"] for r in ok])

    def col(name: str, rs: list[dict[str, Any]] = ok) -> np.ndarray:
        return np.array([r.get(name, np.nan) for r in rs], float)

    same = [r for r in ok if r.get("same_answer")]
    report: dict[str, Any] = {
        **provenance(),
        "what": "black-box RePCS over a llama.cpp server vs the in-process model (same GGUF)",
        "items": {
            "source": str(Path(args.verified).relative_to(ROOT))
            if Path(args.verified).is_relative_to(ROOT)
            else args.verified,
            "n": len(items),
            "subset": f"stratified, at most {args.limit} per label, seed {args.seed}"
            if args.limit
            else "all",
            "n_memory": int((labels == 1).sum()),
            "n_context": int((labels == 0).sum()),
        },
        "settings": {"template": "A", "chat": True, "T": T, "k": K, "chat_template": tpl.source},
        "server": {
            "command": server_cmd,
            "endpoint_method": caps.method,
            "capabilities": caps.to_dict(),
            "fingerprint_digest": fp.digest,
        },
        "failures": [{"id": r["id"], "error": r["endpoint_error"]} for r in rows if "endpoint_error" in r],
        "prompt_checks": {
            "client_template_equals_transformers_rendering": f"{same_prompt}/{len(items[:20])}",
            "server_token_ids_equal_transformers_ids": f"{same_ids}/{len(tokenize_check)}",
        },
        "answers": {
            "identical_answer_tokens": len(same),
            "n": len(ok),
            "share": len(same) / max(1, len(ok)),
        },
        "correlation": {
            "endpoint_k20_vs_inprocess_topk20": _corr(col("z_endpoint_k20"), col("z_inprocess_topk20")),
            "endpoint_k20_vs_inprocess_full": _corr(col("z_endpoint_k20"), col("z_inprocess_full")),
            "endpoint_k20_vs_inprocess_forced_topk20 (same answer tokens)": _corr(
                col("z_endpoint_k20"), col("z_forced_topk20")
            ),
            "endpoint_k20_vs_inprocess_forced_full (same answer tokens)": _corr(
                col("z_endpoint_k20"), col("z_forced_full")
            ),
            "identical-answer items: endpoint_k20_vs_inprocess_topk20": _corr(
                col("z_endpoint_k20", same), col("z_inprocess_topk20", same)
            ),
        },
        "answer_logprob_diff_forced": {
            "median_max_abs_nats": float(np.nanmedian(col("max_abs_logprob_diff_forced"))),
            "p90_max_abs_nats": float(np.nanpercentile(col("max_abs_logprob_diff_forced"), 90)),
        },
        "auc_of_minus_z": {
            **{f"endpoint_topk_k{k}": _auc(-col(f"z_endpoint_k{k}"), y) for k in (1, 5, 20)},
            **{f"inprocess_topk_k{k}": _auc(-col(f"z_inprocess_topk{k}"), y) for k in (1, 5, 20)},
            "inprocess_full": _auc(-col("z_inprocess_full"), y),
            "inprocess_forced_on_endpoint_answer_full": _auc(-col("z_forced_full"), y),
        },
        "k_truncation_check": {
            "n": len(k_check),
            "max_abs_diff_z": max(
                (abs(c["z_requested_k5"] - c["z_truncated_k5"]) for c in k_check), default=None
            ),
            "rows": k_check,
        },
        "seconds_per_item": {
            "endpoint_mean": float(np.nanmean(col("endpoint_seconds"))),
            "endpoint_median": float(np.nanmedian(col("endpoint_seconds"))),
            "inprocess_mean": float(np.nanmean(col("inprocess_seconds"))),
            "endpoint_cpu_mean": float(np.nanmean(col("endpoint_cpu_seconds"))),
            "inprocess_cpu_mean": float(np.nanmean(col("inprocess_cpu_seconds"))),
            "machine_load_note": "wall times were measured on a shared 2-core machine under load from other "
            "jobs; CPU seconds (server process + client, or the in-process tracer) are less affected",
            "inprocess_median": float(np.nanmedian(col("inprocess_seconds"))),
            "endpoint_total": endpoint_total,
            "inprocess_total_incl_forced_pass": inprocess_total,
            "note": "endpoint: 2 tokenize + 1 generation + 2 one-token references + 2 tokenize + 2 echo requests "
            "per item, one stream; in-process: lockstep decoding, batch 1, 2 CPU threads",
        },
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    with out.with_name("agreement_items.jsonl").open("w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    print(
        json.dumps(
            {k: report[k] for k in ("answers", "correlation", "auc_of_minus_z", "seconds_per_item")}, indent=1
        )
    )


if __name__ == "__main__":
    main()
