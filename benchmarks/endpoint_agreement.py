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
    OMP_NUM_THREADS=1 python benchmarks/endpoint_agreement.py [--limit N] [--endpoint URL] [--method auto|echo|positions]
        [--server-threads 1] [--torch-threads 1] [--out benchmarks/results/endpoint/agreement.json]

Without ``--endpoint`` it starts ``python -m llama_cpp.server`` on a free loopback port and
stops it at the end. ``--limit N`` takes a seeded stratified subset (N per label at most).
**Resumable**: each item's endpoint row is appended (and fsynced) to
``agreement_items.endpoint.jsonl`` and its in-process row to ``agreement_items.inprocess.jsonl``
as it is measured; a re-run with the same settings skips the items done (other settings: the
partial files are refused, pass ``--fresh`` to start over). The report is written at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # llama_servers: the loopback server launchers
VERIFIED = ROOT / "benchmarks" / "results" / "verdict" / "verified.jsonl"
OUT = ROOT / "benchmarks" / "results" / "endpoint" / "agreement.json"


def provenance() -> dict[str, Any]:
    from mnemoscope.provenance import provenance as _p

    return _p()


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system, all threads) of a process, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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


def _append(path: Path, row: dict[str, Any]) -> None:
    import os

    with path.open("a") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _load_rows(path: Path, meta: dict[str, Any], fresh: bool) -> dict[str, dict[str, Any]]:
    """Rows already measured with the same settings (a torn last line is dropped)."""
    if fresh and path.exists():
        path.unlink()
    if not path.exists():
        path.write_text(json.dumps({"meta": meta}) + "\n")
        return {}
    lines = path.read_text().split("\n")
    first = json.loads(lines[0])
    if first.get("meta") != meta:
        raise SystemExit(
            f"{path} was written with other settings {first.get('meta')}: pass --fresh to start over"
        )
    rows: dict[str, dict[str, Any]] = {}
    for ln in lines[1:]:
        try:
            r = json.loads(ln)
        except ValueError:
            continue
        rows[r["id"]] = r
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--verified", default=str(VERIFIED))
    ap.add_argument("--endpoint", default=None, help="an already running server's /v1 URL")
    ap.add_argument("--limit", type=int, default=None, help="at most N items per label (seeded)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--k-check", type=int, default=10, help="items also traced with k=5 requested")
    ap.add_argument("--method", default="auto", help="the endpoint scoring path (EndpointConfig.method)")
    ap.add_argument("--server-threads", type=int, default=1)
    ap.add_argument("--torch-threads", type=int, default=1)
    ap.add_argument("--fresh", action="store_true", help="discard partial results")
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
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"T": T, "k": K, "method": args.method, "server_threads": args.server_threads, "seed": args.seed}
    ep_path = out.with_name("agreement_items.endpoint.jsonl")
    ip_path = out.with_name("agreement_items.inprocess.jsonl")
    ep_rows = _load_rows(ep_path, meta, args.fresh)
    ip_rows = _load_rows(ip_path, {**meta, "torch_threads": args.torch_threads}, args.fresh)
    load_start = os.getloadavg()

    # -- endpoint ----------------------------------------------------------------------------
    server = None
    if args.endpoint is None:
        server = LlamaCppServer(default_gguf_path(), n_threads=args.server_threads).start(timeout=300)
        url = server.base_url
    else:
        url = args.endpoint
    server_cmd = " ".join(server.command[1:]) if server else None
    try:
        client = EndpointClient(EndpointConfig(url, concurrency=1, timeout=900, method=args.method))
        caps = client.require_teacher_forcing()
        fp = client.fingerprint()
        pid = server.pid if server is not None else None

        def server_cpu() -> float:
            return float("nan") if pid is None else _proc_cpu(pid)

        t_all = time.perf_counter()
        todo = [it for it in items if it["id"] not in ep_rows]
        for n, it in enumerate(todo):
            t0 = time.perf_counter()
            c0, p0 = server_cpu(), time.process_time()
            row: dict[str, Any] = {"id": it["id"], "label": it["label"], "kind": it.get("kind")}
            try:
                t, _ = trace_endpoint_pair(client, it["id"], it["context"], it["query"], cfg)
                row["endpoint_seconds"] = time.perf_counter() - t0
                row["endpoint_server_cpu_seconds"] = server_cpu() - c0
                row["endpoint_cpu_seconds"] = row["endpoint_server_cpu_seconds"] + (time.process_time() - p0)
                row["endpoint_answer"] = t.answer_with
                row["endpoint_answer_ids"] = t.answer_ids.tolist()
                row["endpoint_logprob_with"] = t.logprob_answer_with.tolist()
                row["endpoint_logprob_without"] = t.logprob_answer_without.tolist()
                row["endpoint_steps"] = t.n_steps
                for k in (1, 5, 20):
                    row[f"z_endpoint_k{k}"] = float(RePCS(estimator="topk", k=k).z([t])[0])
                row["endpoint_notes"] = t.backend.get("notes", [])
                if sum(1 for r in ep_rows.values() if "z_requested_k5" in r) < args.k_check:
                    t5, _ = trace_endpoint_pair(
                        client, it["id"], it["context"], it["query"], EndpointPairConfig(builder, tpl, T, 5)
                    )
                    row["z_requested_k5"] = float(RePCS(estimator="topk", k=5).z([t5])[0])
                    row["k5_same_answer"] = t5.answer_with == t.answer_with
                if len(ep_rows) < 20:
                    p_with, _ = builder.pair(it["context"], it["query"], tpl)
                    row["server_prompt_ids"] = client.tokenize(p_with)
            except Exception as e:
                row["endpoint_error"] = f"{type(e).__name__}: {e}"
            ep_rows[it["id"]] = row
            _append(ep_path, row)
            if (n + 1) % 10 == 0:
                print(f"endpoint {n + 1}/{len(todo)} {time.perf_counter() - t_all:.0f} s", flush=True)
        client.close()
    finally:
        if server is not None:
            server.stop()

    # -- in-process --------------------------------------------------------------------------
    import torch

    from mnemoscope.models import load_model
    from mnemoscope.trace import PairConfig, PairItem, Tracer, prepare_pair
    from mnemoscope.trace.lockstep import trace_lockstep

    torch.set_num_threads(args.torch_threads)
    lm = load_model("default")
    tracer = Tracer(lm, batch_size=1)
    pc = PairConfig(builder=builder, max_new_tokens=T, answer_without=False, top_k=K, hidden=False)
    t_all = time.perf_counter()
    for it in items:
        if it["id"] in ip_rows:
            continue
        row = {"id": it["id"]}
        prep = prepare_pair(tracer, PairItem(it["id"], it["context"], it["query"]), pc)
        t0, p0 = time.perf_counter(), time.process_time()
        (tr,) = trace_lockstep(tracer, [prep], pc)
        row["inprocess_seconds"] = time.perf_counter() - t0
        row["inprocess_cpu_seconds"] = time.process_time() - p0
        row["inprocess_answer"] = lm.tokenizer.decode(tr.answer_ids, skip_special_tokens=True)
        row["inprocess_answer_ids"] = tr.answer_ids.tolist()
        row["inprocess_steps"] = tr.n_steps
        row["z_inprocess_full"] = float(RePCS().z([tr])[0])
        for k in (1, 5, 20):
            row[f"z_inprocess_topk{k}"] = float(RePCS(estimator="topk", k=k).z([tr])[0])
        er = ep_rows.get(it["id"], {})
        if "endpoint_answer_ids" in er:
            (tf,) = trace_lockstep(tracer, [prep], pc, forced_answers=[er["endpoint_answer_ids"]])
            row["z_forced_full"] = float(RePCS().z([tf])[0])
            row["z_forced_topk20"] = float(RePCS(estimator="topk", k=20).z([tf])[0])
            row["max_abs_logprob_diff_forced"] = float(
                max(
                    np.max(
                        np.abs(tf.logprob_answer_with - np.asarray(er["endpoint_logprob_with"])), initial=0.0
                    ),
                    np.max(
                        np.abs(tf.logprob_answer_without - np.asarray(er["endpoint_logprob_without"])),
                        initial=0.0,
                    ),
                )
            )
        if "server_prompt_ids" in er:
            p_with, _ = builder.pair(it["context"], it["query"], tpl)
            b, _ = builder.pair(it["context"], it["query"], lm.tokenizer)
            row["same_prompt_text"] = p_with == b
            row["same_prompt_ids"] = tracer.encode(p_with, chat=True) == er["server_prompt_ids"]
        ip_rows[it["id"]] = row
        _append(ip_path, row)
    inprocess_total = time.perf_counter() - t_all

    rows = []
    for it in items:
        r = {**ep_rows[it["id"]], **ip_rows[it["id"]]}
        if "endpoint_answer_ids" in r:
            r["same_answer"] = r["endpoint_answer_ids"] == r["inprocess_answer_ids"]
        rows.append(r)
    ok = [r for r in rows if "z_endpoint_k20" in r]
    y = np.array([r["label"] for r in ok])

    def col(name: str, rs: list[dict[str, Any]] = ok) -> np.ndarray:
        return np.array([r.get(name, np.nan) for r in rs], float)

    same = [r for r in ok if r.get("same_answer")]
    checked = [r for r in rows if "same_prompt_ids" in r]
    k_check = [r for r in ok if "z_requested_k5" in r]
    report: dict[str, Any] = {
        "provenance": provenance(),
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
        "settings": {"template": "A", "chat": True, "T": T, "k": K, "chat_template": tpl.source, **meta},
        "server": {
            "command": server_cmd,
            "endpoint_method": caps.method,
            "capabilities": caps.to_dict(),
            "fingerprint_digest": fp.digest,
        },
        "failures": [{"id": r["id"], "error": r["endpoint_error"]} for r in rows if "endpoint_error" in r],
        "prompt_checks": {
            "client_template_equals_transformers_rendering": f"{sum(r['same_prompt_text'] for r in checked)}/{len(checked)}",
            "server_token_ids_equal_transformers_ids": f"{sum(r['same_prompt_ids'] for r in checked)}/{len(checked)}",
        },
        "answers": {"identical_answer_tokens": len(same), "n": len(ok), "share": len(same) / max(1, len(ok))},
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
                (abs(r["z_requested_k5"] - r["z_endpoint_k5"]) for r in k_check), default=None
            ),
            "same_answer": sum(bool(r.get("k5_same_answer")) for r in k_check),
        },
        "seconds_per_item": {
            "endpoint_mean": float(np.nanmean(col("endpoint_seconds"))),
            "endpoint_median": float(np.nanmedian(col("endpoint_seconds"))),
            "endpoint_server_cpu_mean": float(np.nanmean(col("endpoint_server_cpu_seconds"))),
            "endpoint_cpu_mean": float(np.nanmean(col("endpoint_cpu_seconds"))),
            "inprocess_mean": float(np.nanmean(col("inprocess_seconds"))),
            "inprocess_median": float(np.nanmedian(col("inprocess_seconds"))),
            "inprocess_cpu_mean": float(np.nanmean(col("inprocess_cpu_seconds"))),
            "inprocess_total_this_run_incl_forced_pass": inprocess_total,
            "machine": f"shared 2-core machine (other jobs running); loadavg at start {load_start}, at end "
            f"{os.getloadavg()}; server {args.server_threads} thread(s), torch {args.torch_threads} thread(s)",
            "note": "endpoint: the scoring path named in server.endpoint_method, one request stream; in-process: "
            "lockstep decoding, batch 1, hidden states off; the k=5 re-trace of the first items is not in the timings",
        },
    }
    out.write_text(json.dumps(report, indent=1) + "\n")
    with out.with_name("agreement_items.jsonl").open("w") as f:
        for r in rows:
            f.write(
                json.dumps(
                    {k: v for k, v in r.items() if not k.startswith(("endpoint_logprob", "server_prompt"))}
                )
                + "\n"
            )
    print(
        json.dumps(
            {k: report[k] for k in ("answers", "correlation", "auc_of_minus_z", "seconds_per_item")}, indent=1
        )
    )


if __name__ == "__main__":
    main()
