"""The profile's validation card and the batch report (issue 28)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mnemoscope.cli.main import main
from mnemoscope.cli.profile_cmd import shipped_default_profile
from mnemoscope.errors import InputError
from mnemoscope.pipelines.profile import load_profile
from mnemoscope.report.profile_card import NOT_MEASURED, profile_card, read_validation, render_text

# -- the profile card -------------------------------------------------------------------------------


def test_card_of_the_shipped_profile_shows_its_held_out_validation():
    prof = load_profile(shipped_default_profile())
    val = read_validation(prof)
    assert val is not None and val["profile_hash"] == prof.content_hash
    card = profile_card(prof, val)
    assert card["model"]["name"] == prof.header["model"]["name"]
    assert card["data"]["n_context"] == prof.header["data"]["n_clean"]
    assert card["data"]["n_memory"] == prof.header["data"]["n_memory"]
    assert card["verdict"]["certified"] is prof.verdict.certified_
    assert card["verdict"]["n_calibration"] == prof.verdict.n_conformal_
    # the held-out figures are the committed evaluation's, copied not recomputed
    ev = json.loads((Path(__file__).parents[1] / "benchmarks/results/verdict/eval.json").read_text())[
        "B_held_out"
    ]
    v = card["validation"]
    assert v["status"] == "measured"
    assert v["auc"]["estimate"] == ev["auc"]["p_memory"]["auc"]
    assert [v["auc"]["ci_low"], v["auc"]["ci_high"]] == ev["auc"]["p_memory"]["ci"]
    assert v["false_flag_rate"] == ev["combined_rule"]["false_flag_rate"]
    assert v["memory_recall"] == ev["combined_rule"]["memory_recall"]
    assert sum(v["confusion"]["memory"].values()) == ev["n_memory"]
    assert sum(v["confusion"]["context"].values()) == ev["n_context"]
    text = render_text(card)
    assert f"{ev['auc']['p_memory']['auc']:.3f}" in text and "confusion" in text


def test_card_without_validation_says_not_measured(tmp_path):
    src = shipped_default_profile()
    dst = tmp_path / "prof"
    shutil.copytree(src, dst)
    (dst / "validation.json").unlink()
    prof = load_profile(dst)
    assert read_validation(prof) is None
    card = profile_card(prof)
    v = card["validation"]
    assert v["status"] == NOT_MEASURED and "validation.json" in v["reason"]
    assert all(v[k] == NOT_MEASURED for k in ("auc", "false_flag_rate", "memory_recall", "confusion"))
    assert card["verdict"]["alpha"] == prof.verdict.alpha  # what the profile itself records is shown
    assert "not measured" in render_text(card)


def test_validation_of_another_profile_is_not_used(tmp_path):
    dst = tmp_path / "prof"
    shutil.copytree(shipped_default_profile(), dst)
    v = json.loads((dst / "validation.json").read_text())
    v["profile_hash"] = "0" * 64
    (dst / "validation.json").write_text(json.dumps(v))
    card = profile_card(load_profile(dst), read_validation(load_profile(dst)))
    assert card["validation"]["status"] == NOT_MEASURED
    assert "another profile" in card["validation"]["reason"]


def test_broken_validation_file_names_the_file(tmp_path):
    dst = tmp_path / "prof"
    shutil.copytree(shipped_default_profile(), dst)
    (dst / "validation.json").write_text("{not json")
    with pytest.raises(InputError, match=r"validation\.json"):
        read_validation(load_profile(dst))


def test_profile_show_cli(capsys, tmp_path):
    assert main(["profile", "show", "default"]) == 0
    out = capsys.readouterr().out
    assert "held-out validation" in out and "certified at alpha=0.05" in out
    assert main(["profile", "show", "default", "--json"]) == 0
    card = json.loads(capsys.readouterr().out)
    assert card["format"] == "mnemoscope-profile-card/1"
    assert main(["profile", "show", str(tmp_path)]) == 1
    assert "profile.json missing" in capsys.readouterr().err


def test_committed_validation_is_up_to_date():
    import subprocess
    import sys

    root = Path(__file__).parents[1]
    out = subprocess.run(
        [sys.executable, str(root / "benchmarks/profile_validation.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
