"""Small I/O helpers every layer shares: atomic file writes and canonical JSON.

>>> canonical_json({"b": 1, "a": [1.5, "é"]})
b'{"a":[1.5,"\\xc3\\xa9"],"b":1}'
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["atomic_write", "canonical_json"]


def canonical_json(obj: Any) -> bytes:
    """Sorted keys, no whitespace, UTF-8: equal data always gives equal bytes (for hashing and comparing)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()


def atomic_write(path: str | Path, data: str | bytes) -> Path:
    """Write ``data`` to ``path`` so that a crash leaves the old file or the new one, never a torn one.

    The bytes go to a temporary file in the same folder, are fsynced, and the temporary file
    is renamed over ``path`` (atomic on POSIX).
    """
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with tmp.open("wb") as f:
        f.write(raw)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, p)
    return p
