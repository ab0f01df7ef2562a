"""The profile's card as the dashboard shows it (``GET /v1/profile``, the ``/profile`` page)."""

from __future__ import annotations

from typing import Any

from mnemoscope.pipelines.profile import AuditProfile

__all__ = ["profile_view"]


def profile_view(profile: AuditProfile, *, rule: str) -> dict[str, Any]:
    """``{"rule", "path", "hash", "card"}``; ``card`` is :func:`mnemoscope.report.profile_card.profile_card`."""
    from mnemoscope.report.profile_card import profile_card

    return {
        "rule": rule,
        "path": str(profile.path),
        "hash": profile.content_hash,
        "card": profile_card(profile),
    }
