"""What keeps the proxy's memory flat (issue 36): the mechanisms, not RSS thresholds.

``benchmarks/bench_proxy.py leak --where process`` measures the RSS (docs/proxy.md "Memory");
these tests check the two things that made it flat:

* the audit log's SQLite page cache is bounded at ``_SQLITE_CACHE_KB`` (2 MB), so what it adds to
  a long-running process stops growing once that much of the log has been touched, whatever the
  log's size;
* the proxy's start freezes the heap it was started with (``ProxySettings.gc_freeze``), so that
  the cyclic garbage every request leaves is collected at the pace of the proxy's own objects:
  full collections run and the garbage stays bounded.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import sys
import time
from pathlib import Path

import pytest

from mnemoscope.server.ledger import new_audit_id
from mnemoscope.server.storage import _SQLITE_CACHE_KB, open_store


def _sqlite_memory_used() -> int | None:
    """SQLite's own count of the bytes it has allocated (page caches included), read from the
    library Python's ``sqlite3`` module is linked to; ``None`` where that library is not a shared
    object this process can reach (a statically linked ``_sqlite3``)."""
    import sqlite3  # noqa: F401 - loads the library

    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    libs = {line.split()[-1] for line in maps.splitlines() if "libsqlite3" in line.split()[-1]}
    if len(libs) != 1:
        return None
    lib = ctypes.CDLL(libs.pop())
    lib.sqlite3_memory_used.restype = ctypes.c_int64
    return int(lib.sqlite3_memory_used())


def _record(i: int) -> dict:
    """A proxy record of the size the leak benchmark logs (~0.9 kB)."""
    return {
        "id": new_audit_id(),
        "created_at": time.time(),
        "via": "proxy",
        "upstream": "http://127.0.0.1:8080/v1",
        "path": "v1/chat/completions",
        "stream": bool(i % 2),
        "status": "failed",
        "anomaly_flag": False,
        "memory_flag": None,
        "latency_ms": 0.0,
        "error": f"upstream answered HTTP 503: model is loading ({i}) " + "x" * 500,
    }


def test_the_log_page_cache_is_bounded(tmp_path):
    """Appending a log several times larger than the cache: SQLite's memory grows by the cache's
    bound at most, not with the log (with the bound at 8 MB it was still growing at 10,000 proxy
    requests)."""
    store = open_store(tmp_path / "audit.db")
    try:
        assert store._conn.execute("PRAGMA cache_size").fetchone()[0] == -_SQLITE_CACHE_KB
        assert _SQLITE_CACHE_KB <= 2 * 1024
        used0 = _sqlite_memory_used()
        if used0 is None:
            pytest.skip("SQLite is not a shared library here: its memory cannot be read")
        peak = 0
        for batch in range(16):
            store.append([_record(batch * 500 + k) for k in range(500)])
            used = _sqlite_memory_used()
            assert used is not None
            peak = max(peak, used - used0)
        store._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db_bytes = (tmp_path / "audit.db").stat().st_size
        assert db_bytes > 3 * _SQLITE_CACHE_KB * 1024, db_bytes  # the log outgrew the cache
        # the cache's pages (4 kB + SQLite's header per page) and the schema/statement caches
        assert peak < 1.25 * _SQLITE_CACHE_KB * 1024 + 512 * 1024, (peak, db_bytes)
    finally:
        store.close()


def _lifespan(settings_kw: dict, tmp_path: Path) -> int:
    """Start and stop a proxy app's lifespan; the freeze count seen while it runs."""
    from mnemoscope.server.proxy import ProxySettings, create_proxy_app

    app = create_proxy_app(
        ProxySettings(upstream="http://127.0.0.1:9/v1", **settings_kw),
        auditor=None,
        store=open_store(tmp_path / f"audit-{len(settings_kw)}.db"),
    )

    async def run() -> int:
        async with app.router.lifespan_context(app):
            return gc.get_freeze_count()

    return asyncio.run(run())


def test_proxy_start_freezes_the_startup_heap(tmp_path):
    gc.unfreeze()
    try:
        assert _lifespan({"gc_freeze": False}, tmp_path) == 0
        assert _lifespan({}, tmp_path) > 0  # the default
    finally:
        gc.unfreeze()


@pytest.mark.skipif(
    sys.implementation.name != "cpython" or sys.version_info >= (3, 14),
    reason="CPython's generational collector (3.14's is incremental)",
)
def test_after_the_freeze_full_collections_free_request_garbage():
    """Synthetic requests, each leaving a reference cycle that lives a while (as an httpx response
    and its stream do while a request is in flight): after the freeze, full collections run and
    the tracked objects stay bounded, instead of piling up until 25 % of the startup heap."""
    from mnemoscope.server.proxy import freeze_startup_heap

    class Response:
        pass

    ballast = [[i] for i in range(100_000)]  # a startup heap (imported libraries), tracked by gc
    gc.unfreeze()
    try:
        frozen = freeze_startup_heap()
        assert frozen >= len(ballast)
        full0 = gc.get_stats()[2]["collections"]
        in_flight: list[Response] = []
        tracked = []
        for i in range(200_000):
            a, b = Response(), Response()
            a.stream, b.response = b, a  # a cycle, garbage once the request is done
            in_flight.append(a)
            if len(in_flight) > 300:
                in_flight.pop(0)
            if i % 20_000 == 0:
                tracked.append(len(gc.get_objects()))
        assert gc.get_stats()[2]["collections"] - full0 >= 2
        assert max(tracked) - tracked[0] < 20_000, tracked
    finally:
        gc.unfreeze()
        del ballast
