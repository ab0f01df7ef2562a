"""Saving figures: the one place a figure becomes a file (and its memory is released)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["save_figure"]


def save_figure(fig: Any, path: str | Path, *, dpi: int = 110) -> Path:
    """Write a matplotlib figure to ``path`` (format from the suffix) and close it."""
    import matplotlib.pyplot as plt

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=dpi)
    plt.close(fig)
    return p
