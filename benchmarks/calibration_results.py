"""Commit a ``mnemoscope calibrate`` run's validation card under ``benchmarks/results/calibration/<name>/``.

Usage:
    python benchmarks/calibration_results.py record NAME RUN_DIR   # RUN_DIR/profile + run_*.json
    python benchmarks/calibration_results.py table                 # the docs/calibrate.md rows
    python benchmarks/calibration_results.py revalidate            # re-decide every card from its rows

``record`` copies what the run measured (nothing is re-measured): the profile's
``validation.json`` (the card, computed by ``mnemoscope calibrate`` from ``held_out.jsonl``), its
``held_out.jsonl`` (the held-out audits the card is computed from; small, so a reader can
recompute it), the profile's own summary (model, layout, labels, split, verdict certification),
the card as text, and the run record written by the wrapper that timed the command (command,
wall seconds, load average and python jobs at start and end, git commit; and, when the first run
of the command traced every record but failed before its card, that run's record as
``trace_run``: the resumed run fits on its traces). Traces stay in RUN_DIR.

``revalidate`` recomputes each committed card's held-out figures from its own ``held_out.jsonl``
under the current source decision (``mnemoscope.audit.validation.validation_from_rows``: the
three-way source is re-decided, p_memory and the memory flag are the stored ones, so AUC, false
flags and recall cannot change) and records which figures changed, with the command and commit,
under ``revalidated`` in the card. Nothing is re-measured on a model.

``table`` prints one Markdown row per recorded model (targets: held-out AUC >= 0.95, false-flag
rate within sampling of alpha, memory recall >= 0.85, three-way source right >= 0.85).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "calibration"


def record(name: str, run_dir: Path) -> Path:
    from mnemoscope.audit.profile import load_profile
    from mnemoscope.audit.validation import profile_status
    from mnemoscope.provenance import provenance
    from mnemoscope.report.profile_card import profile_card, render_text

    prof_dir = run_dir / "profile"
    prof = load_profile(prof_dir, backend=None)
    out = RESULTS / name
    out.mkdir(parents=True, exist_ok=True)
    run: dict[str, Any] = {}
    for part in ("run_start.json", "run_end.json"):
        p = run_dir / part
        if p.is_file():
            run.update(json.loads(p.read_text()))
    if (run_dir / "command.txt").is_file():
        run["command"] = (run_dir / "command.txt").read_text().strip()
    # an earlier run of the same command that traced every record and then failed (its traces are
    # what the resumed run above fitted on): its wall time is the tracing time
    first: dict[str, Any] = {}
    for part in ("trace_run_run_start.json", "trace_run_run_end.json"):
        p = run_dir / part
        if p.is_file():
            first.update(json.loads(p.read_text()))
    if first:
        if (run_dir / "trace_run_command.txt").is_file():
            first["command"] = (run_dir / "trace_run_command.txt").read_text().strip()
        err = run_dir / "trace_run_stderr.txt"
        if err.is_file():
            first["error"] = err.read_text().strip().splitlines()[-1][:500]
        run["trace_run"] = first
        run["wall_seconds_total"] = float(first.get("wall_seconds") or 0) + float(
            run.get("wall_seconds") or 0
        )
    h = prof.header
    v = h.get("verdict") or {}
    summary = {
        "model": h.get("model"),
        "backend": prof.backend,
        "profile_hash": prof.content_hash,
        "layout": prof.layout,
        "labels": h.get("labels"),
        "split": {k: x for k, x in (h.get("split") or {}).items() if k != "held_out_ids"},
        "data": h.get("data"),
        "verdict": {
            k: v.get(k)
            for k in ("selected", "certified", "n_conformal", "min_n_for_alpha", "threshold", "n_fit")
        },
        "status": profile_status(prof),
    }
    card = {
        **provenance(),
        "note": "copied from the profile written by the command in run.command (no re-measurement)",
        "run": run,
        "profile": summary,
        "validation": prof.validation,
    }
    (out / "card.json").write_text(json.dumps(card, indent=1, default=str) + "\n")
    text = render_text(profile_card(prof, prof.validation))
    (out / "card.txt").write_text(text + "\n")
    if (prof_dir / "held_out.jsonl").is_file():
        shutil.copyfile(prof_dir / "held_out.jsonl", out / "held_out.jsonl")
    return out


def _row(name: str, card: dict[str, Any]) -> str:
    v = card.get("validation") or {}
    run = card.get("run") or {}
    p = card.get("profile") or {}
    auc = v.get("auc") if isinstance(v.get("auc"), dict) else None
    lab = (p.get("labels") or {}).get("n_per_class") or {}
    held = v.get("held_out") or {}
    ci = v.get("false_flag_ci") or [None, None]

    def f(x: Any, d: int = 3) -> str:
        return "n/a" if not isinstance(x, (int, float)) else f"{x:.{d}f}"

    auc_s = "not measured" if auc is None else f"{f(auc['estimate'])} [{f(auc['ci'][0])}, {f(auc['ci'][1])}]"
    acc = v.get("accuracy_3way")
    return (
        f"| {name} | {(p.get('model') or {}).get('name')} | {lab.get('memory')} / {lab.get('context')} | "
        f"{held.get('n_memory')} / {held.get('n_context')} | {auc_s} | "
        f"{f(v.get('false_flag_rate'))} [{f(ci[0])}, {f(ci[1])}] vs {v.get('alpha')} | "
        f"{f(v.get('memory_recall'), 2)} | {f(acc, 2)} | "
        f"{'yes' if (p.get('verdict') or {}).get('certified') else 'no'} ({(p.get('verdict') or {}).get('n_conformal')}) | "
        f"{f(run.get('wall_seconds_total', run.get('wall_seconds')), 0)} s | {f(v.get('audit_seconds'), 1)} s | "
        f"{(p.get('status') or {}).get('status')} |"
    )


def table() -> str:
    head = (
        "| profile | model | verified memory / context | held-out memory / context | held-out AUC [95% CI] | "
        "false-flag rate [95% CI] vs alpha | memory recall | 3-way right | certified (n clean) | "
        "calibrate wall | audit / answer | status |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    rows = [_row(p.parent.name, json.loads(p.read_text())) for p in sorted(RESULTS.glob("*/card.json"))]
    return "\n".join([head, *rows])


def revalidate() -> list[str]:
    """Re-decide every committed card from its held-out rows (module doc); the changed cards' names."""
    from mnemoscope.audit.validation import read_held_out, validation_from_rows
    from mnemoscope.provenance import provenance

    changed = []
    for card_path in sorted(RESULTS.glob("*/card.json")):
        rows_path = card_path.parent / "held_out.jsonl"
        if not rows_path.is_file():
            continue
        card = json.loads(card_path.read_text())
        val = card["validation"]
        fresh = validation_from_rows(read_held_out(rows_path), alpha=val["alpha"])
        diff = {k: {"before": val[k], "after": fresh[k]} for k in fresh if k in val and fresh[k] != val[k]}
        if not diff:
            continue
        for k in diff:
            val[k] = fresh[k]
        prov = provenance()
        card.setdefault("revalidated", []).append(
            {
                "command": prov.get("command"),
                "git_commit": prov.get("git_commit"),
                "created": prov.get("created"),
                "why": "the source decision changed (the grounded verdict: a phrase no passage states is "
                "never context); p_memory and the memory flag are the stored ones",
                "changed": diff,
            }
        )
        card_path.write_text(json.dumps(card, indent=1, default=str) + "\n")
        changed.append(card_path.parent.name)
    return changed


def main(argv: list[str]) -> int:
    if argv[:1] == ["revalidate"]:
        for name in revalidate():
            print(name)
        return 0
    if argv[:1] == ["record"] and len(argv) == 3:
        print(record(argv[1], Path(argv[2])))
        return 0
    if argv[:1] == ["table"]:
        print(table())
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
