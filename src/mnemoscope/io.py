"""Small I/O helpers every layer shares: atomic file writes, canonical JSON and text digests.

>>> canonical_json({"b": 1, "a": [1.5, "é"]})
b'{"a":[1.5,"\\xc3\\xa9"],"b":1}'
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["atomic_savez", "atomic_write", "atomic_write_json", "canonical_json", "text_sha256"]


def canonical_json(obj: Any) -> bytes:
    """Sorted keys, no whitespace, UTF-8: equal data always gives equal bytes (for hashing and comparing)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()


def text_sha256(text: str) -> str:
    """``sha256:<hex>`` of ``text``'s UTF-8 bytes (a results row's ``context_sha256``).

    >>> text_sha256("")
    'sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'
    """
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def atomic_write(path: str | Path, data: str | bytes) -> Path:
    """Write ``data`` to ``path`` so that a crash leaves the old file or the new one, never a torn one.

    The bytes go to a temporary file in the same folder, are fsynced, and the temporary file
    is renamed over ``path`` (atomic on POSIX).
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with tmp.open("wb") as f:
        f.write(raw)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, p)
    return p


def atomic_write_json(path: str | Path, obj: Any, *, indent: int | None = 1, sort_keys: bool = True) -> Path:
    """:func:`atomic_write` of ``obj`` as JSON (objects that JSON cannot encode are written as ``str``)."""
    return atomic_write(path, json.dumps(obj, indent=indent, sort_keys=sort_keys, default=str))


def atomic_savez(path: str | Path, arrays: Mapping[str, np.ndarray]) -> Path:
    """:func:`atomic_write` of ``arrays`` as an uncompressed ``.npz`` (``np.load`` reads it back)."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    return atomic_write(path, buf.getvalue())
