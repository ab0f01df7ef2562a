"""One calibration pipeline for every backend (issue 35).

* the black-box default gives the figures the calibration gave before the pipeline was unified
  (``tests/calibration_reference.json``: written by the previous code, ``calibrate_profile`` on
  the fixture below; regenerate it only for an intended change of the figures);
* the held-out part is scored from the stored traces, and those scores equal a live audit of the
  same records (a second generation); the card times live audits only when asked, else says the
  audit time was not measured;
* a default calibration never imports CRM (``mnemoscope.pipelines``);
* the in-process tracing goes through a replaceable engine (the seam of a Ray engine).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import tiny_lm, zor_records
from mnemoscope.audit.calibrate import calibrate_profile
from mnemoscope.audit.profile import CalibrationConfig, load_profile
from mnemoscope.audit.validation import read_held_out

REFERENCE = Path(__file__).with_name("calibration_reference.json")
CFG = CalibrationConfig(max_new_tokens=4, chat=False, labels="given")


@pytest.fixture(scope="module")
def default_profile(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    lm = tiny_lm(layers=3)
    out = tmp_path_factory.mktemp("pipeline") / "profile"
    calibrate_profile(lm, zor_records(60), out, CFG, progress=False)
    return lm, out


def test_the_default_gives_the_figures_it_gave_before(default_profile: tuple[Any, Path]) -> None:
    lm, out = default_profile
    ref = json.loads(REFERENCE.read_text())
    h = load_profile(out, model=lm.info).header
    assert {k: h["repcs"][k] for k in ("n", "T")} == {k: ref["repcs"][k] for k in ("n", "T")}
    assert h["repcs"]["tau"] == pytest.approx(ref["repcs"]["tau"], abs=1e-9)
    assert h["token_attribution"]["margin"] == pytest.approx(ref["token_margin"], abs=1e-9)
    assert h["verdict"] == ref["verdict"]  # read back from profile.json: exact float round trip
    assert {k: h["split"][k] for k in ref["split"]} == ref["split"]
    assert {k: h["data"][k] for k in ref["data"]} == ref["data"]
    rows = read_held_out(out)
    assert [r["id"] for r in rows] == [r["id"] for r in ref["held_out"]]
    for r, e in zip(rows, ref["held_out"], strict=True):
        assert (r["source"], r["answer"]) == (e["source"], e["answer"]), r["id"]
        assert r["p_memory"] == pytest.approx(e["p_memory"], abs=1e-9), r["id"]


def test_held_out_scores_from_stored_traces_equal_a_live_audit(default_profile: tuple[Any, Path]) -> None:
    """Every held-out row was scored from the calibration's trace (no second generation); auditing
    the same records again through the model gives the same answers and numbers."""
    from mnemoscope.audit.auditor import Auditor, AuditRequest

    lm, out = default_profile
    prof = load_profile(out, model=lm.info)
    rows = read_held_out(out)
    assert len(rows) == len(prof.header["split"]["held_out_ids"]) > 0
    by_id = {r.id: r for r in zor_records(60)}
    live = Auditor(lm, prof, batch_size=1).audit(
        [AuditRequest(by_id[r["id"]].context, by_id[r["id"]].query, id=r["id"]) for r in rows]
    )
    for r, res in zip(rows, live, strict=True):
        d = res.to_dict()  # type: ignore[union-attr]
        assert d["answer"] == r["answer"], r["id"]
        assert d["p_memory"] == pytest.approx(r["p_memory"], abs=1e-4), r["id"]
        assert d["memory_flag"] == r["memory_flag"], r["id"]
    # the default card does not pretend to have timed an audit
    card = prof.validation
    assert card is not None and card["audit_seconds"] is None and card["live_check"] is None
    assert card["audit_seconds_note"].startswith("not measured")


def test_a_timing_sample_times_live_audits_and_checks_them(tmp_path: Path) -> None:
    lm = tiny_lm(layers=2)
    prof = calibrate_profile(lm, zor_records(40), tmp_path / "p", CFG, progress=False, timing_sample=3)
    card = prof.validation
    assert card is not None and card["audit_seconds"] is not None and card["audit_seconds"] > 0
    live = card["live_check"]
    assert live["n"] == 3 and live["same_answer"] == 3 and live["max_abs_p_memory_diff"] < 1e-4


def test_the_in_process_tracing_goes_through_its_engine(tmp_path: Path) -> None:
    """The seam a Ray engine plugs into: every record reaches the engine, which is handed the
    records of each round and appends to the folder; a resumed run gets them again and traces
    none (the folder's done ids)."""
    from mnemoscope.audit.tracing import LocalEngine

    lm = tiny_lm(layers=2)

    class Counting:
        def __init__(self) -> None:
            self.inner = LocalEngine(lm, batch_size=8)
            self.traced: list[int] = []
            self.asked: list[int] = []

        def run(self, records: Any, folder: Path, config: Any, *, overwrite: bool, progress: bool) -> Any:
            assert config.hidden is False and config.answer_without  # black-box default + closed book
            s = self.inner.run(records, folder, config, overwrite=overwrite, progress=progress)
            self.asked.append(len(records))
            self.traced.append(s.n_traced)
            return s

    eng = Counting()
    prof = calibrate_profile(lm, zor_records(32), tmp_path / "p", CFG, progress=False, engine=eng)
    assert eng.asked == [32] and eng.traced == [32] and prof.header["data"]["n_traced"] == 32
    again = Counting()
    prof2 = calibrate_profile(lm, zor_records(32), tmp_path / "p", CFG, progress=False, engine=again)
    assert again.asked == [32] and again.traced == [0] and prof2.header["data"]["n_traces_reused"] == 32
    assert prof2.header["verdict"] == prof.header["verdict"]


def test_a_default_calibration_never_imports_crm(tmp_path: Path) -> None:
    """A default calibration in a fresh interpreter: no module of ``mnemoscope.pipelines`` is
    imported (CRM is plugged in by the command line only when asked)."""
    tests = Path(__file__).resolve().parent
    code = f"""
import sys
sys.path.insert(0, {str(tests)!r})
from helpers import tiny_lm, zor_records
from mnemoscope.audit.calibrate import calibrate_profile
from mnemoscope.audit.profile import CalibrationConfig
prof = calibrate_profile(tiny_lm(layers=2), zor_records(24), {str(tmp_path / "p")!r},
    CalibrationConfig(max_new_tokens=3, chat=False, labels="given"), progress=False)
assert prof.verdict is not None
print(sorted(m for m in sys.modules if m.startswith("mnemoscope.pipelines")))
"""
    src = Path(__file__).resolve().parents[1] / "src"
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(src)},
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip().splitlines()[-1] == "[]"
