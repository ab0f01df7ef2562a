"""What an audit costs before and after a change of the audit core, side by side in one run.

Each variant is a source tree (``--tree NAME=PATH``: a checkout of a commit, e.g. a ``git worktree``
of the commit before) and a profile (``--profile NAME=DIR``; default: that tree's shipped profile of
the default model). Every round runs each variant in its own Python process (``PYTHONPATH`` = the
tree's ``src``), in rotating order so that load drift hits every variant alike; a process loads
the default model once, warms up on one item, then times ``Auditor.audit`` on the same ``--n``
held-out items of the shipped verdict split at each batch size (``--batch 1,8``). Reported: median
seconds per answer of each variant and batch size over the rounds, and each variant's ratio to the
first one (the bare baseline, measured in the same run).

Usage:
    python benchmarks/bench_verdict_cost.py --tree before=/work/wt_old --tree after=. \\
        --profile after=runs/profile [--n 16] [--rounds 3] [--threads 1] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
from mnemoscope.models import load_model
from mnemoscope.audit.auditor import Auditor, AuditRequest, AuditFailure
from mnemoscope.audit.profile import default_profile_path, load_profile
items = json.loads(sys.argv[2]); batches = [int(b) for b in sys.argv[3].split(",")]
prof_dir = sys.argv[4] or None
lm = load_model("default")
prof = load_profile(prof_dir or default_profile_path(lm.info), model=lm.info)
out = {"signals": list(prof.verdict.selected_) if prof.verdict is not None else [], "per_answer": {}}
for b in batches:
    a = Auditor(lm, prof, batch_size=b)
    a.audit([AuditRequest(items[0]["context"], items[0]["query"])])  # warm-up
    reqs = [AuditRequest(it["context"], it["query"], id=it["id"]) for it in items]
    t0 = time.perf_counter()
    res = a.audit(reqs)
    out["per_answer"][str(b)] = (time.perf_counter() - t0) / len(reqs)
    out.setdefault("failed", {})[str(b)] = sum(isinstance(r, AuditFailure) for r in res)
print("RESULT " + json.dumps(out))
"""


def _items(n: int) -> list[dict[str, str]]:
    verified = ROOT / "benchmarks" / "results" / "verdict" / "verified.jsonl"
    split = json.loads((ROOT / "benchmarks" / "results" / "verdict" / "split.json").read_text())
    held = set(split["test_ids"])
    rows = [json.loads(line) for line in verified.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r["id"] in held] or rows
    return [{"id": r["id"], "context": r["context"], "query": r["query"]} for r in rows[:n]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", required=True, metavar="NAME=PATH")
    ap.add_argument("--profile", action="append", default=[], metavar="NAME=DIR")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "verdict" / "cost.json"))
    args = ap.parse_args()
    trees = dict(t.split("=", 1) for t in args.tree)
    profiles = dict(p.split("=", 1) for p in args.profile)
    items = _items(args.n)
    runs: dict[str, list[dict]] = {k: [] for k in trees}
    names = list(trees)
    load = [os.getloadavg()]
    t_start = time.time()
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            env = {
                **os.environ,
                "PYTHONPATH": str(Path(trees[name]).resolve() / "src"),
                "OMP_NUM_THREADS": str(args.threads),
            }
            proc = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    CHILD,
                    str(args.threads),
                    json.dumps(items),
                    args.batch,
                    profiles.get(name, ""),
                ],
                capture_output=True,
                text=True,
                env=env,
                check=False,
            )
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                raise SystemExit(f"variant {name} failed:\n{proc.stderr[-3000:]}")
            runs[name].append(json.loads(line[len("RESULT ") :]))
            print(name, runs[name][-1], file=sys.stderr)
        load.append(os.getloadavg())
    base = names[0]
    summary: dict[str, dict] = {}
    for name in names:
        per = {}
        for b in args.batch.split(","):
            med = statistics.median(x["per_answer"][b] for x in runs[name])
            ref = statistics.median(x["per_answer"][b] for x in runs[base])
            per[b] = {"seconds_per_answer": med, f"ratio_to_{base}": med / ref}
        summary[name] = {"signals": runs[name][0]["signals"], "batch": per}
    from mnemoscope.provenance import provenance

    rec = {
        "command": "python benchmarks/bench_verdict_cost.py " + " ".join(sys.argv[1:]),
        "provenance": provenance(),
        "trees": trees,
        "profiles": profiles,
        "n": len(items),
        "rounds": args.rounds,
        "threads": args.threads,
        "load_average": load,
        "seconds": time.time() - t_start,
        "summary": summary,
        "runs": runs,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rec, indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
