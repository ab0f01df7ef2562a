"""The profile's card as the dashboard shows it (``GET /v1/profile``, the ``/profile`` page)."""

from __future__ import annotations

from typing import Any

from mnemoscope.pipelines.profile import AuditProfile

__all__ = ["NOT_MEASURED", "header_card", "profile_view"]

NOT_MEASURED = "not measured"


def profile_view(profile: AuditProfile, *, rule: str) -> dict[str, Any]:
    """``{"rule", "path", "hash", "card"}``.

    ``card`` is :func:`mnemoscope.report.profile_card.profile_card` (the card ``mnemoscope
    profile show`` prints) when that module is installed, else :func:`header_card`.
    """
    try:
        from mnemoscope.report.profile_card import profile_card
    except ImportError:
        card = header_card(profile)
    else:
        card = profile_card(profile)
    return {"rule": rule, "path": str(profile.path), "hash": profile.content_hash, "card": card}


def header_card(profile: AuditProfile) -> dict[str, Any]:
    """The card from the profile's header alone: what it records, and "not measured" for the
    validation a profile without held-out results cannot show."""
    h = profile.header
    model = h.get("model") or {}
    data = h.get("data") or {}
    v = h.get("verdict") or {}
    params = v.get("params") or {}
    validation = h.get("validation") or {}
    return {
        "model": {k: model.get(k) for k in ("name", "architecture", "n_layers", "fingerprint", "adapter")},
        "calibration_data": {
            "sha256": data.get("sha256"),
            "n_records": data.get("n_records"),
            "n_context": data.get("n_clean"),
            "n_memory": data.get("n_memory"),
            "n_errors": data.get("n_errors"),
            "created": h.get("created"),
        },
        "guarantee": {
            "alpha": params.get("alpha", (h.get("config") or {}).get("verdict_alpha")),
            "n_calibration": v.get("n_conformal", NOT_MEASURED),
            "certified": v.get("certified", NOT_MEASURED),
            "threshold": v.get("threshold", NOT_MEASURED),
            "min_n_for_alpha": v.get("min_n_for_alpha", NOT_MEASURED),
            "signals": v.get("selected", NOT_MEASURED),
        },
        "validation": {
            k: validation.get(k, NOT_MEASURED)
            for k in ("heldout_auc", "false_flag_rate", "memory_recall", "confusion")
        },
    }
