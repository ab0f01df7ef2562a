"""The README's measured table is tied to committed result files (issue 24).

``benchmarks/results_manifest.py`` registers, for every row of the README's table "What each
method tells you, measured", where each number sits in the result file the row cites;
:func:`check_readme` compares them at the number's own rounding. These tests run it on the real
README and show that a drifted number, an unregistered number or a wrong citation fails.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def manifest():
    spec = importlib.util.spec_from_file_location(
        "results_manifest", ROOT / "benchmarks" / "results_manifest.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def readme() -> str:
    return (ROOT / "README.md").read_text(encoding="utf-8")


def test_every_readme_number_matches_its_result_file(manifest, readme):
    assert manifest.check_readme(readme) == []
    rows = manifest.readme_rows(readme)
    assert len(rows) == len(manifest.README_NUMBERS) >= 8
    assert sum(len(n) for _, n, _ in rows) == 94  # every number of the table is registered, not a sample


def test_a_drifted_number_fails(manifest, readme):
    drifted = readme.replace("AUC 0.922 [0.882, 0.958]", "AUC 0.923 [0.882, 0.958]", 1)
    assert drifted != readme
    problems = manifest.check_readme(drifted)
    assert any("0.923" in p and "RePCS" in p for p in problems), problems


def test_a_changed_result_file_fails(manifest, readme, tmp_path):
    import json
    import shutil

    results = tmp_path / "results"
    shutil.copytree(manifest.RESULTS, results, ignore=shutil.ignore_patterns("*.jsonl", "*.png", "cache"))
    path = results / "calibration" / "smollm2-135m-instruct-grounded-t128" / "card.json"
    data = json.loads(path.read_text())
    data["validation"]["auc"]["estimate"] = 0.9641
    path.write_text(json.dumps(data))
    problems = manifest.check_readme(readme, results)
    assert problems == [
        "row 'the verdict (`audit`: p_memory, token spans)': README says 0.994, "
        "calibration/smollm2-135m-instruct-grounded-t128/card.json validation.auc.estimate = 0.9641"
    ]


def test_an_unregistered_number_or_citation_fails(manifest, readme):
    extra = readme.replace("same items: 0.956", "same items (0.5 s each): 0.956", 1)
    assert any("README shows" in p and "'0.5'" in p for p in manifest.check_readme(extra))
    card = "calibration/smollm2-135m-instruct-grounded-t128/card.json"
    uncited = readme.replace(f"| `{card}` |", "| `reliance/leaderboard.json` |", 1)
    problems = manifest.check_readme(uncited)
    assert any(f"comes from {card}, which the row does not cite" in p for p in problems), problems


def test_numbers_are_read_as_printed(manifest):
    text = "Min-K%++ 0.866 [0.824, 0.904]; L3 0.950; p999 run, 95 % CI, 10 epochs, 5-fold"
    assert [m.group(0) for m in manifest._NUMBER.finditer(text)] == [
        "0.866",
        "0.824",
        "0.904",
        "0.950",
        "10",
        "5",
    ]
    assert manifest.shown_as(0.9224, "0.922") and not manifest.shown_as(0.9226, "0.922")
    assert manifest.shown_as(312, "312") and not manifest.shown_as(True, "1")
    rows = [{"method": "loss", "sibling": "a", "v": 1}, {"method": "loss", "sibling": "b", "v": [2, 3]}]
    assert manifest.locate({"x": rows}, "x[method=loss,sibling=b].v[1]") == 3
    with pytest.raises(KeyError):
        manifest.locate({"x": rows}, "x[method=loss].v")


def test_results_manifest_check_finds_no_readme_problem():
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "results_manifest.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    # (a result file missing from MANIFEST.md also fails --check: rerun results_manifest.py to list it)
    assert not re.search(r"^README:", out.stderr, re.M), out.stderr
    assert out.returncode == 0 or "not in MANIFEST.md" in out.stderr, out.stderr


def _broken_links() -> list[str]:
    bad = []
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for page in pages:
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^(https?:|mailto:|#)", target):
                continue
            if not (page.parent / target.split("#", 1)[0]).resolve().exists():
                bad.append(f"{page.relative_to(ROOT).as_posix()}: {target}")
    return bad


def test_readme_and_docs_links_resolve():
    """Relative links (README and docs/) point at files that exist in the checkout and the sdist."""
    bad = _broken_links()
    assert not bad, "broken relative links:\n" + "\n".join(bad)
