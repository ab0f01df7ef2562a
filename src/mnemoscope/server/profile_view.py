"""The profile's card as the dashboard shows it (``GET /v1/profile``, the ``/profile`` page),
and the profile's reference sample for the drift watch (:func:`drift_reference`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mnemoscope.audit.profile import AuditProfile
from mnemoscope.audit.validation import HELD_OUT_FILE, read_held_out
from mnemoscope.errors import InputError
from mnemoscope.report.profile_card import NOT_MEASURED, profile_card, read_validation
from mnemoscope.stats.drift import MIN_PER_TEST, DriftReference

__all__ = ["NO_REFERENCE", "drift_reference", "profile_view"]

#: what every surface says when the profile holds no usable reference sample
NO_REFERENCE = "no reference sample in this profile: drift not watched"


def profile_view(profile: AuditProfile, *, rule: str, drift: dict[str, Any] | None = None) -> dict[str, Any]:
    """``{"rule", "path", "hash", "card"}``: ``card`` is the one ``mnemoscope profile show``
    prints (:func:`mnemoscope.report.profile_card.profile_card`), with the held-out validation
    recorded next to the profile (``validation.json``) when there is one, and, when the service
    watches drift, its state as the card's ``drift`` section (``drift``: the service's
    :meth:`mnemoscope.server.metrics.DriftWatch.status`).

    A ``validation.json`` that cannot be read does not hide the rest of the card: its
    validation section says "not measured" and why.
    """
    try:
        validation = read_validation(profile)
    except InputError as e:
        validation = {"status": NOT_MEASURED, "reason": str(e)}
    card = profile_card(profile, validation)
    if drift is not None:
        card = {**card, "drift": drift}
    return {"rule": rule, "path": str(profile.path), "hash": profile.content_hash, "card": card}


def drift_reference(profile: AuditProfile) -> DriftReference:
    """The profile's calibration answers the live ones are compared with: the held-out rows
    ``mnemoscope calibrate`` writes next to ``profile.json`` (``held_out.jsonl``: each held-out
    answer audited with the finished profile, never fitted on; the shipped default profile is a
    calibrate output and carries its own), their p_memory, memory flag
    and the values of the signals the profile's verdict combines.

    The rows are used only when ``validation.json`` records this profile's hash (the two files
    are written together; rows of another calibration would compare the live answers with the
    wrong sample).

    Raises:
        InputError: no usable sample (the message starts with :data:`NO_REFERENCE` and says why).
    """
    folder = Path(str(profile.path))
    if folder.name == "profile.json":
        folder = folder.parent
    if not (folder / HELD_OUT_FILE).is_file():
        raise InputError(
            f"{NO_REFERENCE} (no {HELD_OUT_FILE} next to profile.json in {folder})", field="held_out"
        )
    if profile.validation is None:
        raise InputError(
            f"{NO_REFERENCE} ({folder / HELD_OUT_FILE} is not tied to this profile: no validation.json "
            f"recording its hash {profile.content_hash[:16]})",
            field="held_out",
        )
    rows = read_held_out(folder)
    signals = list(profile.verdict.selected_) if profile.verdict is not None else []
    ref = DriftReference.from_records(rows, signals, source=str(folder / HELD_OUT_FILE))
    if ref.n < MIN_PER_TEST:
        raise InputError(
            f"{NO_REFERENCE} ({folder / HELD_OUT_FILE}: {ref.n} answers with a p_memory and a memory flag, "
            f"{MIN_PER_TEST} needed)",
            field="held_out",
        )
    return ref
