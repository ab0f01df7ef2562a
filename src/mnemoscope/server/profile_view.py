"""The profile's card as the dashboard shows it (``GET /v1/profile``, the ``/profile`` page)."""

from __future__ import annotations

from typing import Any

from mnemoscope.audit.profile import AuditProfile
from mnemoscope.errors import InputError
from mnemoscope.report.profile_card import NOT_MEASURED, profile_card, read_validation

__all__ = ["profile_view"]


def profile_view(profile: AuditProfile, *, rule: str) -> dict[str, Any]:
    """``{"rule", "path", "hash", "card"}``: ``card`` is the one ``mnemoscope profile show``
    prints (:func:`mnemoscope.report.profile_card.profile_card`), with the held-out validation
    recorded next to the profile (``validation.json``) when there is one.

    A ``validation.json`` that cannot be read does not hide the rest of the card: its
    validation section says "not measured" and why.
    """
    try:
        validation = read_validation(profile)
    except InputError as e:
        validation = {"status": NOT_MEASURED, "reason": str(e)}
    return {
        "rule": rule,
        "path": str(profile.path),
        "hash": profile.content_hash,
        "card": profile_card(profile, validation),
    }
