"""Exception types. Every error a user can cause is a :class:`MnemoscopeError`
whose message is one clear line; the CLI prints it without a traceback."""

from __future__ import annotations

__all__ = [
    "InputError",
    "InputTooLongError",
    "MnemoscopeError",
    "ModelLoadError",
    "ModelMismatchError",
    "TraceStoreError",
]


class MnemoscopeError(Exception):
    """Base class of all errors mnemoscope raises on purpose."""


class ModelLoadError(MnemoscopeError):
    """A model spec could not be resolved or loaded."""


class InputError(MnemoscopeError):
    """A record or argument is invalid.

    Attributes:
        record: the record id or line number the error is about (if any).
        field: the offending field (if any).
    """

    def __init__(self, message: str, *, record: str | int | None = None, field: str | None = None):
        self.record = record
        self.field = field
        where = []
        if record is not None:
            where.append(f"record {record}")
        if field is not None:
            where.append(f"field '{field}'")
        prefix = (", ".join(where) + ": ") if where else ""
        super().__init__(prefix + message)
        self.reason = message


class InputTooLongError(InputError):
    """A text is longer than a limit (the model's window or a configured cap): HTTP 413."""


class TraceStoreError(MnemoscopeError):
    """A trace folder is missing, corrupt or was written with other settings."""


class ModelMismatchError(InputError):
    """A fitted artefact (profile, calibration, CRM or RADAR artefact, trace folder) was used with
    another model than the one it was fitted on. Raised only by
    :func:`mnemoscope.models.check_same_model`."""
