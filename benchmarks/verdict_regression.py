"""Same inputs, same verdicts: real-model audits before and after a change of the audit core.

Audits, with the default model and its shipped profile, the held-out third of the verified
context-reliance items (``results/verdict/split.json``; rule ``combined``) plus special cases
(empty context, empty context with a given answer, a given answer, a non-ASCII answer, a short
T), and the first 16 held-out items + the special cases under the rules ``repcs`` and
``crm-anomaly``. Writes one JSON line per audit (``{"rule", "id", **AuditResult.to_dict()}``,
sorted keys).

``--compare REF`` compares with a reference file written the same way by an earlier commit:
every line must be byte-identical except the fields named in ``--allow`` (the new ``memory_flag``
field, the CRM block's label whose literal AUC was removed). It also recomputes part B of
``verdict_eval.py`` (the held-out figures) from the ``combined`` audits and compares them with
the committed ``results/verdict/eval.json`` (all but the run time).

Usage:
    python benchmarks/verdict_regression.py --out runs/verdict-regression/after.jsonl \
        [--compare runs/verdict-regression/before.jsonl] [--report benchmarks/results/verdict/regression/report.json]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from build_default_profile import RESULTS, provenance
from verdict_eval import held_out_items, held_out_metrics

ALLOW = ("memory_flag", "crm.label")


def special_cases() -> list[Any]:
    from mnemoscope.audit.auditor import AuditRequest

    return [
        AuditRequest("", "What is the capital of France?", id="empty-context"),
        AuditRequest("", "Which river is Quenmar on?", answer="The Zorblat.", id="empty-context-answer"),
        AuditRequest(
            "Quenmar lies on the Zorblat river, in the north of Velmoria.",
            "Which river is Quenmar on?",
            answer="Quenmar is on the Zorblat.",
            id="given-answer",
        ),
        AuditRequest(
            "Paris is the capital of France.",
            "What is the capital of France?",
            answer="Paris, naïve café — 東京 🙂",
            id="unicode-answer",
        ),
        AuditRequest(
            "Quenmar lies on the Zorblat river.", "Which river is Quenmar on?", max_new_tokens=5, id="short-T"
        ),
    ]


def run(out: Path, profile: str | None = None) -> float:
    from mnemoscope.audit.auditor import Auditor, AuditRequest

    verified = [json.loads(x) for x in (RESULTS / "verified.jsonl").read_text().splitlines() if x.strip()]
    items = held_out_items(verified)
    reqs = [AuditRequest(it["context"], it["query"], id=it["id"]) for it in items]
    t0 = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as f:
        for rule in ("combined", "repcs", "crm-anomaly"):
            a = Auditor.from_spec("default", rule=rule, profile=profile)
            batch = (reqs if rule == "combined" else reqs[:16]) + special_cases()
            res: list[Any] = []
            for s in range(0, len(batch), 8):
                res += a.audit(batch[s : s + 8])
            for r, q in zip(res, batch, strict=True):
                row = {"rule": rule, "id": q.id, **r.to_dict()}
                f.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
    return time.perf_counter() - t0


def _drop(d: dict[str, Any], path: str) -> None:
    head, _, rest = path.partition(".")
    if not rest:
        d.pop(head, None)
    elif isinstance(d.get(head), dict):
        _drop(d[head], rest)


def _read(path: Path) -> list[str]:
    import gzip

    raw = path.read_bytes()
    return (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode("utf-8").splitlines()


def _close(x: Any, y: Any, atol: float) -> bool:
    """Equal, numbers within ``atol`` (the decoder's float rounding), every label and text exact."""
    if isinstance(x, bool) or isinstance(y, bool) or x is None or y is None:
        return x == y
    if isinstance(x, (int, float)) and isinstance(y, (int, float)):
        return abs(float(x) - float(y)) <= atol
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_close(x[k], y[k], atol) for k in x)
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(_close(a, b, atol) for a, b in zip(x, y, strict=True))
    return bool(x == y)


def compare(new: Path, ref: Path, allow: tuple[str, ...], atol: float = 0.0) -> dict[str, Any]:
    a = _read(new)
    b = _read(ref)
    identical = sum(x == y for x, y in zip(a, b, strict=False))
    differ: list[str] = []
    for x, y in zip(a, b, strict=False):
        if x == y:
            continue
        dx, dy = json.loads(x), json.loads(y)
        for p in allow:
            _drop(dx, p)
            _drop(dy, p)
        if not _close(dx, dy, atol):
            differ.append(f"{dx.get('rule')}:{dx.get('id')}")
    return {
        "lines_new": len(a),
        "lines_reference": len(b),
        "byte_identical_lines": identical,
        "identical_except_allowed": len(a) == len(b) and not differ,
        "allowed_differences": list(allow),
        "numeric_tolerance": atol,
        "differing": differ,
    }


def held_out_check(new: Path) -> dict[str, Any]:
    verified = [json.loads(x) for x in (RESULTS / "verified.jsonl").read_text().splitlines() if x.strip()]
    items = held_out_items(verified)
    by_id = {}
    for line in new.read_text(encoding="utf-8").splitlines():
        d = json.loads(line)
        if d.pop("rule") == "combined":
            by_id[d.pop("id")] = d
    audits = [by_id.get(it["id"]) for it in items]
    got = held_out_metrics(items, audits, 0.0)
    committed = json.loads((RESULTS / "eval.json").read_text())["B_held_out"]
    keys = sorted((set(got) | set(committed)) - {"seconds"})
    return {
        "committed": "benchmarks/results/verdict/eval.json B_held_out",
        "identical": all(got.get(k) == committed.get(k) for k in keys),
        "differing_keys": [k for k in keys if got.get(k) != committed.get(k)],
        "recomputed": got,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--compare")
    ap.add_argument("--allow", nargs="*", default=list(ALLOW))
    ap.add_argument("--report")
    ap.add_argument("--skip-run", action="store_true", help="compare an existing --out")
    ap.add_argument("--profile", help="audit with this profile folder (default: the shipped one)")
    ap.add_argument(
        "--atol",
        type=float,
        default=0.0,
        help="numbers may differ by this much (a new decoder's float rounding)",
    )
    ap.add_argument("--no-part-b", action="store_true", help="skip the part B check (another profile)")
    args = ap.parse_args()
    out = Path(args.out)
    import torch

    load = list(os.getloadavg())
    secs = None if args.skip_run else run(out, args.profile)
    report: dict[str, Any] = {
        **provenance(),
        "machine": {
            "torch_threads": torch.get_num_threads(),
            "load_avg_start": [round(x, 2) for x in load],
            "note": "shared 2-core machine (other jobs running)",
        },
        "seconds": None if secs is None else round(secs, 1),
        "audits": str(out),
        "profile": args.profile or "shipped",
    }
    if args.compare:
        report["compare"] = {
            "reference": args.compare,
            **compare(out, Path(args.compare), tuple(args.allow), args.atol),
        }
    if not args.no_part_b:
        report["held_out_part_b"] = held_out_check(out)
    print(json.dumps({k: v for k, v in report.items() if k != "held_out_part_b"}, indent=1))
    if not args.no_part_b:
        print("part B identical to the committed figures:", report["held_out_part_b"]["identical"])
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=1, default=float) + "\n")


if __name__ == "__main__":
    main()
