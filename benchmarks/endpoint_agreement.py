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
        [--server-threads 1] [--torch-threads 1] [--max-seconds S] [--report-only]
        [--out benchmarks/results/endpoint/agreement.json]

Without ``--endpoint`` it starts ``python -m llama_cpp.server`` on a free loopback port and
stops it at the end (also on SIGTERM / Ctrl-C). ``--limit N`` takes a seeded stratified subset
(N per label at most). Items are measured in a seeded label-interleaved order, each item's
endpoint row then its in-process row (one after the other, so both see the same load), so a run
stopped early (``--max-seconds``, a kill) is a stratified sample with both rows per item.
**Resumable**: each row is appended (and fsynced) to ``agreement_items.endpoint.jsonl`` /
``agreement_items.inprocess.jsonl`` as it is measured; a re-run with the same settings skips the
items done (other settings: the partial files are refused, pass ``--fresh`` to start over). Each
endpoint row records the scoring path it used (``endpoint_method``) and the load average. The
report (``agreement.json`` + ``agreement_items.jsonl``) covers the items with both rows; it is
written at the end of every invocation, ``--report-only`` writes it without measuring.

The report adds the verdicts (RePCS rule, memory iff Z < tau, tau calibrated per backend with
``RePCS.fit_scores`` on the context items of the shipped profile's calibration split) and how
often the endpoint's verdict agrees with the in-process one (held-out and all items), and the
refusals grouped by cause.
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


SPLIT = ROOT / "benchmarks" / "results" / "verdict" / "split.json"


def _order(items: list[dict], seed: int) -> list[dict]:
    """A seeded interleaving of the labels, so that a run stopped early is a stratified sample."""
    rng = np.random.default_rng(seed)
    groups = [[it for it in items if it["label"] == lab] for lab in (1, 0)]
    groups = [[g[i] for i in rng.permutation(len(g))] for g in groups]
    n = len(items)
    out: list[dict] = []
    pos = [0, 0]
    for j in range(n):  # pick the label whose share so far lags its overall share
        want = [len(g) / n * (j + 1) - pos[i] for i, g in enumerate(groups)]
        i = int(np.argmax([w if pos[k] < len(groups[k]) else -np.inf for k, w in enumerate(want)]))
        out.append(groups[i][pos[i]])
        pos[i] += 1
    return out


def _cause(error: str) -> str:
    """A short cause for a refusal: the error type and the check that fired (record id and URL cut)."""
    import re

    kind, _, msg = error.partition(": ")
    msg = re.sub(r"^endpoint \S+: ", "", msg)
    msg = re.sub(r"^record \S+: ", "", msg)
    msg = re.sub(r"\([^)]*\)", "(...)", msg)
    msg = re.sub(r"\d+", "N", msg)
    return f"{kind}: {msg[:160]}"


def _verdicts(ok: list[dict[str, Any]], split_path: Path) -> dict[str, Any]:
    """The RePCS rule's verdict (memory iff Z < tau) on each backend, and how often they agree.

    tau is calibrated per backend exactly as a profile does (``RePCS.fit_scores``: conformal
    quantile, alpha 0.05) on the context-label items of the shipped profile's calibration split
    (``benchmarks/results/verdict/split.json``); agreement is reported on its held-out test items
    and on all items. The shipped profile's own tau (full-vocabulary KL, the same calibration
    items) is applied to the in-process full Z as a check.
    """
    from mnemoscope.audit.profile import load_profile
    from mnemoscope.cli.profile_cmd import shipped_default_profile
    from mnemoscope.detectors.repcs import RePCS

    split = json.loads(split_path.read_text())
    cal, test = set(split["calibration_ids"]), set(split["test_ids"])
    cols = {
        "endpoint_topk20": ("z_endpoint_k20", "topk", 20),
        "inprocess_topk20": ("z_inprocess_topk20", "topk", 20),
        "inprocess_full": ("z_inprocess_full", "full", None),
    }
    flags: dict[str, dict[str, bool]] = {}
    out: dict[str, Any] = {
        "rule": "RePCS: memory iff Z < tau; tau = RePCS.fit_scores on the clean (context) items of the "
        "shipped profile's calibration split, alpha 0.05 (conformal), per backend",
        "split": str(split_path.relative_to(ROOT)) if split_path.is_relative_to(ROOT) else str(split_path),
        "per_backend": {},
    }
    for name, (col, est, k) in cols.items():
        rs = [r for r in ok if np.isfinite(r.get(col, np.nan))]
        clean = np.array([r[col] for r in rs if r["id"] in cal and r["label"] == 0], float)
        det = RePCS(estimator=est, k=k, alpha=0.05).fit_scores(clean)
        flags[name] = {r["id"]: bool(det.flag(np.array([r[col]]))[0]) for r in rs}
        tst = [r for r in rs if r["id"] in test]
        out["per_backend"][name] = {
            "tau": float(det.tau_),
            "n_calibration_clean": len(clean),
            "held_out": {
                "n": len(tst),
                "false_flag_rate_context": float(
                    np.mean([flags[name][r["id"]] for r in tst if r["label"] == 0] or [np.nan])
                ),
                "memory_recall": float(
                    np.mean([flags[name][r["id"]] for r in tst if r["label"] == 1] or [np.nan])
                ),
            },
        }
    # the same rule at a matched operating point when the split has too few clean items to certify
    # alpha: tau = the alpha-quantile (RePCS quantile="paper", no finite-sample guarantee) of ALL
    # the measured clean items' Z, per backend (in-sample; says where each backend puts the line)
    out["in_sample"] = {
        "rule": "memory iff Z < tau; tau = RePCS(quantile='paper', alpha=0.05).fit_scores on every measured "
        "context item, per backend (in-sample, uncertified: a matched operating point, not a guarantee)",
        "per_backend": {},
    }
    for name, (col, est, k) in cols.items():
        rs = [r for r in ok if np.isfinite(r.get(col, np.nan))]
        clean = np.array([r[col] for r in rs if r["label"] == 0], float)
        det = RePCS(estimator=est, k=k, alpha=0.05, quantile="paper").fit_scores(clean)
        flags[f"{name}_in_sample"] = {r["id"]: bool(det.flag(np.array([r[col]]))[0]) for r in rs}
        out["in_sample"]["per_backend"][name] = {
            "tau": float(det.tau_),
            "n_clean": len(clean),
            "false_flag_rate_context": float(
                np.mean([flags[f"{name}_in_sample"][r["id"]] for r in rs if r["label"] == 0])
            ),
            "memory_recall": float(
                np.mean([flags[f"{name}_in_sample"][r["id"]] for r in rs if r["label"] == 1])
            ),
        }
    prof = load_profile(shipped_default_profile())
    shipped_tau = float(prof.repcs_tau)
    flags["inprocess_full_shipped_tau"] = {
        r["id"]: bool(r["z_inprocess_full"] < shipped_tau)
        for r in ok
        if np.isfinite(r.get("z_inprocess_full", np.nan))
    }
    out["shipped_profile_tau_full"] = shipped_tau

    def agree(a: str, b: str, ids: set[str] | None) -> dict[str, Any]:
        common = [i for i in flags[a] if i in flags[b] and (ids is None or i in ids)]
        x = np.array([flags[a][i] for i in common])
        y = np.array([flags[b][i] for i in common])
        if not len(common):
            return {"n": 0}
        po = float(np.mean(x == y))
        pe = float(np.mean(x) * np.mean(y) + (1 - np.mean(x)) * (1 - np.mean(y)))
        return {
            "n": len(common),
            "agreement": po,
            "cohen_kappa": (po - pe) / (1 - pe) if pe < 1 else None,
            "both_memory": int(np.sum(x & y)),
            "both_not": int(np.sum(~x & ~y)),
            f"{a}_only": int(np.sum(x & ~y)),
            f"{b}_only": int(np.sum(~x & y)),
        }

    for b in ("inprocess_full", "inprocess_topk20"):
        out["in_sample"][f"endpoint_topk20_vs_{b}"] = agree(
            "endpoint_topk20_in_sample", f"{b}_in_sample", None
        )
    for b in ("inprocess_full", "inprocess_full_shipped_tau", "inprocess_topk20"):
        out[f"endpoint_topk20_vs_{b}"] = {
            "held_out": agree("endpoint_topk20", b, test),
            "all": agree("endpoint_topk20", b, None),
        }
    return out


def _finite(x: Any) -> Any:
    """NaN and infinities as null (strict JSON)."""
    if isinstance(x, float) and not np.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    return x


def _interrupt(*_: Any) -> None:
    raise KeyboardInterrupt


def main() -> None:
    import signal

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--verified", default=str(VERIFIED))
    ap.add_argument("--split", default=str(SPLIT), help="calibration/test ids for the verdicts' tau")
    ap.add_argument("--endpoint", default=None, help="an already running server's /v1 URL")
    ap.add_argument("--limit", type=int, default=None, help="at most N items per label (seeded)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--k-check", type=int, default=10, help="items also traced with k=5 requested")
    ap.add_argument("--method", default="auto", help="the endpoint scoring path (EndpointConfig.method)")
    ap.add_argument("--server-threads", type=int, default=1)
    ap.add_argument("--torch-threads", type=int, default=1)
    ap.add_argument("--max-seconds", type=float, default=None, help="stop measuring after S s, then report")
    ap.add_argument("--report-only", action="store_true", help="report the rows measured so far")
    ap.add_argument("--fresh", action="store_true", help="discard partial results")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()

    # a SIGTERM ends the run like Ctrl-C: the server is stopped, the rows written so far stay
    signal.signal(signal.SIGTERM, _interrupt)

    from mnemoscope.trace.endpoint import EndpointPairConfig, load_chat_template
    from mnemoscope.trace.templates import PromptBuilder

    items = [json.loads(x) for x in Path(args.verified).read_text().splitlines() if x.strip()]
    items = _order(_subset(items, args.limit, args.seed), args.seed)
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
    run_info: dict[str, Any] = {"server": None, "caps": None, "fingerprint": None, "stopped": None}
    t_all = time.perf_counter()
    todo = [it for it in items if it["id"] not in ep_rows or it["id"] not in ip_rows]
    runs_path = out.with_name("agreement_runs.jsonl")
    if todo and not args.report_only:
        n0 = len(ep_rows)
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        try:
            _measure(args, todo, ep_rows, ip_rows, ep_path, ip_path, builder, tpl, cfg, T, K, run_info, t_all)
        except KeyboardInterrupt:
            run_info["stopped"] = "interrupted"
        finally:  # one line per measuring invocation: what served, how long, under which load
            _append(
                runs_path,
                {
                    **run_info,
                    "command": provenance().get("command"),
                    "started": started,
                    "ended": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "endpoint_rows_added": len(ep_rows) - n0,
                    "loadavg_start": load_start,
                    "loadavg_end": os.getloadavg(),
                },
            )
    measure_seconds = time.perf_counter() - t_all
    runs = (
        [json.loads(x) for x in runs_path.read_text().splitlines() if x.strip()] if runs_path.exists() else []
    )

    rows = []
    for it in items:
        if it["id"] not in ep_rows or it["id"] not in ip_rows:
            continue
        r = {**ep_rows[it["id"]], **ip_rows[it["id"]]}
        if "endpoint_answer_ids" in r:
            r["same_answer"] = r["endpoint_answer_ids"] == r["inprocess_answer_ids"]
        rows.append(r)
    ok = [r for r in rows if "z_endpoint_k20" in r]
    y = np.array([r["label"] for r in ok])
    labels = np.array([r["label"] for r in rows])

    def col(name: str, rs: list[dict[str, Any]] = ok) -> np.ndarray:
        return np.array([r.get(name, np.nan) for r in rs], float)

    same = [r for r in ok if r.get("same_answer")]
    checked = [r for r in rows if "same_prompt_ids" in r]
    k_check = [r for r in ok if "z_requested_k5" in r]
    failures = [
        {"id": r["id"], "label": r["label"], "error": r["endpoint_error"]}
        for r in rows
        if "endpoint_error" in r
    ]
    causes: dict[str, int] = {}
    for f in failures:
        causes[_cause(f["error"])] = causes.get(_cause(f["error"]), 0) + 1
    methods: dict[str, int] = {}
    for r in rows:
        m = str(r.get("endpoint_method"))
        methods[m] = methods.get(m, 0) + 1
    report: dict[str, Any] = {
        "provenance": provenance(),
        "what": "black-box RePCS over a llama.cpp server vs the in-process model (same GGUF)",
        "items": {
            "source": str(Path(args.verified).relative_to(ROOT))
            if Path(args.verified).is_relative_to(ROOT)
            else args.verified,
            "n_selected": len(items),
            "n_measured": len(rows),
            "subset": f"stratified, at most {args.limit} per label, seed {args.seed}"
            if args.limit
            else "all",
            "order": "seeded label-interleaved order (a run stopped early is a stratified sample)",
            "n_memory": int((labels == 1).sum()),
            "n_context": int((labels == 0).sum()),
            "complete": len(rows) == len(items),
        },
        "settings": {"template": "A", "chat": True, "T": T, "k": K, "chat_template": tpl.source, **meta},
        "server": {
            "runs": runs,
            "endpoint_method_per_row": methods,
        },
        "refusals": {"n": len(failures), "of": len(rows), "by_cause": causes, "records": failures},
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
            "note": "memory = 1; the items the endpoint refused are left out of every row (same items)",
            **{f"endpoint_topk_k{k}": _auc(-col(f"z_endpoint_k{k}"), y) for k in (1, 5, 20)},
            **{f"inprocess_topk_k{k}": _auc(-col(f"z_inprocess_topk{k}"), y) for k in (1, 5, 20)},
            "inprocess_full": _auc(-col("z_inprocess_full"), y),
            "inprocess_forced_on_endpoint_answer_full": _auc(-col("z_forced_full"), y),
        },
        "auc_of_minus_z_inprocess_all_items": _auc(-col("z_inprocess_full", rows), labels),
        "verdicts": _verdicts(ok, Path(args.split)),
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
            "wall_over_inprocess_median_of_ratios": float(
                np.nanmedian(col("endpoint_seconds") / col("inprocess_seconds"))
            ),
            "loadavg_1min_at_rows": {
                "median": float(np.nanmedian(col("loadavg_1min", rows))),
                "min": float(np.nanmin(col("loadavg_1min", rows))),
                "max": float(np.nanmax(col("loadavg_1min", rows))),
            },
            "machine": f"shared 2-core machine (other engineers' jobs running); this invocation: loadavg at start "
            f"{load_start}, at end {os.getloadavg()}, {measure_seconds:.0f} s; server {args.server_threads} "
            f"thread(s), torch {args.torch_threads} thread(s); the endpoint and in-process rows of an item are "
            "measured one after the other (never at the same time)",
            "note": "endpoint: the scoring path named per row (endpoint_method), one request stream; in-process: "
            "lockstep decoding, batch 1, hidden states off; the k=5 re-trace and the forced pass are not in the timings",
        },
    }
    out.write_text(json.dumps(_finite(report), indent=1) + "\n")
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
            {k: report[k] for k in ("items", "answers", "correlation", "auc_of_minus_z", "seconds_per_item")},
            indent=1,
        )
    )


def _measure(
    args: Any,
    todo: list[dict],
    ep_rows: dict[str, dict[str, Any]],
    ip_rows: dict[str, dict[str, Any]],
    ep_path: Path,
    ip_path: Path,
    builder: Any,
    tpl: Any,
    cfg: Any,
    T: int,
    K: int,
    run_info: dict[str, Any],
    t_all: float,
) -> None:
    """Measure every item of ``todo``: its endpoint row, then its in-process row (each appended)."""
    import torch

    from llama_servers import LlamaCppServer
    from mnemoscope.detectors.repcs import RePCS
    from mnemoscope.models import load_model
    from mnemoscope.models.endpoint import EndpointClient, EndpointConfig
    from mnemoscope.models.loader import default_gguf_path
    from mnemoscope.trace import PairConfig, PairItem, Tracer, prepare_pair
    from mnemoscope.trace.endpoint import EndpointPairConfig, trace_endpoint_pair
    from mnemoscope.trace.lockstep import trace_lockstep

    torch.set_num_threads(args.torch_threads)
    lm = load_model("default")
    tracer = Tracer(lm, batch_size=1)
    pc = PairConfig(builder=builder, max_new_tokens=T, answer_without=False, top_k=K, hidden=False)

    server = None
    if args.endpoint is None:
        server = LlamaCppServer(default_gguf_path(), n_threads=args.server_threads).start(timeout=300)
        url = server.base_url
        run_info["server"] = " ".join(server.command[1:])
    else:
        url = args.endpoint
    try:
        client = EndpointClient(EndpointConfig(url, concurrency=1, timeout=900, method=args.method))
        caps = client.require_teacher_forcing()
        run_info["caps"] = caps.to_dict()
        run_info["fingerprint"] = client.fingerprint().digest
        pid = server.pid if server is not None else None

        def server_cpu() -> float:
            return float("nan") if pid is None else _proc_cpu(pid)

        for n, it in enumerate(todo):
            if args.max_seconds is not None and time.perf_counter() - t_all > args.max_seconds:
                run_info["stopped"] = f"--max-seconds {args.max_seconds:g} reached"
                print(f"stopping: {run_info['stopped']}", flush=True)
                break
            if it["id"] not in ep_rows:
                t0 = time.perf_counter()
                c0, p0 = server_cpu(), time.process_time()
                row: dict[str, Any] = {
                    "id": it["id"],
                    "label": it["label"],
                    "kind": it.get("kind"),
                    "endpoint_method": caps.method,
                    "loadavg_1min": os.getloadavg()[0],
                    "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }
                try:
                    t, _ = trace_endpoint_pair(client, it["id"], it["context"], it["query"], cfg)
                    row["endpoint_seconds"] = time.perf_counter() - t0
                    row["endpoint_server_cpu_seconds"] = server_cpu() - c0
                    row["endpoint_cpu_seconds"] = row["endpoint_server_cpu_seconds"] + (
                        time.process_time() - p0
                    )
                    row["endpoint_method"] = t.backend.get("method", caps.method)
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
                            client,
                            it["id"],
                            it["context"],
                            it["query"],
                            EndpointPairConfig(builder, tpl, T, 5),
                        )
                        row["z_requested_k5"] = float(RePCS(estimator="topk", k=5).z([t5])[0])
                        row["k5_same_answer"] = t5.answer_with == t.answer_with
                    if sum(1 for r in ep_rows.values() if "server_prompt_ids" in r) < 20:
                        p_with, _ = builder.pair(it["context"], it["query"], tpl)
                        row["server_prompt_ids"] = client.tokenize(p_with)
                except KeyboardInterrupt:
                    raise
                except Exception as e:
                    row["endpoint_error"] = f"{type(e).__name__}: {e}"
                ep_rows[it["id"]] = row
                _append(ep_path, row)
            if it["id"] not in ip_rows:
                er = ep_rows[it["id"]]
                irow: dict[str, Any] = {"id": it["id"], "loadavg_1min_inprocess": os.getloadavg()[0]}
                prep = prepare_pair(tracer, PairItem(it["id"], it["context"], it["query"]), pc)
                t0, p0 = time.perf_counter(), time.process_time()
                (tr,) = trace_lockstep(tracer, [prep], pc)
                irow["inprocess_seconds"] = time.perf_counter() - t0
                irow["inprocess_cpu_seconds"] = time.process_time() - p0
                irow["inprocess_answer"] = lm.tokenizer.decode(tr.answer_ids, skip_special_tokens=True)
                irow["inprocess_answer_ids"] = tr.answer_ids.tolist()
                irow["inprocess_steps"] = tr.n_steps
                irow["z_inprocess_full"] = float(RePCS().z([tr])[0])
                for k in (1, 5, 20):
                    irow[f"z_inprocess_topk{k}"] = float(RePCS(estimator="topk", k=k).z([tr])[0])
                if "endpoint_answer_ids" in er:
                    (tf,) = trace_lockstep(tracer, [prep], pc, forced_answers=[er["endpoint_answer_ids"]])
                    irow["z_forced_full"] = float(RePCS().z([tf])[0])
                    irow["z_forced_topk20"] = float(RePCS(estimator="topk", k=20).z([tf])[0])
                    irow["max_abs_logprob_diff_forced"] = float(
                        max(
                            np.max(
                                np.abs(tf.logprob_answer_with - np.asarray(er["endpoint_logprob_with"])),
                                initial=0.0,
                            ),
                            np.max(
                                np.abs(
                                    tf.logprob_answer_without - np.asarray(er["endpoint_logprob_without"])
                                ),
                                initial=0.0,
                            ),
                        )
                    )
                if "server_prompt_ids" in er:
                    p_with, _ = builder.pair(it["context"], it["query"], tpl)
                    b, _ = builder.pair(it["context"], it["query"], lm.tokenizer)
                    irow["same_prompt_text"] = p_with == b
                    irow["same_prompt_ids"] = tracer.encode(p_with, chat=True) == er["server_prompt_ids"]
                ip_rows[it["id"]] = irow
                _append(ip_path, irow)
            if (n + 1) % 10 == 0:
                print(f"{n + 1}/{len(todo)} items {time.perf_counter() - t_all:.0f} s", flush=True)
        client.close()
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
