"""What leave-one-passage-out scoring adds to an in-process audit (issue 41), on the default model.

One process (one model load), ``--threads`` torch threads. The same ``--n`` held-out items of the
shipped verdict split are audited four ways, each against its own bare baseline in the same run:

* ``bare-1``: the item's context as one string (today's audit: no passages, no ablation);
* ``passages-1``: the same context as one passage (``passages=(context,)``): leaving it out is the
  no-context path, already traced, so nothing more runs (ratio to ``bare-1``: expected 1);
* ``bare-4``: four passages joined as one string (the item's own context + three other items'
  contexts, its own at position ``i % 4``): the trace of the 4-passage context without ablation;
* ``passages-4``: the same four passages as ``passages``: the trace plus the answer scored with
  each selected passage left out (ratio to ``bare-4``: the ablation's cost).

The passages left out are chosen by ``features.facts.passages_to_ablate`` (``--selector facts``,
the backend's own choice; how many per audit is recorded) or are the item's own passage
(``--selector own``: exactly one per audit, the stand-in before the facts' choice existed).
Every round runs the four variants in rotating order (load drift hits each alike); reported:
median seconds per audit of each variant and batch size over the rounds, the ratios, and the
model's forward passes per audit (counted, deterministic), with the load average before and after.
The leave-one-out step itself (``LocalBackend.ablate``) is also timed inside each ``passages-4``
audit run: ``ablation_share`` = its seconds over the whole audit's, a ratio within one run that
load drift between the variants does not move.

Usage:
    OMP_NUM_THREADS=1 python benchmarks/bench_passage_ablation.py [--n 8] [--rounds 3] [--batch 1,8]
        [--selector facts|own] [--out benchmarks/results/passages/ablation_cost.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mnemoscope.trace.hooks import counted_forwards as _counted

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("bare-1", "passages-1", "bare-4", "passages-4")


def _items(n: int) -> list[dict[str, Any]]:
    verified = ROOT / "benchmarks" / "results" / "verdict" / "verified.jsonl"
    split = json.loads((ROOT / "benchmarks" / "results" / "verdict" / "split.json").read_text())
    held = set(split["test_ids"])
    rows = [json.loads(line) for line in verified.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r["id"] in held] or rows
    # both kinds (memorized, context-needed), alternating, in the split's order
    kinds: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        kinds.setdefault(str(r.get("kind")), []).append(r)
    mixed = [r for pair in zip(*kinds.values(), strict=False) for r in pair]
    chosen = mixed[:n]
    others = [r for r in rows if r not in chosen]
    out = []
    for i, r in enumerate(chosen):
        distract = [others[(3 * i + k) % len(others)]["context"] for k in range(3)]
        own = i % 4
        passages = [*distract[:own], r["context"], *distract[own:]]
        out.append(
            {
                "id": r["id"],
                "kind": r.get("kind"),
                "context": r["context"],
                "query": r["query"],
                "passages": passages,
                "own": own,
            }
        )
    return out


def _request(context: str, query: str, rid: str, passages: tuple[str, ...] | None) -> Any:
    from mnemoscope.audit.requests import AuditRequest

    if any(f.name == "passages" for f in dataclasses.fields(AuditRequest)):
        return AuditRequest(context, query, id=rid, passages=passages)  # type: ignore[call-arg]

    @dataclasses.dataclass(frozen=True)
    class WithPassages(AuditRequest):  # before requests.py has the field (same attribute)
        passages: tuple[str, ...] | None = None

    return WithPassages(context, query, id=rid, passages=passages)


def _requests(items: list[dict[str, Any]], variant: str) -> list[Any]:
    from mnemoscope.trace.passages import join_passages

    out = []
    for it in items:
        if variant == "bare-1":
            out.append(_request(it["context"], it["query"], it["id"], None))
        elif variant == "passages-1":
            out.append(_request(join_passages([it["context"]]), it["query"], it["id"], (it["context"],)))
        elif variant == "bare-4":
            out.append(_request(join_passages(it["passages"]), it["query"], it["id"], None))
        else:
            ps = tuple(it["passages"])
            out.append(_request(join_passages(ps), it["query"], it["id"], ps))
    return out


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--selector",
        choices=("facts", "own"),
        default=None,
        help="default: facts when features.facts.passages_to_ablate exists, else own",
    )
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "passages" / "ablation_cost.json"))
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from mnemoscope.audit.auditor import AuditFailure, Auditor
    from mnemoscope.audit.profile import default_profile_path, load_profile
    from mnemoscope.features import facts
    from mnemoscope.models import load_model

    selector = args.selector or ("facts" if hasattr(facts, "passages_to_ablate") else "own")
    items = _items(args.n)
    own_of = {it["id"]: it["own"] for it in items}
    load = {"before": os.getloadavg()}
    lm = load_model("default")
    prof = load_profile(default_profile_path(lm.info), model=lm.info)
    batches = [int(b) for b in args.batch.split(",")]
    times: dict[str, dict[str, list[float]]] = {str(b): {v: [] for v in VARIANTS} for b in batches}
    forwards: dict[str, dict[str, float]] = {str(b): {} for b in batches}
    shares: dict[str, list[float]] = {str(b): [] for b in batches}
    commit, dirty = _git("rev-parse", "HEAD"), bool(_git("status", "--porcelain", "--untracked-files=no"))
    ablated: dict[str, list[int]] = {}
    failed = 0
    t_start = time.time()
    for b in batches:
        auditor = Auditor(lm, prof, batch_size=b)
        if selector == "own":
            auditor.backend.passages_to_ablate = lambda t, pieces: [own_of[t.id]]  # type: ignore[method-assign]
        seen: list[Any] = []  # what the backend returned last (audit() returns results, not traces)
        run = auditor.backend.run

        def recorded(prepared: Any, run: Any = run, seen: list[Any] = seen) -> Any:
            seen.append(run(prepared))
            return seen[-1]

        auditor.backend.run = recorded  # type: ignore[method-assign]
        spent: list[float] = []  # seconds inside LocalBackend.ablate, per call
        ablate = auditor.backend.ablate

        def timed(*a: Any, ablate: Any = ablate, spent: list[float] = spent) -> Any:
            t0 = time.perf_counter()
            try:
                return ablate(*a)
            finally:
                spent.append(time.perf_counter() - t0)

        auditor.backend.ablate = timed  # type: ignore[method-assign]
        auditor.audit(_requests(items[:1], "passages-4"))  # warm-up
        for r in range(args.rounds):
            order = VARIANTS[r % 4 :] + VARIANTS[: r % 4]
            for v in order:
                reqs = _requests(items, v)
                spent.clear()
                with _counted(lm.model) as n:
                    t0 = time.perf_counter()
                    res = auditor.audit(reqs)
                    dt = time.perf_counter() - t0
                times[str(b)][v].append(dt / len(reqs))
                if v == "passages-4":
                    shares[str(b)].append(sum(spent) / dt)
                forwards[str(b)][v] = n[0] / len(reqs)
                failed += sum(isinstance(x, AuditFailure) for x in res)
                if v == "passages-4" and r == 0:
                    ablated[str(b)] = [
                        len(x[0].passage_ablated) if not isinstance(x, AuditFailure) else -1 for x in seen[-1]
                    ]
    load["after"] = os.getloadavg()
    med = {b: {v: statistics.median(ts) for v, ts in d.items()} for b, d in times.items()}
    ratios = {
        b: {
            "passages-1 / bare-1": m["passages-1"] / m["bare-1"],
            "passages-4 / bare-4": m["passages-4"] / m["bare-4"],
        }
        for b, m in med.items()
    }
    out = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "git_commit": commit,  # at the start: the code this process imported
        "git_dirty": dirty,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "torch_threads": args.threads,
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        },
        "load_average": load,
        "model": lm.info.to_dict().get("name") or str(lm.info.to_dict().get("spec")),
        "profile": str(prof.path),
        "n": len(items),
        "rounds": args.rounds,
        "selector": selector,
        "items": [{"id": it["id"], "kind": it["kind"], "own_passage": it["own"]} for it in items],
        "seconds_per_audit_median": med,
        "seconds_per_audit_rounds": times,
        "ratios": ratios,
        # seconds in LocalBackend.ablate / seconds of the whole passages-4 audit run, per round
        "ablation_share_rounds": shares,
        "ablation_share_median": {b: statistics.median(x) for b, x in shares.items()},
        # the ratio passages-4 / bare-4 the share implies (1 / (1 - share)), free of between-variant drift
        "ratio_from_share": {b: 1.0 / (1.0 - statistics.median(x)) for b, x in shares.items()},
        "forward_passes_per_audit": forwards,
        "passages_ablated_per_audit": ablated,
        "failed": failed,
        "wall_seconds": time.time() - t_start,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    for b in med:
        print(f"batch {b}: " + ", ".join(f"{v} {med[b][v] * 1000:.0f} ms" for v in VARIANTS))
        print(f"  ratios {ratios[b]}  forwards/audit {forwards[b]}  ablated {ablated.get(b)}")
        print(f"  ablation share of the passages-4 audit {statistics.median(shares[b]):.3f}")
    print(f"load {load}; wrote {args.out}")


if __name__ == "__main__":
    main()
