"""Which command and which commit produced each committed result: benchmarks/results/MANIFEST.md.

For every result file under ``benchmarks/results/`` (JSON, JSONL, Markdown; caches excluded) the
manifest lists the commit that last changed it (``git log``), the command and commit recorded
inside it when the file carries a provenance record (``mnemoscope.provenance``; files written
before that record existed say so), and the script that regenerates it.

    python benchmarks/results_manifest.py            # rewrite MANIFEST.md
    python benchmarks/results_manifest.py --check    # exit 1 when a result file is missing from it,
                                                     # or a README number differs from its result file

The README's measured table ("What each method tells you, measured") names, on each row, the
result files its numbers come from; :data:`README_NUMBERS` says where in those files each number
sits. :func:`check_readme` reads the table and fails when a row's numbers (in order) are not the
registered ones, when a registered value no longer rounds to the number shown (at the number's own
decimals), or when a row cites no file or the wrong one. ``tests/test_readme_numbers.py`` runs it.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
OUT = RESULTS / "MANIFEST.md"

# path prefix (relative to benchmarks/results) -> the command that regenerates it
REGENERATE = [
    ("audit/", "python benchmarks/bench_audit.py --n 16 --threads 2"),
    ("crm/significance", "bash benchmarks/crm_siblings.sh (crm_significance.py)"),
    ("crm/signal", "bash benchmarks/crm_siblings.sh (crm_signal_probe.py)"),
    ("crm/diagnostics", "python benchmarks/crm_diagnostics.py"),
    ("crm/families", "bash benchmarks/crm_families.sh"),
    ("crm/", "bash benchmarks/crm_siblings.sh (crm_eval_siblings.py; crm_summary.py prints the docs tables)"),
    (
        "endpoint/cost",
        "OMP_NUM_THREADS=1 python benchmarks/bench_endpoint_cost.py --n-per-label 2 --server-threads 1",
    ),
    (
        "endpoint/qwen/",
        "mnemoscope calibrate --endpoint URL --chat-template qwen.gguf --max-records 48 (run.json)",
    ),
    ("endpoint/", "python benchmarks/endpoint_agreement.py"),
    (
        "drift/",
        "OMP_NUM_THREADS=1 python benchmarks/bench_drift.py --streams 100 --null-streams 100 --trials 500 "
        "(drift/data/: bench_drift.py --import-run PROFILE_DIR NAME)",
    ),
    ("integrations/", "python benchmarks/bench_integrations.py"),
    ("proxy/leak", "python benchmarks/bench_proxy.py leak --n 1000 (docs/proxy.md)"),
    (
        "proxy/load",
        "python benchmarks/bench_proxy.py load --clients 4 --n 24 --max-seconds 600 --threads 1 --profile DIR",
    ),
    (
        "proxy/",
        "python benchmarks/bench_proxy.py latency --n 30 --gap none --audit-server separate --threads 1 "
        "--profile DIR (docs/proxy.md)",
    ),
    ("leaderboard_memory", "python benchmarks/bench_leaderboard_memory.py --threads 1"),
    ("membership/", "bash benchmarks/build_siblings.sh (mnemoscope bench run --suite membership)"),
    (
        "membership_blind/",
        "mnemoscope bench run --suite membership --adapter runs/membership-weak "
        "--adapter runs/membership-positive --out benchmarks/results/membership_blind --threads 1",
    ),
    ("mixed/", "bash benchmarks/reliance_pipeline.sh (mnemoscope bench verify --suite mixed)"),
    ("radar/", "python benchmarks/bench_radar.py"),
    ("ray/calibrate_scaling", "nice -n 10 python benchmarks/bench_ray_calibrate.py --n 32 --batch-size 4"),
    ("ray/", "python benchmarks/bench_ray.py"),
    ("reliance/", "mnemoscope bench run --suite reliance --out benchmarks/results/reliance"),
    (
        "calibration/bench_calibrate",
        "OMP_NUM_THREADS=1 python benchmarks/bench_calibrate.py --n 32 --threads 1",
    ),
    (
        "calibration/data/",
        "OMP_NUM_THREADS=1 nice -n 5 python benchmarks/data/measure_calibration_set.py --engine generate (docs/data.md)",
    ),
    (
        "calibration/",
        "python benchmarks/calibration_results.py record NAME RUN_DIR (after mnemoscope calibrate)",
    ),
    ("report/", "python benchmarks/bench_report.py --seed-dir DIR --seed-input FILE (docs/report.md)"),
    ("repcs_overhead", "python benchmarks/bench_repcs.py"),
    ("repcs/", "mnemoscope repcs eval (docs/repcs.md)"),
    ("scar/positive_control", "python benchmarks/scar_positive_control.py --stage all"),
    ("scar/", "python benchmarks/bench_scar.py"),
    ("shift/", "mnemoscope bench run --suite shift --out benchmarks/results/shift --threads 1"),
    ("source/", "python benchmarks/source_eval.py run / report / cuts (benchmarks/results/source/README.md)"),
    ("server/log-scale", "python benchmarks/bench_log_scale.py --db DB_OR_URL --n 1000000 (docs/log.md)"),
    (
        "server/load-log",
        "python benchmarks/bench_load.py (docs/log.md; see benchmarks/results/server/README.md)",
    ),
    ("server/", "python benchmarks/bench_server.py"),
    ("trace.json", "python benchmarks/bench_trace.py"),
    (
        "verdict/ablation/",
        "python benchmarks/verdict_ablation.py run NAME RUN -- CALIBRATE_ARGS (its 'command')",
    ),
    (
        "verdict/cost",
        "OMP_NUM_THREADS=1 python benchmarks/bench_verdict_cost.py --tree before=WORKTREE-OF-4df9226 --tree after=. "
        "--tree after-old-profile=. --profile after-old-profile=OLD-SHIPPED-PROFILE --n 16 --rounds 3 --threads 1",
    ),
    (
        "verdict/regression/old-profile",
        "python benchmarks/verdict_regression.py --profile OLD-SHIPPED-PROFILE --compare "
        "benchmarks/results/verdict/regression/current.jsonl.gz (of 4df9226) --atol 1e-3 --no-part-b ...",
    ),
    (
        "verdict/regression",
        "python benchmarks/verdict_regression.py --out runs/verdict-regression/after.jsonl "
        "--compare runs/verdict-regression/before.jsonl --report benchmarks/results/verdict/regression/report.json",
    ),
    ("verdict/held_out_build", "OMP_NUM_THREADS=1 python benchmarks/default_profile_held_out.py"),
    ("verdict/", "bash benchmarks/reliance_pipeline.sh (build_default_profile.py, verdict_eval.py)"),
]


def _files() -> list[Path]:
    out = []
    for p in sorted(RESULTS.rglob("*")):
        rel = p.relative_to(RESULTS).as_posix()
        if not p.is_file() or "/cache/" in f"/{rel}" or p == OUT or "/cards/" in f"/{rel}":
            continue
        if p.suffix in (".json", ".jsonl", ".md"):
            out.append(p)
    return out


def _last_commit(p: Path) -> str:
    r = subprocess.run(
        ["git", "log", "-1", "--format=%h %ad", "--date=short", "--", str(p)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    return r.stdout.strip() or "(not committed yet)"


def _recorded(p: Path) -> tuple[str, str]:
    if p.suffix != ".json":
        return "-", "-"
    try:
        d = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError):
        return "-", "-"
    if not isinstance(d, dict):
        return "-", "-"
    prov = d.get("provenance") if isinstance(d.get("provenance"), dict) else d
    cmd = prov.get("command") or d.get("command")
    commit = prov.get("git_commit") or prov.get("git_head") or d.get("git_commit")
    return (f"`{cmd}`" if cmd else "not recorded (written before provenance records)"), (
        str(commit)[:10] if commit else "-"
    )


def _regenerate(rel: str) -> str:
    for prefix, cmd in REGENERATE:
        if rel.startswith(prefix):
            return cmd
    return "?"


def build() -> str:
    rows = [
        "# Committed results and where they came from",
        "",
        "Generated by `python benchmarks/results_manifest.py`. *Last changed in* is the commit that",
        "committed the file; *recorded command / commit* is what the file itself records (files",
        "written before mnemoscope stamped its results have only the commit that added them).",
        "SCAR's audit cards (`scar/cards/*/card.json`) come from `python benchmarks/bench_scar.py`.",
        "",
        "| file | last changed in | recorded command | recorded commit | regenerated by |",
        "|---|---|---|---|---|",
    ]
    for p in _files():
        rel = p.relative_to(RESULTS).as_posix()
        cmd, commit = _recorded(p)
        rows.append(f"| `{rel}` | {_last_commit(p)} | {cmd} | {commit} | {_regenerate(rel)} |")
    return "\n".join(rows) + "\n"


# -- the README's measured table -----------------------------------------------------------------

README = ROOT / "README.md"
README_TABLE = "## What each method tells you, measured"

# row label (the first cell, without markup) -> every number of the row, in reading order:
# (the number as printed, result file under benchmarks/results/, where the value sits in it).
# A location is dot-separated keys, [i] list indices, and [key=value,...] picks the one list item
# whose fields match (leaderboards are lists of {method, sibling, ...} rows).
_REL = "reliance/leaderboard.json"
# the shipped default profile's recorded calibration run (benchmarks/profile_validation.py SHIPPED_CARD)
_SHIPPED = "calibration/smollm2-135m-instruct-grounded-t128/card.json"
_REAL = "real/smollm2/summary.json"
_MEM = "membership/leaderboard.json"
_SHIFT = "shift/leaderboard.json"
_SCAR = "scar/positive_control/summary.json"
_RADAR = "radar/report.json"
_FAM = "crm/families/membership-positive/report.json"
# where a calibration card (benchmarks/results/calibration/<profile>/card.json) keeps the figures of
# a README "own calibration" row, in the row's order
_CARD_FIELDS = (
    "validation.auc.estimate",
    "validation.auc.ci[0]",
    "validation.auc.ci[1]",
    "validation.false_flag_rate",
    "validation.memory_recall",
    "validation.accuracy_3way_clear",
)


def _card(profile: str, *shown: str) -> list[tuple[str, str, str]]:
    """The registered numbers of one "own calibration" row: AUC, its CI, false-flag rate, memory
    recall and three-way accuracy, as the README shows them, from ``profile``'s card."""
    assert len(shown) == len(_CARD_FIELDS), shown
    return [(v, f"calibration/{profile}/card.json", f) for v, f in zip(shown, _CARD_FIELDS, strict=True)]


README_NUMBERS: dict[str, list[tuple[str, str, str]]] = {
    "RePCS (KL with vs without the context)": [
        ("247", _REL, "[method=repcs].n"),
        ("172", _REL, "[method=repcs].n_pos"),
        ("75", _REL, "[method=repcs].n_neg"),
        ("0.922", _REL, "[method=repcs].roc_auc"),
        ("0.882", _REL, "[method=repcs].roc_auc_ci[0]"),
        ("0.958", _REL, "[method=repcs].roc_auc_ci[1]"),
    ],
    "closed-book log-probability": [
        ("0.956", _REL, "[method=closed_book_logprob].roc_auc"),
        ("0.931", _REL, "[method=closed_book_logprob].roc_auc_ci[0]"),
        ("0.977", _REL, "[method=closed_book_logprob].roc_auc_ci[1]"),
    ],
    "the verdict (`audit`: p_memory, token spans)": [
        ("128", _SHIPPED, "profile.layout.max_new_tokens"),
        ("289", _SHIPPED, "validation.held_out.n"),
        ("0.994", _SHIPPED, "validation.auc.estimate"),
        ("0.988", _SHIPPED, "validation.auc.ci[0]"),
        ("0.998", _SHIPPED, "validation.auc.ci[1]"),
        ("0", _SHIPPED, "validation.false_flags"),
        ("152", _SHIPPED, "validation.held_out.n_context"),
        ("0.82", _SHIPPED, "validation.memory_recall"),
        ("0.79", _SHIPPED, "validation.accuracy_3way"),
        ("0.91", _SHIPPED, "validation.accuracy_3way_clear"),
        ("151", _SHIPPED, "profile.verdict.n_conformal"),
    ],
    "real passage + question": [
        ("16", _REAL, "sets.real.n"),
        ("0", _REAL, "sets.real.false_flags.k"),
        ("16", _REAL, "sets.real.false_flags.n"),
        ("13", _REAL, "sets.real.three_way.k"),
        ("16", _REAL, "sets.real.three_way.n"),
    ],
    "entity-swap conflicts (Longpre et al.)": [
        ("15", _REAL, "sets.conflicts.n"),
        ("0", _REAL, "sets.conflicts.false_flags.k"),
        ("15", _REAL, "sets.conflicts.false_flags.n"),
        ("12", _REAL, "sets.conflicts.three_way.k"),
        ("15", _REAL, "sets.conflicts.three_way.n"),
    ],
    "gold passage among 4": [
        ("20", _REAL, "sets.multi_passage.n"),
        ("16", _REAL, "sets.multi_passage.n_context"),
        ("4", _REAL, "sets.multi_passage.n_memory"),
        ("0", _REAL, "sets.multi_passage.false_flags.k"),
        ("16", _REAL, "sets.multi_passage.false_flags.n"),
        ("4", _REAL, "sets.multi_passage.memory_recall.k"),
        ("4", _REAL, "sets.multi_passage.memory_recall.n"),
        ("14", _REAL, "sets.multi_passage.three_way.k"),
        ("20", _REAL, "sets.multi_passage.three_way.n"),
        ("16", _REAL, "sets.multi_passage.passage_top1.k"),
        ("16", _REAL, "sets.multi_passage.passage_top1.n"),
    ],
    "the verdict, own calibration: SmolLM2-135M-Instruct (`--per-class 300`, the default)": _card(
        "smollm2-135m-instruct-pc300", "0.996", "0.991", "1.000", "0.018", "0.93", "0.91"
    ),
    "the verdict, own calibration: Gemma-3-270m (base model, `--per-class 300`)": _card(
        "gemma-3-270m-pc300", "0.998", "0.996", "1.000", "0.042", "0.99", "0.97"
    ),
    "the verdict, own calibration: Qwen2.5-Coder-0.5B-Instruct (`--per-class 300`)": _card(
        "qwen2.5-coder-0.5b-instruct-pc300", "1.000", "0.999", "1.000", "0.037", "1.00", "0.97"
    ),
    "the verdict, own calibration: Qwen2.5-Coder-0.5B-Instruct over llama-server (`--endpoint`, "
    "`--per-class 300`)": _card(
        "qwen2.5-coder-0.5b-instruct-llama-server-pc300", "1.000", "0.999", "1.000", "0.050", "1.00", "0.97"
    ),
    "likelihood attacks (loss, zlib, Min-K%(++), ref)": [
        ("1.000", _MEM, "[method=loss,sibling=membership-positive].roc_auc"),
        ("0.461", _MEM, "[method=loss,sibling=membership-weak].roc_auc"),
        ("0.540", _MEM, "[method=loss,sibling=membership-strong].roc_auc"),
        ("0.866", _SHIFT, "[method=min_k_pp_10].roc_auc"),
        ("0.824", _SHIFT, "[method=min_k_pp_10].roc_auc_ci[0]"),
        ("0.904", _SHIFT, "[method=min_k_pp_10].roc_auc_ci[1]"),
    ],
    "CRM (hidden-state displacement)": [
        ("1.000", _MEM, "[method=loss,sibling=membership-positive].roc_auc"),
        ("0.503", "crm/positive/report.json", "crm_lr.roc_auc"),
        ("0.436", "crm/positive/report.json", "crm_lr.roc_auc_ci[0]"),
        ("0.570", "crm/positive/report.json", "crm_lr.roc_auc_ci[1]"),
        ("0.617", _FAM, "crm_lr.roc_auc"),
        ("0.496", _FAM, "crm_l3_lr.roc_auc"),
        ("0.957", "crm/families/shift-base/report.json", "crm_lr.roc_auc"),
        ("0.935", "crm/families/shift-base/report.json", "crm_lr.roc_auc_ci[0]"),
        ("0.975", "crm/families/shift-base/report.json", "crm_lr.roc_auc_ci[1]"),
    ],
    "SCAR (spectral rupture across depth)": [
        ("10", _SCAR, "training.positive_tries[sibling=positive-e10].epochs"),
        ("0.993", _SCAR, "loss_attack.positive_vs_clean_same_prompts.auc"),
        ("0.002", _SCAR, "audits.p999:clean_s1-vs-clean.conditions.min_q.q_drift"),
    ],
    "RADAR (feature ensemble)": [
        ("0.938", _RADAR, "train30_test100.measured.roc_auc"),
        ("0.885", _RADAR, "train30_test100.measured.roc_auc_ci[0]"),
        ("0.978", _RADAR, "train30_test100.measured.roc_auc_ci[1]"),
        ("0.941", _RADAR, "cv_large.paper_length_matched.radar.estimate"),
        ("0.83", _RADAR, "cv_large.paper_full.prompt_length_only.estimate"),
    ],
    "blind baselines (text only, no model)": [
        ("1.000", _SHIFT, "[method=min_k_pp_10].blind_roc_auc"),
        ("1.000", _SHIFT, "[method=min_k_pp_10].blind_roc_auc_ci[0]"),
        ("1.000", _SHIFT, "[method=min_k_pp_10].blind_roc_auc_ci[1]"),
        ("0.553", "membership_blind/leaderboard.json", "[method=loss,sibling=membership-weak].blind_roc_auc"),
        (
            "0.486",
            "membership_blind/leaderboard.json",
            "[method=loss,sibling=membership-weak].blind_roc_auc_ci[0]",
        ),
        (
            "0.615",
            "membership_blind/leaderboard.json",
            "[method=loss,sibling=membership-weak].blind_roc_auc_ci[1]",
        ),
    ],
}

# a number: not part of a word (L3, Min-K%, p999) and not a percentage
_NUMBER = re.compile(r"(?<![\w.%+-])\d+(?:\.\d+)?(?![\w.%]|\.\d| %)")
_CODE = re.compile(r"`([^`]+)`")


def locate(data: Any, where: str) -> Any:
    """The value at ``where`` (see :data:`README_NUMBERS`) in parsed JSON; KeyError when absent."""
    for part in re.findall(r"\[[^\]]*\]|[^.\[\]]+", where):
        if part.startswith("[") and "=" in part:
            want = dict(kv.split("=", 1) for kv in part[1:-1].split(","))
            hits = [
                r for r in data if isinstance(r, dict) and all(str(r.get(k)) == v for k, v in want.items())
            ]
            if len(hits) != 1:
                raise KeyError(f"{part} matches {len(hits)} items")
            data = hits[0]
        elif part.startswith("["):
            data = data[int(part[1:-1])]
        else:
            if not isinstance(data, dict) or part not in data:
                raise KeyError(part)
            data = data[part]
    return data


def shown_as(value: Any, text: str) -> bool:
    """Does ``value`` print as ``text`` at ``text``'s own decimals (0.9224 -> "0.922", 312 -> "312")?"""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    decimals = len(text.split(".")[1]) if "." in text else 0
    return f"{value:.{decimals}f}" == text


def readme_rows(text: str) -> list[tuple[str, list[str], list[str]]]:
    """(label, numbers in reading order, cited files) of every row of the README's measured table."""
    if README_TABLE not in text:
        raise ValueError(f"README has no section {README_TABLE!r}")
    section = text.split(README_TABLE, 1)[1].split("\n## ", 1)[0]
    rows = []
    lines = section.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("|") or line.startswith("|---"):
            continue
        if i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            continue  # a table's header row
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        label = cells[0].replace("**", "")
        numbers = [m.group(0) for c in cells[1:-1] for m in _NUMBER.finditer(c)]
        files = _CODE.findall(cells[-1])
        rows.append((label, numbers, files))
    return rows


def check_readme(text: str, results: Path = RESULTS) -> list[str]:
    """Every problem between the README's measured table and the result files (empty: all agree)."""
    problems = []
    rows = readme_rows(text)
    seen = {label for label, _, _ in rows}
    for label in README_NUMBERS:
        if label not in seen:
            problems.append(f"README_NUMBERS row {label!r} is not in the README's table")
    cache: dict[str, Any] = {}
    for label, numbers, files in rows:
        spec = README_NUMBERS.get(label)
        if spec is None:
            problems.append(
                f"row {label!r}: not registered in README_NUMBERS (benchmarks/results_manifest.py)"
            )
            continue
        if numbers != [n for n, _, _ in spec]:
            problems.append(
                f"row {label!r}: the README shows {numbers}, registered {[n for n, _, _ in spec]}"
            )
        for shown, rel, where in spec:
            if rel not in files:
                problems.append(f"row {label!r}: {shown} comes from {rel}, which the row does not cite")
            if rel not in cache:
                try:
                    cache[rel] = json.loads((results / rel).read_text(encoding="utf-8"))
                except (OSError, json.JSONDecodeError) as e:
                    cache[rel] = e
            data = cache[rel]
            if isinstance(data, Exception):
                problems.append(f"row {label!r}: cannot read {rel}: {data}")
                continue
            try:
                value = locate(data, where)
            except (KeyError, IndexError, TypeError) as e:
                problems.append(f"row {label!r}: {rel} has no {where} ({e})")
                continue
            if not shown_as(value, shown):
                problems.append(f"row {label!r}: README says {shown}, {rel} {where} = {value!r}")
        for rel in files:
            if rel not in {r for _, r, _ in spec}:
                problems.append(f"row {label!r}: cites {rel} but no number of the row comes from it")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    if args.check:
        text = OUT.read_text() if OUT.exists() else ""
        missing = [p for p in _files() if f"`{p.relative_to(RESULTS).as_posix()}`" not in text]
        for p in missing:
            print(f"not in MANIFEST.md: {p.relative_to(ROOT)}", file=sys.stderr)
        problems = check_readme(README.read_text(encoding="utf-8"))
        for line in problems:
            print(f"README: {line}", file=sys.stderr)
        return 1 if missing or problems else 0
    OUT.write_text(build())
    print(f"-> {OUT.relative_to(ROOT)} ({len(_files())} files)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
