"""What an audit costs over plain answering, measured in one run on the default model.

For the same prompts, the same T and the same batch composition, interleaved so that load
drift hits every variant alike:

* ``bare``: greedy answering with the context (``Tracer.generate``: transformers' generate with
  a KV cache), the baseline;
* ``audit``: ``Auditor.audit`` end to end (lockstep decoding of both paths with hidden states,
  token attribution, signals, CRM, the verdict);
* ``lockstep`` / ``fused``: the decoding alone (``trace_lockstep`` with each schedule, hidden
  states on; ``audit`` uses ``auto``: fused below 4 pairs per batch, lockstep from 4);
* ``paired_trace``: the older offline path (generate, then teacher-force both paths).

Reported: median seconds per batch, total-time ratios against ``bare`` of the same run, and
the answer lengths (answers end at EOS, identically for every variant: the same greedy answer).

Usage: python benchmarks/bench_audit.py [--n 16] [--threads 2] [--out benchmarks/results/audit/overhead.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

from build_default_profile import ROOT, provenance


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=16, help="requests per setting")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "audit" / "overhead.json"))
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from mnemoscope.audit.auditor import Auditor, AuditRequest
    from mnemoscope.bench.reliance import load_reliance
    from mnemoscope.trace import prepare_pair, trace_prepared
    from mnemoscope.trace.lockstep import trace_lockstep
    from mnemoscope.trace.pair import PairItem

    auditor = Auditor.from_spec("default")
    tracer = auditor.tracer
    rel = load_reliance()
    items = [PairItem(r["id"], r["context"], r["query"]) for r in rel[:: max(1, len(rel) // args.n)]][
        : args.n
    ]
    result: dict = {
        **provenance(),
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "load_avg_start": [round(x, 2) for x in os.getloadavg()],
        },
        "n_requests": len(items),
        "settings": {},
    }
    for T in (32, 64):
        for bs in (1, 8):
            tracer.batch_size = bs
            auditor.backend.batch_size = bs
            cfg = auditor.profile.pair_config(T)
            prepared = [prepare_pair(tracer, it, cfg) for it in items]
            groups = [prepared[i : i + bs] for i in range(0, len(prepared), bs)]
            reqs = [[AuditRequest(p.item.context, p.item.query, max_new_tokens=T) for p in g] for g in groups]
            # warm-up
            tracer.generate([groups[0][0].ids_with], T)
            auditor.audit(reqs[0][:1])
            times: dict[str, list[float]] = {
                "bare": [],
                "audit": [],
                "lockstep": [],
                "fused": [],
                "paired_trace": [],
            }
            n_tokens = []
            for g, rq in zip(groups, reqs, strict=True):
                t0 = time.perf_counter()
                answers = tracer.generate([p.ids_with for p in g], T)
                times["bare"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                audits = auditor.audit(rq)
                times["audit"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                lock = trace_lockstep(tracer, g, cfg, schedule="lockstep")
                times["lockstep"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                trace_lockstep(tracer, g, cfg, schedule="fused")
                times["fused"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                trace_prepared(tracer, g, cfg)
                times["paired_trace"].append(time.perf_counter() - t0)
                for a, lk, au in zip(answers, lock, audits, strict=True):
                    assert a == lk.answer_ids.tolist(), "lockstep and bare generation disagree"
                    assert not hasattr(au, "status"), au
                    n_tokens.append(len(a))
            tot = {k: sum(v) for k, v in times.items()}
            s = {
                "median_seconds_per_batch": {k: round(statistics.median(v), 4) for k, v in times.items()},
                "total_seconds": {k: round(v, 3) for k, v in tot.items()},
                "ratio_vs_bare": {k: round(v / tot["bare"], 3) for k, v in tot.items()},
                "overhead_audit_pct": round(100 * (tot["audit"] / tot["bare"] - 1), 1),
                "overhead_lockstep_pct": round(100 * (tot["lockstep"] / tot["bare"] - 1), 1),
                "overhead_fused_pct": round(100 * (tot["fused"] / tot["bare"] - 1), 1),
                "overhead_paired_trace_pct": round(100 * (tot["paired_trace"] / tot["bare"] - 1), 1),
                "mean_answer_tokens": round(statistics.mean(n_tokens), 1),
            }
            result["settings"][f"T={T},batch={bs}"] = s
            print(
                f"T={T} batch={bs}: bare {s['median_seconds_per_batch']['bare']:.3f} s/batch; audit "
                f"{s['overhead_audit_pct']:+.1f} %, lockstep {s['overhead_lockstep_pct']:+.1f} %, "
                f"fused {s['overhead_fused_pct']:+.1f} %, "
                f"paired trace {s['overhead_paired_trace_pct']:+.1f} %; mean answer {s['mean_answer_tokens']} tokens",
                flush=True,
            )
    result["machine"]["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"-> {out}")


if __name__ == "__main__":
    main()
