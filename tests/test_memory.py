"""Heap trimming between large batches (glibc) and its no-op elsewhere."""

from __future__ import annotations

import sys

from mnemoscope.trace.memory import release_memory, trim_heap


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        return int(f.read().split("VmRSS:")[1].split()[0]) / 1024


def test_trim_gives_freed_heap_back_on_linux() -> None:
    if not sys.platform.startswith("linux"):
        assert trim_heap() is False and release_memory() is False
        return
    # freeing one large mmapped block raises glibc's dynamic mmap threshold above 1 MB, so the
    # 1 MB blocks below come from the heap; freed with live blocks between them they stay
    # resident until the heap is trimmed
    big = bytearray(8 << 20)
    del big
    blocks = [bytearray(1 << 20) for _ in range(300)]
    keep = blocks[::50] + blocks[-1:]
    del blocks
    before = _rss_mb()
    assert trim_heap() is True
    after = _rss_mb()
    assert before - after > 100, (before, after)  # ~290 MB of freed blocks go back
    assert release_memory() is True
    assert len(keep) == 7
