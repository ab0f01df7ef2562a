"""The screenshots of the docs (``docs/img/*.png``) and what they show.

The tests that take them (tests/test_server_browser.py, tests/test_report.py, real model) write,
next to each PNG, an entry of ``screenshots.json``: the hash of the profile the page was
showing and the signals its verdict combines. ``test_report.py::test_committed_screenshots_show_the_shipped_profile``
(no model, no browser) compares the committed entries with the shipped profile, so a screenshot
left from an older profile (a verdict combining ``crm_probability`` after the shipped profile
dropped it) fails the fast tests instead of going unnoticed until someone reads the docs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

DOCS_IMG = Path(__file__).resolve().parents[1] / "docs" / "img"
INDEX = "screenshots.json"
#: the screenshots that show a profile's verdict, and the test that writes each
PROFILE_SHOTS = {
    "dashboard.png": "tests/test_server_browser.py::test_screenshots_of_the_default_model",
    "profile.png": "tests/test_server_browser.py::test_screenshots_of_the_default_model",
    "report.png": "tests/test_report.py::test_report_of_a_real_batch_audit_in_chromium",
}


def screenshot_dir() -> Path:
    """``$MNEMOSCOPE_SCREENSHOT_DIR`` or docs/img (created)."""
    d = Path(os.environ.get("MNEMOSCOPE_SCREENSHOT_DIR") or DOCS_IMG)
    d.mkdir(parents=True, exist_ok=True)
    return d


def record_screenshot(png: Path, profile: Any) -> None:
    """Note in ``png``'s folder's screenshots.json which profile ``png`` shows (a loaded
    :class:`~mnemoscope.audit.profile.AuditProfile`)."""
    index = png.parent / INDEX
    entries = json.loads(index.read_text()) if index.is_file() else {}
    entries[png.name] = {
        "profile_hash": profile.content_hash,
        "verdict_signals": list(profile.verdict.selected_) if profile.verdict is not None else [],
        "written_by": PROFILE_SHOTS.get(png.name),
    }
    index.write_text(json.dumps(dict(sorted(entries.items())), indent=1) + "\n")
