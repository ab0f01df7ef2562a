"""The audit server as a real process: kill -9 mid-stream, graceful shutdown, overload, PostgreSQL.

PostgreSQL tests need ``MNEMOSCOPE_TEST_PG_URL`` (``.ci/run`` installs and starts a server
with ``scripts/ci_services.sh``); without it they skip, unless ``MNEMOSCOPE_REQUIRE_SERVICES=1``.
"""

from __future__ import annotations

import signal
import sqlite3
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi")

from mnemoscope.server.storage import open_store
from server_helpers import (
    API_KEY,
    pg_base_url,
    running,
    start_server,
    stop_server,
)

AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module")
def service(tiny_service: tuple[Path, Path]) -> tuple[Path, Path]:
    return tiny_service


def _stream(url: str, stop: threading.Event, acked: list[str], errors: list[str], i0: int) -> None:
    with httpx.Client(base_url=url, headers=AUTH, timeout=30) as c:
        i = i0
        while not stop.is_set():
            i += 1
            try:
                r = c.post(
                    "/v1/audit", json={"context": f"Zor{i} lies on Ka{i % 5}.", "query": f"Where is Zor{i}?"}
                )
            except httpx.HTTPError as e:
                errors.append(type(e).__name__)
                return
            if r.status_code == 200:
                acked.append(r.json()["id"])


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def test_kill9_mid_stream_loses_no_acknowledged_audit(service: tuple[Path, Path], tmp_path: Path) -> None:
    model, profile = service
    db = tmp_path / "crash.db"
    srv = start_server(
        model, profile, str(db), tmp_path / "log.txt", "--max-batch-size", "4", "--max-wait-ms", "5"
    )
    stop = threading.Event()
    acked: list[str] = []
    errors: list[str] = []
    clients = [
        threading.Thread(target=_stream, args=(srv.url, stop, acked, errors, 1000 * k)) for k in range(3)
    ]
    for t in clients:
        t.start()
    deadline = time.time() + 60
    while len(acked) < 20 and time.time() < deadline:
        time.sleep(0.05)
    srv.proc.send_signal(signal.SIGKILL)  # no chance to flush or checkpoint
    srv.proc.wait(10)
    stop.set()
    for t in clients:
        t.join(30)
    assert len(acked) >= 20, f"only {len(acked)} audits before the kill: {srv.log.read_text()[-2000:]}"
    # restart on the same database: the killed process's writer lock is gone with it
    with running(model, profile, str(db), tmp_path / "log2.txt") as s2, s2.client() as c:
        for aid in acked:
            assert c.get(f"/v1/audits/{aid}").status_code == 200, f"acknowledged audit {aid} lost"
        total = c.get("/v1/stats").json()["n_audits"]
        assert total >= len(acked)  # some stored audits may not have been acknowledged before the kill
        assert c.post("/v1/audit", json={"context": "a", "query": "b"}).status_code == 200
    ro = open_store(db, readonly=True)
    rep = ro.verify()
    ro.close()
    assert rep.ok, rep
    assert rep.n_entries == total + 1


def test_sigterm_finishes_queued_work(service: tuple[Path, Path], tmp_path: Path) -> None:
    model, profile = service
    db = tmp_path / "term.db"
    srv = start_server(model, profile, str(db), tmp_path / "log.txt", "--max-batch-size", "2")
    results: list[tuple[int, str | None]] = []

    def one(i: int) -> None:
        try:
            r = httpx.post(
                f"{srv.url}/v1/audit", json={"context": f"c{i}", "query": f"q{i}"}, headers=AUTH, timeout=60
            )
            results.append((r.status_code, r.json().get("id") if r.status_code == 200 else None))
        except httpx.HTTPError:
            results.append((-1, None))

    ts = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    time.sleep(0.3)
    # uvicorn shuts down gracefully, then re-raises the signal: exit status -SIGTERM
    assert stop_server(srv, signal.SIGTERM) in (0, -signal.SIGTERM)
    assert "Application shutdown complete" in srv.log.read_text()
    for t in ts:
        t.join(30)
    ok = [rid for code, rid in results if code == 200]
    assert all(code in (200, 503, -1) for code, _ in results), results
    ro = open_store(db, readonly=True)
    assert ro.verify().ok
    for rid in ok:
        assert ro.get(str(rid)) is not None
    ro.close()


def test_overload_gives_503_and_bounded_memory(service: tuple[Path, Path], tmp_path: Path) -> None:
    model, profile = service
    srv = start_server(
        model,
        profile,
        str(tmp_path / "o.db"),
        tmp_path / "log.txt",
        "--queue-size",
        "4",
        "--max-batch-size",
        "2",
    )
    try:
        rss0 = _rss_kb(srv.proc.pid)
        codes: list[int] = []
        big = "The river Ka flows through the town. " * 8

        def one(i: int) -> None:
            r = httpx.post(
                f"{srv.url}/v1/audit", json={"context": big, "query": f"q{i}"}, headers=AUTH, timeout=120
            )
            codes.append(r.status_code)
            if r.status_code == 503:
                assert r.headers.get("retry-after") is not None

        for _ in range(2):
            ts = [threading.Thread(target=one, args=(i,)) for i in range(48)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(120)
        assert srv.proc.poll() is None, "the server died under overload"
        assert 503 in codes and 200 in codes, codes
        assert set(codes) <= {200, 503}, codes
        rss1 = _rss_kb(srv.proc.pid)
        assert rss1 < rss0 + 300_000, f"RSS grew from {rss0} kB to {rss1} kB"
        with srv.client() as c:
            assert c.get("/v1/stats").json()["n_audits"] == codes.count(200)
    finally:
        stop_server(srv)


def _must_not_start(model: Path, profile: Path, db: str, log: Path, why: str) -> None:
    try:
        s = start_server(model, profile, db, log)
    except RuntimeError as e:
        assert why in str(e)
        return
    stop_server(s)  # never leave a stray server behind
    pytest.fail(f"the server started although it should refuse ({why})")


def test_second_server_on_the_same_sqlite_file_refuses(service: tuple[Path, Path], tmp_path: Path) -> None:
    model, profile = service
    db = str(tmp_path / "one.db")
    with running(model, profile, db, tmp_path / "a.txt"):
        _must_not_start(model, profile, db, tmp_path / "b.txt", "already open for writing")


def test_server_refuses_a_profile_for_another_model(service: tuple[Path, Path], tmp_path: Path) -> None:
    from helpers import tiny_model, tiny_tokenizer

    _, profile = service
    other = tmp_path / "other"
    tiny_model(layers=3, seed=5).save_pretrained(other)
    tiny_tokenizer().save_pretrained(other)
    _must_not_start(other, profile, str(tmp_path / "x.db"), tmp_path / "log.txt", "was fitted on")


# -- PostgreSQL -------------------------------------------------------------------------------------


@pytest.fixture()
def pg_url() -> Any:
    import psycopg

    base = pg_base_url()
    schema = f"t_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as con:
        con.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in base else "?"
    yield f"{base}{sep}options=-csearch_path%3D{schema}"
    with psycopg.connect(base, autocommit=True) as con:
        con.execute(f"DROP SCHEMA {schema} CASCADE")


def _rec(i: int) -> dict[str, Any]:
    return {
        "id": f"id{i}",
        "created_at": 1000.0 + i,
        "anomaly_flag": i % 2 == 0,
        "repcs": {"kl": 1.0, "tau": 0.5, "memorized": i % 3 == 0},
        "latency_ms": float(i),
        "query": f"q{i}",
    }


def test_postgres_store_chain_and_tampering(pg_url: str) -> None:
    import psycopg

    st = open_store(pg_url, checkpoint_every=3)
    assert st.append([_rec(i) for i in range(1, 8)]) == list(range(1, 8))
    assert st.get("id2")["query"] == "q2"
    page = st.history(memory_flag=True, limit=2)  # RePCS-memorized records count as memory
    assert [x["id"] for x in page.items] == ["id6", "id3"] and page.next_before_seq is None
    assert st.counts()["n_memorized"] == 2
    assert st.verify().ok and [c.tree_size for c in st.checkpoints()] == [3, 6]
    assert st.prune(1003.5) == 3 and st.verify().ok
    st.close()
    with psycopg.connect(pg_url, autocommit=True) as con:
        con.execute("UPDATE audits SET content = replace(content, '\"q5\"', '\"q6\"') WHERE seq = 5")
    st = open_store(pg_url, readonly=True)
    rep = st.verify()
    assert not rep.ok and rep.seq == 5 and "altered" in (rep.problem or "")
    st.close()
    with psycopg.connect(pg_url, autocommit=True) as con:
        con.execute("DELETE FROM audits WHERE seq = 5")
    st = open_store(pg_url)
    rep = st.verify()
    assert not rep.ok and rep.seq == 5 and "missing" in (rep.problem or "")
    st.close()


def test_postgres_server_roundtrip_and_restart(
    service: tuple[Path, Path], tmp_path: Path, pg_url: str
) -> None:
    model, profile = service
    ids = []
    with running(model, profile, pg_url, tmp_path / "a.txt") as s, s.client() as c:
        for i in range(3):
            r = c.post("/v1/audit", json={"context": f"Zor{i} is on Ka.", "query": "Where?"})
            assert r.status_code == 200, r.text
            ids.append(r.json()["id"])
    with running(model, profile, pg_url, tmp_path / "b.txt") as s, s.client() as c:
        assert len(c.get("/v1/history").json()["items"]) == 3
        assert c.get("/v1/stats").json()["n_audits"] == 3
        assert all(c.get(f"/v1/audits/{i}").status_code == 200 for i in ids)
    st = open_store(pg_url, readonly=True)
    assert st.verify().ok
    st.close()


def test_sqlite_file_stays_consistent_after_all_of_this(tmp_path: Path) -> None:
    # integrity_check of a database written by the store (WAL, synchronous=FULL)
    st = open_store(tmp_path / "i.db")
    st.append([_rec(i) for i in range(1, 50)])
    st.close()
    con = sqlite3.connect(tmp_path / "i.db")
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
