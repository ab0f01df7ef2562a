"""Ablation of the verdict's signals on one calibration run: each candidate alone and added to the
whole-answer verdict, every row fitted and validated by ``mnemoscope calibrate`` itself.

Usage:
    python benchmarks/verdict_ablation.py run NAME RUN_DIR -- CALIBRATE_ARGS...
    python benchmarks/verdict_ablation.py table          # the docs/calibrate.md ablation table

``run`` re-fits the profile of one calibration run (``RUN_DIR/profile``, traced by
``mnemoscope calibrate``; its traces are reused, nothing is traced again) once per row of
:data:`ROWS`, each with ``--verdict-signals`` set to the row's signals, into
``RUN_DIR/ablation/<row>/`` (its ``traces`` is a link to the run's). The rest of the command line is
the run's own ``calibrate`` arguments (model or endpoint, ``--threads``...), so the draw, the label
verification, the split by fact and the certification are the product's, row for row. Each row's
figures are read from the ``validation.json`` that ``calibrate`` wrote (held-out AUC with its CI,
false flags overall and per kind, memory recall, the three-way source on clearly-labelled answers)
into ``benchmarks/results/verdict/ablation/NAME.json`` with the command and the git commit.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "verdict" / "ablation"

WHOLE = ("repcs_z", "closed_book_logprob", "context_token_fraction")
FACT = ("fact_cb_logratio", "fact_cb_rank", "fact_switched", "fact_cb_entropy", "fact_pmi")
AGREE = "closed_book_agreement"
#: (row name, signals): the whole-answer verdict (before), each answer-bearing-word signal and the
#: closed-book answer's agreement alone and added to it, the teacher-forced ones together, and all
ROWS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("whole-answer (before)", WHOLE),
    *((f"{s} alone", (s,)) for s in (*FACT, AGREE)),
    *((f"whole-answer + {s}", (*WHOLE, s)) for s in (*FACT, AGREE)),
    ("whole-answer + all answer-bearing (teacher-forced)", (*WHOLE, *FACT)),
    ("whole-answer + all answer-bearing + closed_book_agreement", (*WHOLE, *FACT, AGREE)),
)


def _slug(name: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in name).strip("-").replace("--", "-")


def _figures(prof_dir: Path) -> dict[str, Any]:
    val = json.loads((prof_dir / "validation.json").read_text())
    prof = json.loads((prof_dir / "profile.json").read_text())
    auc = val.get("auc") if isinstance(val.get("auc"), dict) else {}
    return {
        "selected": (prof.get("verdict") or {}).get("selected"),
        "certified": (prof.get("verdict") or {}).get("certified"),
        "auc": auc.get("estimate"),
        "auc_ci": auc.get("ci"),
        "false_flags": val.get("false_flags"),
        "n_context": (val.get("held_out") or {}).get("n_context"),
        "false_flag_rate": val.get("false_flag_rate"),
        "false_flag_ci": val.get("false_flag_ci"),
        "false_flags_by_kind": val.get("false_flags_by_kind"),
        "memory_recall": val.get("memory_recall"),
        "n_memory": (val.get("held_out") or {}).get("n_memory"),
        "accuracy_3way": val.get("accuracy_3way"),
        "accuracy_3way_clear": val.get("accuracy_3way_clear"),
        "n_clear": val.get("n_clear"),
    }


def run(name: str, run_dir: Path, cal_args: list[str]) -> Path:
    from mnemoscope.cli.main import main
    from mnemoscope.provenance import provenance

    traces = (run_dir / "profile" / "traces").resolve()
    if not ((traces / "pairs").is_dir() or (traces / "index.jsonl").is_file()):  # in process / endpoint
        raise SystemExit(
            f"{traces} holds no traces: run mnemoscope calibrate into {run_dir / 'profile'} first"
        )
    out = OUT / f"{name}.json"
    done: dict[str, Any] = json.loads(out.read_text())["rows"] if out.is_file() else {}
    rows: dict[str, Any] = {}
    for row, signals in ROWS:
        d = run_dir / "ablation" / _slug(row)
        d.mkdir(parents=True, exist_ok=True)
        if not (d / "traces").exists():
            os.symlink(traces, d / "traces")
        argv = ["--quiet", "calibrate", *cal_args, "--out", str(d), "--verdict-signals", ",".join(signals)]
        if row in done and done[row].get("signals") == list(signals) and (d / "validation.json").is_file():
            rows[row] = done[row]
            continue
        t0 = time.perf_counter()
        rc = main(argv)
        if rc != 0:
            raise SystemExit(f"row {row!r}: calibrate exited {rc}")
        rows[row] = {"signals": list(signals), **_figures(d), "seconds": time.perf_counter() - t0}
        print(f"{row}: {json.dumps(rows[row])}", file=sys.stderr)
        OUT.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(_record(name, run_dir, cal_args, rows, provenance()), indent=1))
    out.write_text(json.dumps(_record(name, run_dir, cal_args, rows, provenance()), indent=1))
    return out


def _record(name: str, run_dir: Path, cal_args: list[str], rows: dict[str, Any], prov: Any) -> dict[str, Any]:
    return {
        "name": name,
        "command": "python benchmarks/verdict_ablation.py run "
        + " ".join([name, str(run_dir), "--", *cal_args]),
        "provenance": prov,
        "trace_run": str(run_dir / "profile"),
        "note": "each row: mnemoscope calibrate on the run's stored traces with --verdict-signals = the row's "
        "signals (the verdict keeps what adds on held-out folds of the calibration part); figures from the "
        "row's validation.json (held-out third, split by fact)",
        "rows": rows,
    }


def _f(v: Any, nd: int = 3) -> str:
    return "n/a" if v is None else f"{v:.{nd}f}"


def table() -> str:
    lines = [
        "| model | signals offered | kept | held-out AUC [95% CI] | recall at alpha | 3-way (clear) | false flags | followed conflicts flagged |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in sorted(OUT.glob("*.json")):
        rec = json.loads(p.read_text())
        for row, r in rec["rows"].items():
            ci = r.get("auc_ci") or [None, None]
            conf = (r.get("false_flags_by_kind") or {}).get("conflict") or {}
            lines.append(
                f"| {rec['name']} | {row} | {', '.join(r.get('selected') or [])} | {_f(r.get('auc'))} "
                f"[{_f(ci[0])}, {_f(ci[1])}] | {_f(r.get('memory_recall'), 2)} | "
                f"{_f(r.get('accuracy_3way_clear'), 2)} | {r.get('false_flags')}/{r.get('n_context')} | "
                f"{conf.get('flagged', 'n/a')}/{conf.get('n', 'n/a')} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "table":
        print(table())
    elif len(sys.argv) >= 4 and sys.argv[1] == "run":
        rest = sys.argv[4:]
        if rest and rest[0] == "--":
            rest = rest[1:]
        print(run(sys.argv[2], Path(sys.argv[3]), rest))
    else:
        raise SystemExit(__doc__)
