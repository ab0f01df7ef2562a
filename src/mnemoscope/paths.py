"""Where mnemoscope keeps its cache.

Resolution order: explicit argument (CLI ``--cache-dir``) > ``MNEMOSCOPE_CACHE_DIR`` >
``$XDG_CACHE_HOME/mnemoscope`` > ``~/.cache/mnemoscope``.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CACHE_ENV", "cache_dir"]

CACHE_ENV = "MNEMOSCOPE_CACHE_DIR"


def cache_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """Return the cache folder (not created)."""
    if override:
        return Path(override).expanduser()
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "mnemoscope"
