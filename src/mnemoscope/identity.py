"""The one model-identity check, shared by every artefact that was fitted on a model.

It compares identity records (a :class:`~mnemoscope.models.ModelInfo` or its ``to_dict()``), never
a loaded model, so detectors and pipelines can call it without importing ``models/``.
"""

from __future__ import annotations

from typing import Any

from mnemoscope.errors import ModelMismatchError

__all__ = ["check_same_model"]


def _identity(info: Any) -> dict[str, Any]:
    return info.to_dict() if hasattr(info, "to_dict") else dict(info or {})


def check_same_model(fitted_on: Any, model: Any, *, what: str, remedy: str) -> None:
    """The one model-identity check: raise unless ``model`` is the model ``what`` was fitted on.

    Args:
        fitted_on, model: a :class:`ModelInfo` or its dict (``to_dict()``); compared by ``fingerprint``.
        what: the artefact, for the message ("the profile runs/p", "this CRM artefact", ...).
        remedy: what the user should do instead (one clause).

    Raises:
        ModelMismatchError: the fingerprints differ (or the artefact records none).

    >>> check_same_model({"name": "a", "fingerprint": "f1"}, {"name": "a", "fingerprint": "f1"}, what="x", remedy="y")
    >>> check_same_model({"name": "a", "fingerprint": "f1"}, {"name": "b", "fingerprint": "f2"}, what="x", remedy="refit")
    Traceback (most recent call last):
    ...
    mnemoscope.errors.ModelMismatchError: x was fitted on a (fingerprint f1), but the model is b (fingerprint f2); refit
    """
    a, b = _identity(fitted_on), _identity(model)
    if a.get("fingerprint") is None or a.get("fingerprint") != b.get("fingerprint"):
        raise ModelMismatchError(
            f"{what} was fitted on {a.get('name')} (fingerprint {str(a.get('fingerprint'))[:16]}), "
            f"but the model is {b.get('name')} (fingerprint {str(b.get('fingerprint'))[:16]}); {remedy}"
        )
