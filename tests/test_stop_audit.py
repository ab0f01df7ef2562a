"""Stop sequences end to end: a template-less profile records them, the audit cuts there and says so."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from server_helpers import tiny_records
from test_stop import ascii_answers


@pytest.fixture(scope="module")
def stop_profile(lm, tmp_path_factory):  # type: ignore[no-untyped-def]
    from mnemoscope.audit.calibrate import calibrate_profile
    from mnemoscope.audit.profile import CalibrationConfig

    out = tmp_path_factory.mktemp("stop-profile")
    with ascii_answers(lm):
        prof = calibrate_profile(
            lm,
            tiny_records(),
            out,
            CalibrationConfig(max_new_tokens=8, chat=False, stop=("\n",), labels="given"),
            progress=False,
        )
    return prof


def test_template_less_profile_records_the_layout_default_stops() -> None:
    from mnemoscope.audit.profile import CalibrationConfig
    from mnemoscope.trace.templates import DEFAULT_STOPS, default_stops

    assert CalibrationConfig().stop is None  # None = the layout's default
    assert default_stops(chat=False) == DEFAULT_STOPS


def test_audit_cuts_at_the_profiles_stop_and_says_where(lm, stop_profile) -> None:  # type: ignore[no-untyped-def]
    from mnemoscope.audit.auditor import Auditor, AuditRequest
    from mnemoscope.cli.render import render_audit

    assert stop_profile.stop == ("\n",) and stop_profile.builder.stop == ("\n",)
    auditor = Auditor(lm, stop_profile)
    reqs = [
        AuditRequest(f"The town of Zor{i} lies on the river Ka{i}.", f"Where is Zor{i}?") for i in range(8)
    ]
    with ascii_answers(lm):
        results = auditor.audit(reqs)
    cut = 0
    for r in results:
        d = r.to_dict()  # type: ignore[union-attr]
        assert "answer_cut" in d  # stop sequences in effect: always said, null when not cut
        c = d["answer_cut"]
        if c is None:
            assert "\n" not in d["answer"].lstrip() or d["n_steps"] == 8
            continue
        cut += 1
        assert c["stop"] == "\n" and d["n_steps"] == c["token"] == len(d["tokens"])
        assert "\n" not in d["answer"].lstrip()
        assert d["repcs"]["n_steps"] == c["token"]  # RePCS scored the cut answer only
        assert any("stop sequence" in n for n in d["notes"])
        assert "Answer cut:" in render_audit(d, colour=False)
    assert cut >= 1, [r.answer for r in results]  # type: ignore[union-attr]


def test_an_audit_asking_for_other_stops_is_refused(lm, stop_profile) -> None:  # type: ignore[no-untyped-def]
    from mnemoscope.audit.auditor import Auditor
    from mnemoscope.audit.profile import ProfileError

    with pytest.raises(ProfileError, match="stop"):
        Auditor(lm, stop_profile, layout={"stop": ["\n\n"]})
    Auditor(lm, stop_profile, layout={"stop": ["\n"]})  # the same: accepted


def test_serve_refuses_stops_other_than_the_profiles(lm, stop_profile, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    """``serve --stop`` checks the profile's stop sequences before the server starts."""
    import uvicorn

    import mnemoscope.server.app as app_mod
    from mnemoscope.audit.auditor import Auditor
    from mnemoscope.cli.main import main

    monkeypatch.setattr(app_mod, "load_engine", lambda settings: Auditor(lm, stop_profile))
    started = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: started.append(a))
    base = ["serve", "--profile", str(stop_profile.path), "--allow-anonymous", "--db", ":memory:"]
    assert main([*base, "--stop", "\\n\\n"]) != 0 and not started
    assert "stop" in capsys.readouterr().err
    assert main([*base, "--stop", "\\n"]) == 0 and len(started) == 1
