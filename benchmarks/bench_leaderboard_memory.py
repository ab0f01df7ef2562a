"""Peak memory of ``mnemoscope bench run`` on a WikiMIA-32-sized set, against a bare baseline.

Issue 19 measured 6.6 GB peak resident memory for the likelihood attacks on public WikiMIA-32
(776 documents of at most 174 tokens) with the default model; per-document state must be
O(tokens), not O(tokens x vocabulary), and the target is under 1.5 GB.

Each measurement runs in a fresh process (its peak RSS is read with ``getrusage`` from a
wrapper process that runs only it):

* ``bare``: load the model, tokenize the documents and run one forward pass on the first
  (the floor any run pays: the weights are memory-mapped and only count once touched);
* ``run``: ``mnemoscope bench run`` with the default methods (likelihood attacks + ``ref`` +
  the blind baselines) on the same file.

The data: ``--data FILE`` (e.g. the real WikiMIA-32 JSONL, which needs the hub) or, by
default, a WikiMIA-format file of 776 documents of 30-170 tokens built deterministically from
the shipped authored corpus (same size and length profile; the shipped machines cannot reach
the hub). Writes ``benchmarks/results/leaderboard_memory.json``.

    python benchmarks/bench_leaderboard_memory.py [--data FILE] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "leaderboard_memory.json"

_WRAP = (
    "import resource, subprocess, sys, time; t = time.perf_counter(); "
    "rc = subprocess.run(sys.argv[1:]).returncode; "
    "print('MEASURE', rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, time.perf_counter() - t)"
)

_BARE = """
import json, sys
from mnemoscope.models import load_model
lm = load_model("default")
rows = [json.loads(x) for x in open(sys.argv[1])]
ids = lm.tokenizer([r["input"] for r in rows], add_special_tokens=False)["input_ids"]
print("tokens: max", max(map(len, ids)), "mean", sum(map(len, ids)) / len(ids))
import torch
with torch.no_grad():
    lm.model(input_ids=torch.tensor([ids[0]]), use_cache=False, logits_to_keep=1)
"""


def measure(argv: list[str], env: dict[str, str]) -> dict[str, float]:
    """Peak RSS (MB) and wall seconds of one fresh process."""
    out = subprocess.run(
        [sys.executable, "-c", _WRAP, *argv], capture_output=True, text=True, env=env, check=False
    )
    line = next((x for x in out.stdout.splitlines() if x.startswith("MEASURE")), None)
    if line is None:
        raise SystemExit(f"measurement failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    _, rc, kb, secs = line.split()
    if int(rc) != 0:
        raise SystemExit(f"{argv} exited {rc}:\n{out.stderr[-3000:]}")
    return {"peak_rss_mb": round(int(kb) / 1024, 1), "seconds": round(float(secs), 1)}


def synthetic_wikimia(path: Path, n: int = 776, seed: int = 0) -> None:
    """A WikiMIA-format file (``{"input", "label"}``) of ``n`` documents from the authored corpus."""
    from mnemoscope.bench.suites import membership_documents

    rng = random.Random(seed)
    words = " ".join(d.text for d in membership_documents()).split()
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            k = rng.randint(22, 120)
            s = rng.randint(0, len(words) - k)
            f.write(json.dumps({"input": " ".join(words[s : s + k]), "label": i % 2}) + "\n")


def main() -> int:
    import os

    from mnemoscope.provenance import provenance

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=None, help="a WikiMIA-format JSONL (default: synthetic)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data
        if data is None:
            data = Path(tmp) / "wikimia_like.jsonl"
            synthetic_wikimia(data)
        bare = measure([sys.executable, "-c", _BARE, str(data)], env)
        print(
            f"bare (load the model, tokenize, one forward): {bare['peak_rss_mb']:.0f} MB, {bare['seconds']:.0f} s"
        )
        t0 = time.time()
        run = measure(
            [
                sys.executable, "-m", "mnemoscope", "--quiet", "bench", "run", "--data", str(data),
                "--format", "wikimia", "--out", str(Path(tmp) / "lb"), "--threads", str(args.threads),
            ],
            env,
        )  # fmt: skip
        lb = json.loads((Path(tmp) / "lb" / "leaderboard.json").read_text())
        runinfo = json.loads((Path(tmp) / "lb" / "run.json").read_text())
        print(f"bench run (default methods + blind): {run['peak_rss_mb']:.0f} MB, {run['seconds']:.0f} s")
        print(f"ratio run / bare: {run['peak_rss_mb'] / bare['peak_rss_mb']:.2f}")
        result = {
            "data": str(args.data)
            if args.data
            else "synthetic WikiMIA-format, 776 docs (authored corpus words)",
            "n_documents": runinfo["n_documents"],
            "threads": args.threads,
            "bare": bare,
            "bench_run": run,
            "ratio": round(run["peak_rss_mb"] / bare["peak_rss_mb"], 2),
            "target_mb": 1500,
            "under_target": run["peak_rss_mb"] < 1500,
            "methods": sorted({e["method"] for e in lb}),
            "shift_warning": runinfo["shift_warning"],
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0)),
            "command": " ".join([sys.executable, *sys.argv]),
            "provenance": provenance(),
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
