"""RePCS overhead on the embedded default model, measured in one run.

For each request (one at a time, as a RAG service answers them): (a) answer with the context
= greedy generation of T tokens; (b) the same plus RePCS on the serving path = one extra
teacher-forced no-context forward + the KL sums (:func:`mnemoscope.trace.pair.online_kl`);
(c) the full paired trace the offline tools use (generation + two teacher-forced forwards +
hidden states + top-k). Reported: median seconds per request and overhead (b)/(a) - 1 and
(c)/(a) - 1, for T = 32 and 64.

Usage: python benchmarks/bench_repcs.py [--n 16] [--out benchmarks/results/repcs_overhead.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

from mnemoscope.provenance import provenance


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=16, help="requests per setting")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "repcs_overhead.json"))
    args = ap.parse_args()

    import torch

    from mnemoscope.bench.reliance import load_reliance
    from mnemoscope.models import load_model
    from mnemoscope.trace import PairConfig, Tracer, prepare_pair, trace_prepared
    from mnemoscope.trace.pair import PairItem, online_kl

    lm = load_model("default")
    tracer = Tracer(lm, batch_size=1)
    items = [PairItem(r["id"], r["context"], r["query"]) for r in load_reliance()[:: max(1, 450 // args.n)]][
        : args.n
    ]
    result: dict = {
        "machine": {
            "platform": platform.platform(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
        },
        "n_requests": len(items),
        "settings": {},
    }
    for T in (32, 64):
        cfg = PairConfig(max_new_tokens=T, answer_without=False)
        prepared = [prepare_pair(tracer, it, cfg) for it in items]
        online_kl(tracer, prepared[0], T)  # warm-up
        times: dict[str, list[float]] = {"answer": [], "answer_plus_repcs": [], "full_paired_trace": []}
        steps = []
        for p in prepared:  # interleaved per request so load drift hits all three alike
            t0 = time.perf_counter()
            ans = tracer.generate([p.ids_with], T)[0]
            times["answer"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            online = online_kl(tracer, p, T)
            times["answer_plus_repcs"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            trace_prepared(tracer, [p], cfg)
            times["full_paired_trace"].append(time.perf_counter() - t0)
            assert online.answer_ids == ans
            steps.append(len(ans))
        med = {k: statistics.median(v) for k, v in times.items()}
        result["settings"][f"T={T}"] = {
            "median_seconds": {k: round(v, 4) for k, v in med.items()},
            "total_seconds": {k: round(sum(v), 3) for k, v in times.items()},
            "overhead_repcs_pct": round(
                100 * (sum(times["answer_plus_repcs"]) / sum(times["answer"]) - 1), 1
            ),
            "overhead_full_trace_pct": round(
                100 * (sum(times["full_paired_trace"]) / sum(times["answer"]) - 1), 1
            ),
            "mean_generated_tokens": statistics.mean(steps),
        }
        s = result["settings"][f"T={T}"]
        print(
            f"T={T}: answer {med['answer']:.3f} s, +RePCS {med['answer_plus_repcs']:.3f} s "
            f"(overhead {s['overhead_repcs_pct']}%), full paired trace {med['full_paired_trace']:.3f} s "
            f"({s['overhead_full_trace_pct']}%); mean tokens {s['mean_generated_tokens']:.1f}"
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    result["provenance"] = provenance()
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
