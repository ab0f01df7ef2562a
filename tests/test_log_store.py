"""The audit log's storage at production scale (issue 26): O(1) state, keyset history, counts,
tamper detection with signed checkpoints, resumable verify, migration of old logs, and several
writers on one PostgreSQL (the reproduced false tamper alarm, a dropped connection)."""

from __future__ import annotations

import sqlite3
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from mnemoscope.server.ledger import canonical, entry_hash, leaf_hash, merkle_root, new_audit_id
from mnemoscope.server.signing import Signer, Verifier
from mnemoscope.server.storage import SOURCES, StorageError, open_store
from server_helpers import pg_base_url


def _rec(i: int, t: float | None = None) -> dict[str, Any]:
    src = SOURCES[i % 4]
    return {
        "id": f"a{i}",
        "created_at": t if t is not None else 1000.0 + i,
        "source": src,
        "memory_flag": src == "memory" or i % 5 == 0,
        "latency_ms": float(i),
        "answer": f"answer {i}",
    }


def test_history_is_keyset_paged_and_filtered(tmp_path: Path) -> None:
    st = open_store(tmp_path / "h.db", checkpoint_every=4)
    st.append([_rec(i) for i in range(1, 41)])
    page = st.history(limit=15)
    assert [x["seq"] for x in page.items] == list(range(40, 25, -1)) and page.next_before_seq == 26
    seen = [x["seq"] for x in page.items]
    while page.next_before_seq is not None:
        page = st.history(limit=15, before_seq=page.next_before_seq)
        seen += [x["seq"] for x in page.items]
    assert seen == list(range(40, 0, -1))
    mem = st.history(limit=100, source="memory").items
    assert [x["id"] for x in mem] == [f"a{i}" for i in range(37, 0, -4)]
    flagged = st.history(limit=100, memory_flag=True).items
    assert {x["id"] for x in flagged} == {f"a{i}" for i in range(1, 41) if i % 4 == 1 or i % 5 == 0}
    assert [x["id"] for x in st.history(since=1010, until=1012).items] == ["a12", "a11", "a10"]
    with pytest.raises(StorageError, match="source 'maybe'"):
        st.history(source="maybe")
    c = st.counts()
    assert c["n"] == 40 and c["by_source"] == {**dict.fromkeys(SOURCES, 0), **dict.fromkeys(SOURCES[:4], 10)}
    assert c["n_memory_flag"] == len(flagged) and len(c["recent_latency_ms"]) == 40
    assert st.counts(recent=5)["recent_latency_ms"] == [36.0, 37.0, 38.0, 39.0, 40.0]
    st.close()


def test_bad_records_are_refused_naming_record_and_field(tmp_path: Path) -> None:
    st = open_store(tmp_path / "b.db")
    with pytest.raises(StorageError, match=r"record 'x'.*'source' is 'sometimes'"):
        st.append([{**_rec(1), "id": "x", "source": "sometimes"}])
    with pytest.raises(StorageError, match=r"record 0 .*'created_at' is missing"):
        st.append([{"id": "y"}])
    with pytest.raises(StorageError, match="canonical JSON"):
        st.append([{**_rec(2), "p": float("nan")}])
    assert st.append([_rec(3)]) == [1] and st.verify().ok
    st.close()


def _signed_store(path: Path, signer: Signer) -> Any:
    return open_store(path, checkpoint_every=4, signing_key=signer, origin="t.example/log")


def test_verify_names_the_first_bad_seq_including_a_forged_signature(tmp_path: Path) -> None:
    signer = Signer.generate("t.example/log")
    db = tmp_path / "v.db"
    st = _signed_store(db, signer)
    st.append([_rec(i) for i in range(1, 14)])
    st.close()
    ro = open_store(db, readonly=True)
    rep = ro.verify(trusted=[signer.verifier], require_signed=True)
    assert rep.ok and rep.n_checkpoints == rep.n_signed == 3 and rep.signed_by == ("t.example/log",)
    ro.close()
    con = sqlite3.connect(db)
    note = con.execute("SELECT note FROM checkpoints WHERE tree_size = 8").fetchone()[0]
    body, _, _sig = note.partition("\n\n")
    forger = Signer.generate("t.example/log")  # same name, another key: not the operator's
    forged = forger.sign(body.encode())
    import base64

    kid = signer.verifier.key_id  # claim the operator's key id
    con.execute(
        "UPDATE checkpoints SET note = ? WHERE tree_size = 8",
        (f"{body}\n\n\u2014 t.example/log {base64.b64encode(kid + forged).decode()}\n",),
    )
    con.commit()
    con.close()
    ro = open_store(db, readonly=True)
    rep = ro.verify(trusted=[signer.verifier])
    assert not rep.ok and rep.seq == 8 and "does not verify" in (rep.problem or ""), rep
    # the operator's published key is what counts: a key table rewritten to the forger's key fails too
    rep = ro.verify(trusted=[forger.verifier])
    assert not rep.ok and rep.seq == 4 and "not signed by a trusted key" in (rep.problem or "")
    ro.close()


@pytest.mark.parametrize(
    ("sql", "seq", "word"),
    [
        ("UPDATE audits SET content = replace(content, 'answer 5', 'answer 55') WHERE seq = 5", 5, "altered"),
        ("DELETE FROM audits WHERE seq = 6", 6, "missing"),
        ("UPDATE audits SET seq = seq + 100 WHERE seq = 3", 3, "missing"),
        ("DELETE FROM audits WHERE seq >= 7", 7, "deleted"),
        ("UPDATE checkpoints SET root = zeroblob(32) WHERE tree_size = 8", 8, "Merkle root"),
    ],
)
def test_tampering_is_found_at_its_seq(tmp_path: Path, sql: str, seq: int, word: str) -> None:
    db = tmp_path / "t.db"
    st = open_store(db, checkpoint_every=4)
    st.append([_rec(i) for i in range(1, 10)])
    st.close()
    con = sqlite3.connect(db)
    con.execute(sql)
    con.commit()
    con.close()
    ro = open_store(db, readonly=True)
    rep = ro.verify()
    ro.close()
    assert not rep.ok and rep.seq == seq and word in (rep.problem or ""), rep


def test_verify_resumes_after_a_checkpoint(tmp_path: Path) -> None:
    signer = Signer.generate("t.example/log")
    db = tmp_path / "r.db"
    st = _signed_store(db, signer)
    st.append([_rec(i) for i in range(1, 11)])
    saved = tmp_path / "cp8.txt"
    saved.write_text(next(c.note for c in st.checkpoints() if c.tree_size == 8) or "")
    st.append([_rec(i) for i in range(11, 20)])
    rep = st.verify(since=8)
    assert rep.ok and rep.since == 8 and rep.n_entries == 11 and rep.last_checkpoint == 16
    assert st.verify(since=str(saved), trusted=[signer.verifier]).n_entries == 11
    with pytest.raises(StorageError, match="no checkpoint at tree size 7"):
        st.verify(since=7)
    st.close()
    # a row tampered before the resume point is not read; one after it is found
    con = sqlite3.connect(db)
    con.execute("UPDATE audits SET content = replace(content, 'answer', 'ANSWER') WHERE seq IN (3, 12)")
    con.commit()
    con.close()
    ro = open_store(db, readonly=True)
    rep = ro.verify(since=8)
    assert not rep.ok and rep.seq == 12
    assert ro.verify().seq == 3
    # the log rewritten under a saved checkpoint: refused
    ro.close()
    con = sqlite3.connect(db)
    con.execute("UPDATE checkpoints SET root = zeroblob(32) WHERE tree_size = 8")
    con.commit()
    con.close()
    ro = open_store(db, readonly=True)
    with pytest.raises(StorageError, match=r"differs from the saved one|does not match"):
        ro.verify(since=str(saved), trusted=[signer.verifier])
    ro.close()


def test_key_rotation_is_recorded_and_both_keys_verify(tmp_path: Path) -> None:
    db = tmp_path / "k.db"
    k1, k2 = Signer.generate("t.example/log"), Signer.generate("t.example/log")
    st = _signed_store(db, k1)
    st.append([_rec(i) for i in range(1, 6)])
    st.close()
    st = _signed_store(db, k2)
    st.append([_rec(i) for i in range(6, 10)])
    keys = st.keys()
    assert [k["verifier"] for k in keys] == [str(k1.verifier), str(k2.verifier)]
    assert (
        keys[0]["retired_tree_size"] == 5
        and keys[1]["first_tree_size"] == 5
        and keys[1]["retired_at"] is None
    )
    rep = st.verify()
    assert rep.ok and rep.n_signed == 2
    assert not st.verify(trusted=[k2.verifier]).ok  # the checkpoint at 4 is k1's
    st.close()


# -- older logs ------------------------------------------------------------------------------------

_OLD_DDL = [
    """CREATE TABLE audits (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, created_at REAL NOT NULL,
       anomaly_flag INTEGER NOT NULL, memorized INTEGER NOT NULL, latency_ms REAL, content TEXT,
       leaf_hash BLOB NOT NULL, prev_hash BLOB NOT NULL, entry_hash BLOB NOT NULL)""",
    "CREATE INDEX audits_created ON audits (created_at)",
    "CREATE TABLE checkpoints (tree_size INTEGER PRIMARY KEY, root BLOB NOT NULL, head BLOB NOT NULL, "
    "created_at REAL NOT NULL)",
]


def _old_log(db: Path, n: int) -> list[bytes]:
    """A log as the schema-1 store wrote it (CRM columns, no state, unsigned checkpoints every 4)."""
    con = sqlite3.connect(db)
    for s in _OLD_DDL:
        con.execute(s)
    prev, leaves = bytes(32), []
    for i in range(1, n + 1):
        content = {
            "id": f"o{i}",
            "created_at": 500.0 + i,
            "anomaly_flag": i % 2 == 0,
            "repcs": {"memorized": i % 3 == 0},
            "latency_ms": 1.0,
        }
        if i > 6:  # newer records already carried the verdict
            content["source"] = "context"
            content["memory_flag"] = False
        lh = leaf_hash(content)
        eh = entry_hash(prev, lh, i)
        con.execute(
            "INSERT INTO audits VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (i, f"o{i}", 500.0 + i, int(i % 2 == 0), int(i % 3 == 0 and i <= 6), 1.0,
             canonical(content).decode(), lh, prev, eh),
        )  # fmt: skip
        leaves.append(lh)
        prev = eh
        if i % 4 == 0:
            con.execute("INSERT INTO checkpoints VALUES (?, ?, ?, 0)", (i, merkle_root(leaves), eh))
    con.commit()
    con.close()
    return leaves


def test_an_old_log_verifies_read_only_and_is_migrated_on_open(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    leaves = _old_log(db, 10)
    ro = open_store(db, readonly=True)
    assert ro.verify().ok and ro.get("o3")["repcs"]["memorized"] is True
    with pytest.raises(StorageError, match="open it once for writing"):
        ro.history()
    ro.close()
    signer = Signer.generate("t.example/log")
    st = open_store(db, checkpoint_every=4, signing_key=signer)
    c = st.counts()
    assert c["n"] == 10 and c["by_source"] == {
        "context": 4,
        "memory": 2,
        "mixed": 0,
        "undetermined": 4,
        "unsupported": 0,
    }
    assert c["n_anomalies"] == 5
    assert [x["id"] for x in st.history(source="memory").items] == ["o6", "o3"]
    assert st.append([_rec(11), _rec(12)]) == [11, 12]
    rep = st.verify()
    assert rep.ok and rep.n_checkpoints == 3 and rep.n_signed == 1  # two old unsigned, one new signed
    # old records keep their hashes; their proofs verify against the new root
    con = sqlite3.connect(db)
    assert [
        bytes(r[0]) for r in con.execute("SELECT leaf_hash FROM audits WHERE seq <= 10 ORDER BY seq")
    ] == leaves
    con.close()
    proof = st.prove("o2")
    assert proof["tree_size"] == 12
    st.close()


# -- PostgreSQL: several writers ----------------------------------------------------------------------


@pytest.fixture()
def pg(request: Any) -> Any:
    import psycopg

    base = pg_base_url()
    schema = f"t_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as con:
        con.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in base else "?"
    yield f"{base}{sep}options=-csearch_path%3D{schema}"
    with psycopg.connect(base, autocommit=True) as con:
        con.execute(f"DROP SCHEMA {schema} CASCADE")


def test_pg_two_writers_then_a_stale_checkpoint_is_no_false_alarm(pg: str) -> None:
    """The reproduced case: A appends, B appends, A checkpoints (as at shutdown); verify stays ok."""
    signer = Signer.generate("t.example/log")
    a = open_store(pg, checkpoint_every=1000, signing_key=signer)
    b = open_store(pg, checkpoint_every=1000, signing_key=signer)
    a.append([_rec(i) for i in range(1, 89)])
    b.append([_rec(i) for i in range(89, 97)])
    cp = a.checkpoint()
    assert cp is not None and cp.tree_size == 96
    assert b.checkpoint() is None  # already there
    rep = b.verify(trusted=[signer.verifier], require_signed=True)
    assert rep.ok and rep.n_entries == 96 and rep.last_checkpoint == 96
    assert a.prove("a90")["tree_size"] == 96
    a.close()
    b.close()


def test_pg_concurrent_writers_keep_a_gap_free_chain(pg: str) -> None:
    stores = [open_store(pg, checkpoint_every=16) for _ in range(3)]
    errors: list[BaseException] = []
    acked: list[str] = []

    def write(k: int) -> None:
        try:
            for j in range(20):
                recs = [_rec(10_000 * (k + 1) + 10 * j + x) for x in range(3)]
                stores[k].append(recs)
                acked.extend(r["id"] for r in recs)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    rep = stores[0].verify()
    assert rep.ok and rep.n_entries == 180 == len(set(acked))
    assert stores[1].counts()["n"] == 180
    assert all(stores[2].get(i) is not None for i in acked)
    for s in stores:
        s.close()


def test_pg_dropped_connection_fails_cleanly_then_reconnects(pg: str) -> None:
    import psycopg

    st = open_store(pg)
    st.append([_rec(1)])
    pid = st._conn.info.backend_pid
    with psycopg.connect(pg_base_url(), autocommit=True) as con:
        con.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(StorageError):
        st.append([_rec(2)])  # in flight when the server went away: not acknowledged
    assert st.append([_rec(3)]) == [2]  # the next call reconnects
    assert st.get("a1") is not None and st.verify().ok
    st.close()


def test_verifier_round_trip_for_cli_files(tmp_path: Path) -> None:
    s = Signer.generate("t.example/log")
    (tmp_path / "k").write_text(str(s))
    st = open_store(tmp_path / "f.db", signing_key=tmp_path / "k")
    assert st.signer is not None and st.signer.verifier == s.verifier
    assert Verifier.parse(st.keys()[0]["verifier"]) == s.verifier
    st.close()
    (tmp_path / "bad").write_text("nope")
    with pytest.raises(StorageError, match="bad"):
        open_store(tmp_path / "g.db", signing_key=tmp_path / "bad")


def test_audit_ids_are_uuid7_hex_that_sort_by_creation_time() -> None:
    ids = [new_audit_id(ms=1_700_000_000_000 + t, rand=bytes([t % 256]) * 10) for t in range(0, 3000, 7)]
    assert ids == sorted(ids), "ids made later must sort after earlier ones (the id index grows at its end)"
    for i in [*ids[:5], new_audit_id()]:
        u = uuid.UUID(i)
        assert len(i) == 32 and i == u.hex and u.version == 7 and u.variant == uuid.RFC_4122
    assert len({new_audit_id() for _ in range(2000)}) == 2000  # same millisecond: the random bits differ


def test_a_log_of_uuid4_ids_continues_with_time_ordered_ids(tmp_path: Path) -> None:
    """A log written before the ids were time-ordered (uuid4 hex) takes the new ids in the same
    unique index: it verifies, and old and new audits are found and proven (checked with the
    RFC 9162 verifiers of test_log_proofs, written independently of mnemoscope.server.merkle)."""
    import base64

    from test_log_proofs import rfc_mth, rfc_verify_consistency, rfc_verify_inclusion

    def b(s: str) -> bytes:
        return base64.b64decode(s)

    signer = Signer.generate("ids.test/log")
    db = tmp_path / "ids.db"
    st = open_store(db, checkpoint_every=16, signing_key=signer)
    old = [{**_rec(i), "id": uuid.uuid4().hex} for i in range(1, 101)]
    st.append(old)
    st.close()
    st = open_store(db, checkpoint_every=16, signing_key=signer)
    new = [{**_rec(i), "id": new_audit_id()} for i in range(101, 201)]
    for k in range(0, 100, 8):
        st.append(new[k : k + 8])
    for rec in (old[0], old[-1], new[0], new[-1]):
        p = st.prove(rec["id"])
        assert st.get(rec["id"])["answer"] == rec["answer"]
        assert rfc_verify_inclusion(p["leaf_index"], p["tree_size"], b(p["leaf_hash"]), [b(h) for h in p["inclusion_path"]], b(p["root"]))  # fmt: skip
    c = st.consistency(100)
    assert c["second"] == 200  # the proof of seq 200 checkpointed the head
    root_100, root_200 = rfc_mth([canonical(r) for r in old]), rfc_mth([canonical(r) for r in old + new])
    assert b(c["first_root"]) == root_100 and b(c["second_root"]) == root_200
    assert rfc_verify_consistency(100, 200, root_100, root_200, [b(h) for h in c["consistency_path"]])
    st.close()
    rep = open_store(db, readonly=True).verify(trusted=[signer.verifier], require_signed=True)
    assert rep.ok and rep.n_entries == 200, rep


def test_a_log_made_before_the_unsupported_source_gets_its_counter(tmp_path: Path) -> None:
    """A log whose state row predates a source (no n_unsupported column) reads it as 0 read-only
    and gets the column on its next writable open; an unsupported answer is then counted."""
    import sqlite3

    path = tmp_path / "old.db"
    st = open_store(path)
    st.append([_rec(i) for i in range(1, 5)])
    st.close()
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE log_state DROP COLUMN n_unsupported")
    con.commit()
    con.close()
    ro = open_store(path, readonly=True)
    assert ro.counts()["by_source"]["unsupported"] == 0 and ro.counts()["n"] == 4
    ro.close()
    st = open_store(path)
    st.append([{**_rec(5), "source": "unsupported", "memory_flag": False}])
    c = st.counts()
    assert c["n"] == 5 and c["by_source"]["unsupported"] == 1 and c["by_source"]["memory"] == 1
    st.close()
