"""Durable audit storage: SQLite (default) or PostgreSQL, both behind one small class.

**SQLite** runs in WAL mode with ``synchronous=FULL``, so a committed audit survives a
power cut or ``kill -9``. SQLite releases before 3.51.3 (this machine has 3.40) have the
*WAL-reset bug*: corruption is possible when two connections to one database write or
checkpoint at the same moment. The store cannot trigger it by construction:

* one process owns the database: opening it for writing takes an exclusive ``flock`` on
  ``<db>.writer.lock`` and a second server on the same file refuses to start;
* inside that process there is exactly one connection, used under a lock, so every
  write and every checkpoint (automatic or explicit) comes from the same connection;
* everything else (``mnemoscope log verify``, ad-hoc inspection) opens the file read-only
  (``mode=ro``): a read-only connection can neither write nor checkpoint.

**PostgreSQL** (``postgresql://...``, needs ``psycopg``): the same schema; appends take a
transaction-level advisory lock so sequence numbers stay gap-free even if two servers share
a database.

Both keep the hash chain and Merkle checkpoints of :mod:`mnemoscope.server.ledger`.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from mnemoscope.errors import MnemoscopeError
from mnemoscope.server.ledger import (
    GENESIS,
    Checkpoint,
    LogEntry,
    VerifyReport,
    canonical,
    entry_hash,
    leaf_hash,
    merkle_root,
    verify_log,
)

__all__ = ["AuditStore", "StorageError", "open_store"]

_ADVISORY_KEY = 0x6D6E656D6F  # "mnemo"


class StorageError(MnemoscopeError):
    """The database cannot be opened or written."""


def _ddl(pg: bool) -> list[str]:
    blob = "BYTEA" if pg else "BLOB"
    big = "BIGINT" if pg else "INTEGER"
    real = "DOUBLE PRECISION" if pg else "REAL"
    return [
        f"""CREATE TABLE IF NOT EXISTS audits (
            seq {big} PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            created_at {real} NOT NULL,
            anomaly_flag INTEGER NOT NULL,
            memorized INTEGER NOT NULL,
            latency_ms {real},
            content TEXT,
            leaf_hash {blob} NOT NULL,
            prev_hash {blob} NOT NULL,
            entry_hash {blob} NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS audits_created ON audits (created_at)",
        f"""CREATE TABLE IF NOT EXISTS checkpoints (
            tree_size {big} PRIMARY KEY,
            root {blob} NOT NULL,
            head {blob} NOT NULL,
            created_at {real} NOT NULL)""",
    ]


class AuditStore:
    """Append-only audit log with a hash chain (see the module doc).

    Use :func:`open_store` to build one from a path or URL.
    """

    def __init__(
        self,
        conn: Any,
        *,
        pg: bool,
        url: str,
        checkpoint_every: int = 64,
        lock_file: Any = None,
        readonly: bool = False,
    ):
        self._conn = conn
        self._pg = pg
        self.url = url
        self.readonly = readonly
        self.checkpoint_every = max(1, int(checkpoint_every))
        self._lock = threading.Lock()
        self._lock_file = lock_file
        self._leaves: list[bytes] | None = None
        self._q = "%s" if pg else "?"
        with self._lock:
            if readonly:  # no DDL: a read-only view never creates or changes anything
                try:
                    self._exec("SELECT 1 FROM audits LIMIT 1").fetchone()
                except Exception as e:
                    raise StorageError(f"{url} is not an audit database ({e})") from e
                return
            for stmt in _ddl(pg):
                self._exec(stmt)
            self._commit()

    def _check_writable(self) -> None:
        if self.readonly:
            raise StorageError("this store was opened read-only")

    # -- low level ---------------------------------------------------------------------------------

    def _sql(self, s: str) -> str:
        return s.replace("?", self._q)

    def _exec(self, s: str, params: Sequence[Any] = ()) -> Any:
        cur = self._conn.cursor()
        cur.execute(self._sql(s), tuple(params))
        return cur

    def _commit(self) -> None:
        self._conn.commit()

    @staticmethod
    def _b(v: Any) -> bytes:
        return bytes(v) if v is not None else b""

    # -- writing -----------------------------------------------------------------------------------

    def _head_locked(self) -> tuple[int, bytes]:
        row = self._exec("SELECT seq, entry_hash FROM audits ORDER BY seq DESC LIMIT 1").fetchone()
        return (0, GENESIS) if row is None else (int(row[0]), self._b(row[1]))

    def _all_leaves_locked(self) -> list[bytes]:
        if self._leaves is None:
            rows = self._exec("SELECT leaf_hash FROM audits ORDER BY seq").fetchall()
            self._leaves = [self._b(r[0]) for r in rows]
        return self._leaves

    def append(self, records: Sequence[dict[str, Any]]) -> list[int]:
        """Store audits in one transaction (durable when this returns); returns their ``seq``.

        Each record needs ``id``, ``created_at``, ``anomaly_flag``, ``repcs.memorized`` (or
        ``memorized``) and ``latency_ms``; the whole dict is the hashed content.
        """
        self._check_writable()
        if not records:
            return []
        with self._lock:
            try:
                if self._pg:
                    self._exec("SELECT pg_advisory_xact_lock(?)", (_ADVISORY_KEY,))
                    self._leaves = None  # another writer may have appended
                seq, prev = self._head_locked()
                leaves = self._all_leaves_locked()
                new_leaves: list[bytes] = []
                seqs = []
                checkpoints = []
                for rec in records:
                    seq += 1
                    content = json.loads(canonical(rec))
                    lh = leaf_hash(content)
                    eh = entry_hash(prev, lh, seq)
                    mem = (
                        rec["source"] == "memory"
                        if "source" in rec
                        else rec.get("repcs", {}).get("memorized", rec.get("memorized", False))
                    )
                    self._exec(
                        "INSERT INTO audits (seq, id, created_at, anomaly_flag, memorized, latency_ms, content, "
                        "leaf_hash, prev_hash, entry_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            seq,
                            str(rec["id"]),
                            float(rec["created_at"]),
                            int(bool(rec.get("anomaly_flag"))),
                            int(bool(mem)),
                            rec.get("latency_ms"),
                            canonical(content).decode("utf-8"),
                            lh,
                            prev,
                            eh,
                        ),
                    )
                    new_leaves.append(lh)
                    seqs.append(seq)
                    prev = eh
                    if seq % self.checkpoint_every == 0:
                        checkpoints.append((seq, merkle_root(leaves + new_leaves), eh))
                for size, root, head in checkpoints:
                    self._exec(
                        "INSERT INTO checkpoints (tree_size, root, head, created_at) VALUES (?, ?, ?, ?)",
                        (size, root, head, time.time()),
                    )
                self._commit()
            except Exception as e:
                with contextlib.suppress(Exception):
                    self._conn.rollback()
                self._leaves = None
                if "UNIQUE" in str(e).upper() or "duplicate key" in str(e):
                    raise StorageError(f"an audit with one of these ids already exists ({e})") from e
                raise StorageError(f"could not store audits: {e}") from e
            leaves.extend(new_leaves)
            return seqs

    def checkpoint(self) -> Checkpoint | None:
        """Write a checkpoint at the current head now (e.g. on shutdown); ``None`` if empty or present."""
        self._check_writable()
        with self._lock:
            seq, head = self._head_locked()
            if seq == 0:
                return None
            have = self._exec("SELECT 1 FROM checkpoints WHERE tree_size = ?", (seq,)).fetchone()
            if have:
                return None
            root = merkle_root(self._all_leaves_locked())
            now = time.time()
            self._exec(
                "INSERT INTO checkpoints (tree_size, root, head, created_at) VALUES (?, ?, ?, ?)",
                (seq, root, head, now),
            )
            self._commit()
            return Checkpoint(seq, root, head, now)

    def prune(self, older_than: float) -> int:
        """Retention: drop the content of audits created before ``older_than`` (epoch seconds).

        Hashes stay, so the chain and the checkpoints still verify.
        """
        self._check_writable()
        with self._lock:
            cur = self._exec(
                "UPDATE audits SET content = NULL WHERE created_at < ? AND content IS NOT NULL", (older_than,)
            )
            self._commit()
            return int(cur.rowcount or 0)

    # -- reading -----------------------------------------------------------------------------------

    def get(self, audit_id: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._exec(
                "SELECT content, seq, created_at FROM audits WHERE id = ?", (audit_id,)
            ).fetchone()
        if row is None:
            return None
        if row[0] is None:
            return {"id": audit_id, "seq": int(row[1]), "created_at": row[2], "pruned": True}
        out: dict[str, Any] = json.loads(row[0])
        out["seq"] = int(row[1])
        return out

    def history(
        self,
        *,
        limit: int = 50,
        offset: int = 0,
        flag: bool | None = None,
        since: float | None = None,
        until: float | None = None,
    ) -> tuple[list[dict[str, Any]], int]:
        """Newest first; returns (items, total matching)."""
        where: list[str] = []
        params: list[Any] = []
        if flag is not None:
            where.append("anomaly_flag = ?")
            params.append(int(flag))
        if since is not None:
            where.append("created_at >= ?")
            params.append(since)
        if until is not None:
            where.append("created_at <= ?")
            params.append(until)
        w = (" WHERE " + " AND ".join(where)) if where else ""
        with self._lock:
            total = int(self._exec(f"SELECT COUNT(*) FROM audits{w}", params).fetchone()[0])
            rows = self._exec(
                f"SELECT content, seq, id, created_at FROM audits{w} ORDER BY seq DESC LIMIT ? OFFSET ?",
                [*params, int(limit), int(offset)],
            ).fetchall()
        items = []
        for content, seq, rid, created in rows:
            if content is None:
                items.append({"id": rid, "seq": int(seq), "created_at": created, "pruned": True})
            else:
                d = json.loads(content)
                d["seq"] = int(seq)
                items.append(d)
        return items, total

    def counts(self, recent: int = 1000) -> dict[str, Any]:
        with self._lock:
            n, n_flag, n_mem = self._exec(
                "SELECT COUNT(*), COALESCE(SUM(anomaly_flag), 0), COALESCE(SUM(memorized), 0) FROM audits"
            ).fetchone()
            lat = [
                float(r[0])
                for r in self._exec(
                    "SELECT latency_ms FROM audits WHERE latency_ms IS NOT NULL ORDER BY seq DESC LIMIT ?",
                    (int(recent),),
                ).fetchall()
            ]
        return {"n": int(n), "n_anomalies": int(n_flag), "n_memorized": int(n_mem), "recent_latency_ms": lat}

    def head(self) -> dict[str, Any]:
        with self._lock:
            seq, h = self._head_locked()
            row = self._exec(
                "SELECT tree_size, root FROM checkpoints ORDER BY tree_size DESC LIMIT 1"
            ).fetchone()
        return {
            "seq": seq,
            "entry_hash": h.hex(),
            "last_checkpoint": None
            if row is None
            else {"tree_size": int(row[0]), "root": self._b(row[1]).hex()},
        }

    def entries(self, batch: int = 1000) -> Iterator[LogEntry]:
        """Every log entry in ``seq`` order (read in pages, so memory stays bounded)."""
        last = -(2**62)
        while True:
            with self._lock:
                rows = self._exec(
                    "SELECT seq, id, content, leaf_hash, prev_hash, entry_hash FROM audits "
                    "WHERE seq > ? ORDER BY seq LIMIT ?",
                    (last, batch),
                ).fetchall()
            if not rows:
                return
            for seq, rid, content, lh, ph, eh in rows:
                yield LogEntry(
                    int(seq),
                    str(rid),
                    None if content is None else json.loads(content),
                    self._b(lh),
                    self._b(ph),
                    self._b(eh),
                )
            last = int(rows[-1][0])

    def checkpoints(self) -> list[Checkpoint]:
        with self._lock:
            rows = self._exec(
                "SELECT tree_size, root, head, created_at FROM checkpoints ORDER BY tree_size"
            ).fetchall()
        return [Checkpoint(int(r[0]), self._b(r[1]), self._b(r[2]), float(r[3])) for r in rows]

    def verify(self) -> VerifyReport:
        return verify_log(self.entries(), self.checkpoints())

    def ping(self) -> bool:
        with self._lock:
            self._exec("SELECT 1").fetchone()
        return True

    def close(self) -> None:
        with self._lock:
            with contextlib.suppress(Exception):
                self._conn.close()
            if self._lock_file is not None:
                with contextlib.suppress(Exception):
                    self._lock_file.close()
                self._lock_file = None


def _is_pg(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


def open_store(url: str | Path, *, readonly: bool = False, checkpoint_every: int = 64) -> AuditStore:
    """Open an audit store from a SQLite path (``audits.db``, ``sqlite:///path``) or a PostgreSQL URL.

    Raises:
        StorageError: the database cannot be opened, or another process holds the SQLite writer lock.
    """
    s = str(url)
    if _is_pg(s):
        try:
            import psycopg
        except ImportError as e:
            raise StorageError("PostgreSQL storage needs psycopg (pip install 'psycopg[binary]')") from e
        try:
            pconn: Any = psycopg.connect(s, autocommit=False)
        except Exception as e:
            raise StorageError(f"cannot connect to {s.split('@')[-1]}: {e}") from e
        if readonly:
            pconn.read_only = True
        return AuditStore(pconn, pg=True, url=s, checkpoint_every=checkpoint_every, readonly=readonly)
    path = Path(s[len("sqlite:///") :] if s.startswith("sqlite:///") else s).expanduser()
    if readonly:
        if not path.is_file():
            raise StorageError(f"no audit database at {path}")
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        return AuditStore(conn, pg=False, url=str(path), checkpoint_every=checkpoint_every, readonly=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock_file = _take_writer_lock(path)
    try:
        conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level="DEFERRED", timeout=30)
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StorageError(f"{path}: could not switch to WAL mode (got {mode})")
        conn.execute("PRAGMA synchronous=FULL")
        return AuditStore(
            conn, pg=False, url=str(path), checkpoint_every=checkpoint_every, lock_file=lock_file
        )
    except sqlite3.Error as e:
        lock_file.close()
        raise StorageError(f"cannot open {path}: {e}") from e


def _take_writer_lock(path: Path) -> Any:
    import fcntl

    f = open(f"{path}.writer.lock", "a+")  # noqa: SIM115 - held for the store's lifetime
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        f.close()
        raise StorageError(
            f"{path} is already open for writing by another process (lock {path}.writer.lock); "
            "one server per SQLite database"
        ) from e
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    return f
