"""Give freed memory back to the operating system between large batches.

PyTorch's CPU tensors come from the C allocator. With glibc, blocks below the (dynamically
rising, up to 32 MB) mmap threshold are carved from heap arenas, and after many batches of
different shapes (logits of ``[rows width vocabulary]``) the freed space stays mapped: the
resident size of a long run creeps up by hundreds of MB although nothing is alive. Trimming
the heap after each large batch keeps it at what is actually in use (measured on the default
model, 160 WikiMIA-sized documents: resident 1193 -> 949 MB, peak 1291 -> 1114 MB, same
speed within noise; ``benchmarks/bench_leaderboard_memory.py`` measures a whole run).

Elsewhere (macOS, musl, Windows) these functions do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys
from functools import lru_cache
from typing import Any

__all__ = ["release_memory", "trim_heap"]


@lru_cache(maxsize=1)
def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:  # pragma: no cover - no glibc
        return None


def trim_heap() -> bool:
    """Return free heap pages to the OS (glibc ``malloc_trim(0)``); False where unsupported."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


def release_memory() -> bool:
    """Collect unreachable objects (a dropped model's reference cycles) and trim the heap."""
    gc.collect()
    return trim_heap()
