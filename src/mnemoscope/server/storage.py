"""Durable audit storage: SQLite (default) or PostgreSQL, both behind one small class.

The log's cost does not grow with its size: the RFC 9162 compact range (the O(log n)
right edge of the Merkle tree), the chain head and the counters by source live in one
``log_state`` row updated in the append transaction; every perfect subtree an append
closes is kept in ``nodes`` (one row per leaf on average), so a checkpoint costs O(log n)
and an inclusion or consistency proof O(log n) lookups. Nothing holds a list of leaves.

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

**PostgreSQL** (``postgresql://...``, needs ``psycopg``): the same schema, shared by any
number of server replicas. An append locks the ``log_state`` row (``SELECT ... FOR
UPDATE``) for its transaction, so replicas append one after another on top of the same
head: sequence numbers stay gap-free, a replica killed inside the transaction leaves
nothing (PostgreSQL rolls it back), and a checkpoint is always taken from the committed
state, never from a stale copy. A lost connection (database restarted) fails the call with
:class:`StorageError` (the server answers 503 + Retry-After) and the next call reconnects.

**Older logs** (schema 1: ``anomaly_flag``/``memorized`` columns, no ``log_state``) are
migrated when opened for writing: ``source``/``memory_flag`` are filled from each
record's content, the tree nodes and the state are built in one pass, in one transaction;
content and hashes are not touched, so every old record keeps its hash and the old
(unsigned) checkpoints still verify. Opened read-only, an old log still verifies and reads
records; history and counts ask to open it once for writing.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mnemoscope.errors import MnemoscopeError
from mnemoscope.server.ledger import (
    GENESIS,
    Checkpoint,
    LogEntry,
    VerifyReport,
    VerifyStart,
    canonical,
    entry_hash,
    verify_log,
)
from mnemoscope.server.merkle import (
    CompactRange,
    ProofError,
    consistency_proof,
    inclusion_proof,
    leaf_hash_bytes,
    perfect_pieces,
    root_from_range,
)
from mnemoscope.server.signing import (
    NoteError,
    Signer,
    Verifier,
    load_signer,
    open_checkpoint,
    sign_checkpoint,
)

__all__ = ["SOURCES", "AuditStore", "HistoryPage", "ProofUnavailable", "StorageError", "open_store"]

SCHEMA_VERSION = 2
SOURCES = ("context", "memory", "mixed", "undetermined")
_ADVISORY_KEY = 0x6D6E656D6F  # "mnemo": serialises schema changes between replicas
_NID_LEVEL = 1 << 48  # node id = level * 2**48 + index
_SQLITE_CACHE_KB = 64 * 1024


class StorageError(MnemoscopeError):
    """The database cannot be opened or written."""


class ProofUnavailable(StorageError):
    """No proof can be given (unknown id, sizes out of range, no checkpoint covering it yet)."""


@dataclass(frozen=True)
class HistoryPage:
    """One page of history, newest first; pass ``next_before_seq`` as ``before_seq`` for the next."""

    items: list[dict[str, Any]]
    next_before_seq: int | None


def _ddl(pg: bool) -> list[str]:
    blob = "BYTEA" if pg else "BLOB"
    big = "BIGINT" if pg else "INTEGER"
    real = "DOUBLE PRECISION" if pg else "REAL"
    return [
        "CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)",
        f"""CREATE TABLE IF NOT EXISTS audits (
            seq {big} PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            created_at {real} NOT NULL,
            source TEXT,
            memory_flag INTEGER,
            latency_ms {real},
            content TEXT,
            leaf_hash {blob} NOT NULL,
            prev_hash {blob} NOT NULL,
            entry_hash {blob} NOT NULL)""",
        f"""CREATE TABLE IF NOT EXISTS checkpoints (
            tree_size {big} PRIMARY KEY,
            root {blob} NOT NULL,
            head {blob} NOT NULL,
            created_at {real} NOT NULL)""",
        f"CREATE TABLE IF NOT EXISTS nodes (nid {big} PRIMARY KEY, hash {blob} NOT NULL)",
        f"""CREATE TABLE IF NOT EXISTS log_state (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            tree_size {big} NOT NULL,
            head {blob} NOT NULL,
            compact {blob} NOT NULL,
            n_context {big} NOT NULL, n_memory {big} NOT NULL, n_mixed {big} NOT NULL,
            n_undetermined {big} NOT NULL, n_memory_flag {big} NOT NULL, n_anomaly {big} NOT NULL)""",
        f"""CREATE TABLE IF NOT EXISTS log_keys (
            verifier TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            first_tree_size {big} NOT NULL,
            added_at {real} NOT NULL,
            retired_at {real},
            retired_tree_size {big})""",
    ]


_INDEXES = [
    "CREATE INDEX IF NOT EXISTS audits_created ON audits (created_at)",
    "CREATE INDEX IF NOT EXISTS audits_source ON audits (source, seq)",
    "CREATE INDEX IF NOT EXISTS audits_memory_flag ON audits (memory_flag, seq)",
]


def _source_of(rec: dict[str, Any], legacy_memorized: bool | None = None) -> tuple[str, bool]:
    """(source, memory_flag) of a record; records from before the verdict fall back to RePCS."""
    src = rec.get("source")
    if src is None:
        mem = legacy_memorized
        if mem is None:
            mem = bool((rec.get("repcs") or {}).get("memorized", rec.get("memorized", False)))
        src = "memory" if mem else "undetermined"
    if src not in SOURCES:
        raise StorageError(
            f"record {rec.get('id')!r}: field 'source' is {src!r}; expected one of {', '.join(SOURCES)}"
        )
    flag = rec.get("memory_flag")
    if flag is None:
        flag = src == "memory"
    return str(src), bool(flag)


class AuditStore:
    """Append-only audit log with a hash chain and an RFC 9162 Merkle tree (see the module doc).

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
        signer: Signer | None = None,
        origin: str | None = None,
    ):
        self._conn = conn
        self._pg = pg
        self.url = url
        self.readonly = readonly
        self.checkpoint_every = max(1, int(checkpoint_every))
        self.signer = signer
        self._lock = threading.Lock()
        self._lock_file = lock_file
        self._q = "%s" if pg else "?"
        self._legacy_cols = False
        self.schema_version = 0
        self.origin = ""
        with self._lock:
            if readonly:  # no DDL: a read-only view never creates or changes anything
                try:
                    self._exec("SELECT 1 FROM audits LIMIT 1").fetchone()
                except Exception as e:
                    raise StorageError(f"{url} is not an audit database ({e})") from e
                self._read_meta()
                self._end_read()
                return
            self._setup(origin)

    # -- low level ---------------------------------------------------------------------------------

    def _sql(self, s: str) -> str:
        return s.replace("?", self._q)

    def _exec(self, s: str, params: Sequence[Any] = ()) -> Any:
        cur = self._conn.cursor()
        cur.execute(self._sql(s), tuple(params))
        return cur

    def _many(self, s: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            self._conn.cursor().executemany(self._sql(s), rows)

    @contextlib.contextmanager
    def _tx(self) -> Iterator[None]:
        """One write transaction (SQLite: BEGIN IMMEDIATE; PostgreSQL: BEGIN ... COMMIT)."""
        if self._pg:
            with self._conn.transaction():
                yield
            return
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            with contextlib.suppress(Exception):
                self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def _end_read(self) -> None:
        # PostgreSQL connections run in autocommit, SQLite ones with isolation_level=None:
        # a read never leaves a transaction open (no snapshot held, nothing blocks vacuum).
        return

    def _reconnect_if_broken(self) -> None:
        if not self._pg or not (self._conn.closed or getattr(self._conn, "broken", False)):
            return
        import psycopg

        with contextlib.suppress(Exception):
            self._conn.close()
        try:
            self._conn = psycopg.connect(self.url, autocommit=True)
        except Exception as e:
            raise StorageError(f"the database is unavailable: cannot reconnect ({_short(e)})") from e
        if self.readonly:
            self._conn.read_only = True

    def _read(self, fn: Any) -> Any:
        """Run a read under the lock; on PostgreSQL a dropped connection is re-opened once."""
        with self._lock:
            self._reconnect_if_broken()
            try:
                return fn()
            except StorageError:
                raise
            except Exception as e:
                if not self._pg or not _is_connection_error(e):
                    raise
            self._reconnect_if_broken()
            try:
                return fn()
            except Exception as e:
                raise StorageError(f"the database is unavailable: {_short(e)}") from e

    @staticmethod
    def _b(v: Any) -> bytes:
        return bytes(v) if v is not None else b""

    def _check_writable(self) -> None:
        if self.readonly:
            raise StorageError("this store was opened read-only")

    def _columns(self, table: str) -> set[str]:
        if self._pg:
            rows = self._exec(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
                "AND table_schema = current_schema()",
                (table,),
            ).fetchall()
        else:
            rows = [(r[1],) for r in self._exec(f"PRAGMA table_info({table})").fetchall()]
        return {str(r[0]) for r in rows}

    def _has_table(self, table: str) -> bool:
        if self._pg:
            row = self._exec("SELECT to_regclass(?)", (table,)).fetchone()
            return row is not None and row[0] is not None
        row = self._exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone()
        return row is not None

    def _read_meta(self) -> None:
        meta: dict[str, str] = {}
        if self._has_table("meta"):
            meta = {str(k): str(v) for k, v in self._exec("SELECT k, v FROM meta").fetchall()}
        self.schema_version = int(meta.get("schema_version", "1"))
        self.origin = meta.get("origin", "")
        self._legacy_cols = "anomaly_flag" in self._columns("audits")
        self._cp_cols = self._columns("checkpoints")

    # -- schema and migration ----------------------------------------------------------------------

    def _setup(self, origin: str | None) -> None:
        with self._tx():
            if self._pg:  # two replicas starting together must not race on DDL
                self._exec("SELECT pg_advisory_xact_lock(?)", (_ADVISORY_KEY,))
            legacy = self._has_table("audits") and not self._has_table("log_state")
            for stmt in _ddl(self._pg):
                self._exec(stmt)
            for col, typ in (("source", "TEXT"), ("memory_flag", "INTEGER")):
                if col not in self._columns("audits"):
                    self._exec(f"ALTER TABLE audits ADD COLUMN {col} {typ}")
            cp_cols = self._columns("checkpoints")
            for col, typ in (("note", "TEXT"), ("compact", "BYTEA" if self._pg else "BLOB")):
                if col not in cp_cols:
                    self._exec(f"ALTER TABLE checkpoints ADD COLUMN {col} {typ}")
            for stmt in _INDEXES:
                self._exec(stmt)
            if self._exec("SELECT 1 FROM meta WHERE k = 'origin'").fetchone() is None:
                name = origin or f"mnemoscope.local/log/{uuid.uuid4().hex[:16]}"
                self._exec("INSERT INTO meta (k, v) VALUES ('origin', ?)", (name,))
            have_state = self._exec("SELECT 1 FROM log_state WHERE id = 1").fetchone() is not None
            if not have_state:
                self._build_state(legacy)
            self._exec("DELETE FROM meta WHERE k = 'schema_version'")
            self._exec("INSERT INTO meta (k, v) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            self._read_meta()
            if self.signer is not None:
                self._record_key(self.signer)

    def _build_state(self, legacy: bool) -> None:
        """Fill the state (and, for an old log, ``source``/``memory_flag`` and the nodes) in one pass."""
        cr = CompactRange()
        counts = dict.fromkeys(SOURCES, 0)
        n_flag = n_anom = 0
        head = GENESIS
        last = 0
        cols = self._columns("audits")
        mem_col = "memorized" if "memorized" in cols else "0"
        anom_col = "anomaly_flag" if "anomaly_flag" in cols else "0"
        while True:
            rows = self._exec(
                f"SELECT seq, content, leaf_hash, entry_hash, {mem_col}, {anom_col}, source, memory_flag "
                "FROM audits WHERE seq > ? ORDER BY seq LIMIT 5000",
                (last,),
            ).fetchall()
            if not rows:
                break
            nodes: list[tuple[int, bytes]] = []
            updates: list[tuple[str, int, int]] = []
            for seq, content, lh, eh, mem, anom, src, flag in rows:
                if int(seq) != cr.size + 1:
                    raise StorageError(
                        f"cannot migrate {self.url}: seq {cr.size + 1} is missing (run mnemoscope log verify)"
                    )
                if src is None:
                    rec = json.loads(content) if content is not None else {}
                    src, fl = _source_of(rec, bool(mem) if content is None else None)
                    flag = int(fl)
                    updates.append((src, flag, int(seq)))
                counts[str(src)] += 1
                n_flag += int(bool(flag))
                n_anom += int(bool(anom))
                for level, idx, h in cr.append(self._b(lh)):
                    nodes.append((level * _NID_LEVEL + idx, h))
                head = self._b(eh)
            self._many("UPDATE audits SET source = ?, memory_flag = ? WHERE seq = ?", updates)
            self._many("INSERT INTO nodes (nid, hash) VALUES (?, ?)", nodes)
            last = int(rows[-1][0])
        self._exec(
            "INSERT INTO log_state (id, tree_size, head, compact, n_context, n_memory, n_mixed, n_undetermined, "
            "n_memory_flag, n_anomaly) VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (cr.size, head, cr.to_bytes(), *(counts[s] for s in SOURCES), n_flag, n_anom),
        )

    def _record_key(self, signer: Signer) -> None:
        """Record the signing key; a new key retires the previous ones at the current size (rotation)."""
        v = str(signer.verifier)
        if self._exec("SELECT 1 FROM log_keys WHERE verifier = ?", (v,)).fetchone() is not None:
            return
        size = int(self._exec("SELECT tree_size FROM log_state WHERE id = 1").fetchone()[0])
        now = time.time()
        self._exec(
            "UPDATE log_keys SET retired_at = ?, retired_tree_size = ? WHERE retired_at IS NULL", (now, size)
        )
        self._exec(
            "INSERT INTO log_keys (verifier, name, first_tree_size, added_at) VALUES (?, ?, ?, ?)",
            (v, signer.name, size, now),
        )

    # -- writing -----------------------------------------------------------------------------------

    def _state_for_update(self) -> tuple[int, bytes, CompactRange, list[int]]:
        row = self._exec(
            "SELECT tree_size, head, compact, n_context, n_memory, n_mixed, n_undetermined, n_memory_flag, "
            "n_anomaly FROM log_state WHERE id = 1" + (" FOR UPDATE" if self._pg else "")
        ).fetchone()
        if row is None:
            raise StorageError("the log has no state row (was it created by an older mnemoscope?)")
        size = int(row[0])
        return (
            size,
            self._b(row[1]),
            CompactRange.from_bytes(size, self._b(row[2])),
            [int(x) for x in row[3:]],
        )

    def _checkpoint_row(self, cr: CompactRange, head: bytes, now: float) -> tuple[Any, ...]:
        root = cr.root()
        note = None if self.signer is None else sign_checkpoint(self.signer, self.origin, cr.size, root, head)
        return (cr.size, root, head, now, note, cr.to_bytes())

    def append(self, records: Sequence[dict[str, Any]]) -> list[int]:
        """Store audits in one transaction (durable when this returns); returns their ``seq``.

        Each record needs ``id`` and ``created_at``; ``source`` (one of :data:`SOURCES`,
        default ``undetermined``), ``memory_flag`` (default ``source == "memory"``) and
        ``latency_ms`` are indexed; the whole dict is the hashed content.
        """
        self._check_writable()
        if not records:
            return []
        prepared = []
        for i, rec in enumerate(records):
            for key in ("id", "created_at"):
                if key not in rec:
                    raise StorageError(f"record {i} (id {rec.get('id')!r}): field {key!r} is missing")
            try:
                data = canonical(rec)
                created = float(rec["created_at"])
            except (TypeError, ValueError) as e:
                raise StorageError(f"record {rec.get('id')!r}: not storable as canonical JSON ({e})") from e
            src, flag = _source_of(rec)
            crm = rec.get("crm") if isinstance(rec.get("crm"), dict) else {}
            anomaly = bool(rec.get("anomaly_flag", (crm or {}).get("anomaly_flag", False)))
            prepared.append((rec, data, created, src, flag, anomaly))
        with self._lock:
            self._reconnect_if_broken()
            try:
                with self._tx():
                    return self._append_locked(prepared)
            except StorageError:
                raise
            except Exception as e:
                text = str(e)
                if "UNIQUE" in text.upper() or "duplicate key" in text:
                    raise StorageError(f"an audit with one of these ids already exists ({_short(e)})") from e
                raise StorageError(f"could not store audits: {_short(e)}") from e

    def _append_locked(self, prepared: list[tuple[Any, ...]]) -> list[int]:
        _, prev, cr, counters = self._state_for_update()
        now = time.time()
        rows: list[tuple[Any, ...]] = []
        nodes: list[tuple[int, bytes]] = []
        cps: list[tuple[Any, ...]] = []
        seqs = []
        for rec, data, created, src, flag, anomaly in prepared:
            seq = cr.size + 1
            lh = leaf_hash_bytes(data)
            eh = entry_hash(prev, lh, seq)
            row: tuple[Any, ...] = (
                seq, str(rec["id"]), created, src, int(flag), rec.get("latency_ms"),
                data.decode("utf-8"), lh, prev, eh,
            )  # fmt: skip
            if self._legacy_cols:
                row = (*row, int(anomaly), int(src == "memory"))
            rows.append(row)
            for level, idx, h in cr.append(lh):
                nodes.append((level * _NID_LEVEL + idx, h))
            counters[SOURCES.index(src)] += 1
            counters[4] += int(flag)
            counters[5] += int(anomaly)
            seqs.append(seq)
            prev = eh
            if seq % self.checkpoint_every == 0:
                cps.append(self._checkpoint_row(cr, eh, now))
        cols = (
            "seq, id, created_at, source, memory_flag, latency_ms, content, leaf_hash, prev_hash, entry_hash"
        )
        if self._legacy_cols:
            cols += ", anomaly_flag, memorized"
        marks = ", ".join("?" * len(rows[0]))
        self._many(f"INSERT INTO audits ({cols}) VALUES ({marks})", rows)
        self._many("INSERT INTO nodes (nid, hash) VALUES (?, ?)", nodes)
        self._many(
            "INSERT INTO checkpoints (tree_size, root, head, created_at, note, compact) VALUES (?, ?, ?, ?, ?, ?)",
            cps,
        )
        self._exec(
            "UPDATE log_state SET tree_size = ?, head = ?, compact = ?, n_context = ?, n_memory = ?, "
            "n_mixed = ?, n_undetermined = ?, n_memory_flag = ?, n_anomaly = ? WHERE id = 1",
            (cr.size, prev, cr.to_bytes(), *counters),
        )
        return seqs

    def checkpoint(self) -> Checkpoint | None:
        """Write a checkpoint at the current head now (e.g. on shutdown); ``None`` if empty or present.

        Taken under the same row lock as appends, from the committed state: a replica can never
        write a checkpoint for a tree it has not seen.
        """
        self._check_writable()
        with self._lock:
            self._reconnect_if_broken()
            try:
                with self._tx():
                    size, head, cr, _ = self._state_for_update()
                    if size == 0:
                        return None
                    if self._exec("SELECT 1 FROM checkpoints WHERE tree_size = ?", (size,)).fetchone():
                        return None
                    row = self._checkpoint_row(cr, head, time.time())
                    self._exec(
                        "INSERT INTO checkpoints (tree_size, root, head, created_at, note, compact) "
                        "VALUES (?, ?, ?, ?, ?, ?)",
                        row,
                    )
            except StorageError:
                raise
            except Exception as e:
                raise StorageError(f"could not write a checkpoint: {_short(e)}") from e
        return Checkpoint(*row)

    def prune(self, older_than: float) -> int:
        """Retention: drop the content of audits created before ``older_than`` (epoch seconds).

        Hashes stay, so the chain and the checkpoints still verify.
        """
        self._check_writable()
        with self._lock:
            self._reconnect_if_broken()
            with self._tx():
                cur = self._exec(
                    "UPDATE audits SET content = NULL WHERE created_at < ? AND content IS NOT NULL",
                    (older_than,),
                )
            return int(cur.rowcount or 0)

    # -- reading -----------------------------------------------------------------------------------

    def _need_v2(self, what: str) -> None:
        if self.schema_version < SCHEMA_VERSION:
            raise StorageError(
                f"{what} needs the current log schema; {self.url} has schema {self.schema_version}: "
                "open it once for writing (e.g. start the server on it) to migrate it"
            )

    @staticmethod
    def _item(content: Any, seq: Any, rid: Any, created: Any) -> dict[str, Any]:
        if content is None:
            return {"id": rid, "seq": int(seq), "created_at": created, "pruned": True}
        d: dict[str, Any] = json.loads(content)
        d["seq"] = int(seq)
        return d

    def get(self, audit_id: str) -> dict[str, Any] | None:
        row = self._read(
            lambda: self._exec(
                "SELECT content, seq, id, created_at FROM audits WHERE id = ?", (audit_id,)
            ).fetchone()
        )
        return None if row is None else self._item(*row)

    def history(
        self,
        *,
        limit: int = 50,
        before_seq: int | None = None,
        source: str | None = None,
        memory_flag: bool | None = None,
        since: float | None = None,
        until: float | None = None,
    ) -> HistoryPage:
        """Newest first, keyset-paginated (``seq < before_seq``): the same cost at any depth.

        Filters: ``source`` (one of :data:`SOURCES`), ``memory_flag``, ``since``/``until``
        (``created_at``, epoch seconds, inclusive).
        """
        self._need_v2("history")
        if source is not None and source not in SOURCES:
            raise StorageError(f"source {source!r}: expected one of {', '.join(SOURCES)}")
        limit = max(1, int(limit))
        where: list[str] = []
        params: list[Any] = []
        for cond, val in (
            ("seq < ?", None if before_seq is None else int(before_seq)),
            ("source = ?", source),
            ("memory_flag = ?", None if memory_flag is None else int(memory_flag)),
            ("created_at >= ?", since),
            ("created_at <= ?", until),
        ):
            if val is not None:
                where.append(cond)
                params.append(val)
        w = (" WHERE " + " AND ".join(where)) if where else ""
        rows = self._read(
            lambda: self._exec(
                f"SELECT content, seq, id, created_at FROM audits{w} ORDER BY seq DESC LIMIT ?",
                [*params, limit + 1],
            ).fetchall()
        )
        more = len(rows) > limit
        items = [self._item(*r) for r in rows[:limit]]
        return HistoryPage(items, int(items[-1]["seq"]) if more and items else None)

    def counts(self, recent: int = 1000) -> dict[str, Any]:
        """Counts by source and of memory flags (kept in the state row: O(1)) and recent latencies."""
        self._need_v2("counts")

        def q() -> Any:
            row = self._exec(
                "SELECT tree_size, n_context, n_memory, n_mixed, n_undetermined, n_memory_flag, n_anomaly "
                "FROM log_state WHERE id = 1"
            ).fetchone()
            lat = self._exec(
                "SELECT latency_ms FROM audits WHERE seq > ? AND latency_ms IS NOT NULL",
                (int(row[0]) - int(recent),),
            ).fetchall()
            return row, lat

        row, lat = self._read(q)
        by_source = dict(zip(SOURCES, (int(x) for x in row[1:5]), strict=True))
        return {
            "n": int(row[0]),
            "by_source": by_source,
            "n_memory_flag": int(row[5]),
            "n_memorized": by_source["memory"],
            "n_anomalies": int(row[6]),
            "recent_latency_ms": [float(r[0]) for r in lat],
        }

    def _latest_checkpoint(self, at_least: int = 0) -> Checkpoint | None:
        note = "note" if "note" in self._cp_cols else "NULL"
        comp = "compact" if "compact" in self._cp_cols else "NULL"
        row = self._exec(
            f"SELECT tree_size, root, head, created_at, {note}, {comp} FROM checkpoints "
            "WHERE tree_size >= ? ORDER BY tree_size DESC LIMIT 1",
            (at_least,),
        ).fetchone()
        return None if row is None else self._cp(row)

    def _cp(self, r: Sequence[Any]) -> Checkpoint:
        return Checkpoint(
            int(r[0]),
            self._b(r[1]),
            self._b(r[2]),
            float(r[3]),
            r[4],
            None if r[5] is None else self._b(r[5]),
        )

    def head(self) -> dict[str, Any]:
        """The chain head and the latest checkpoint (with its signed note): publish them to anchor the log."""

        def q() -> Any:
            row = self._exec("SELECT seq, entry_hash FROM audits ORDER BY seq DESC LIMIT 1").fetchone()
            return row, self._latest_checkpoint()

        row, cp = self._read(q)
        seq, h = (0, GENESIS) if row is None else (int(row[0]), self._b(row[1]))
        return {
            "seq": seq,
            "entry_hash": h.hex(),
            "origin": self.origin or None,
            "last_checkpoint": None
            if cp is None
            else {"tree_size": cp.tree_size, "root": cp.root.hex(), "checkpoint": cp.note},
        }

    def entries(self, batch: int = 5000, after: int = 0) -> Iterator[LogEntry]:
        """Every log entry with ``seq > after`` in order (read in pages, so memory stays bounded)."""
        last = after
        while True:
            rows = self._read(
                lambda last=last: self._exec(
                    "SELECT seq, id, content, leaf_hash, prev_hash, entry_hash FROM audits "
                    "WHERE seq > ? ORDER BY seq LIMIT ?",
                    (last, batch),
                ).fetchall()
            )
            if not rows:
                return
            for seq, rid, content, lh, ph, eh in rows:
                yield LogEntry(
                    int(seq),
                    str(rid),
                    None,
                    self._b(lh),
                    self._b(ph),
                    self._b(eh),
                    None if content is None else content.encode("utf-8"),
                )
            last = int(rows[-1][0])

    def iter_checkpoints(self, after: int = 0, batch: int = 5000) -> Iterator[Checkpoint]:
        note = "note" if "note" in self._cp_cols else "NULL"
        comp = "compact" if "compact" in self._cp_cols else "NULL"
        last = after
        while True:
            rows = self._read(
                lambda last=last: self._exec(
                    f"SELECT tree_size, root, head, created_at, {note}, {comp} FROM checkpoints "
                    "WHERE tree_size > ? ORDER BY tree_size LIMIT ?",
                    (last, batch),
                ).fetchall()
            )
            if not rows:
                return
            yield from (self._cp(r) for r in rows)
            last = int(rows[-1][0])

    def checkpoints(self) -> list[Checkpoint]:
        return list(self.iter_checkpoints())

    def keys(self) -> list[dict[str, Any]]:
        """Signing keys recorded in the log, oldest first (rotations retire the previous key)."""
        if not self._has_table_ro("log_keys"):
            return []
        rows = self._read(
            lambda: self._exec(
                "SELECT verifier, name, first_tree_size, added_at, retired_at, retired_tree_size FROM log_keys "
                "ORDER BY added_at"
            ).fetchall()
        )
        return [
            {
                "verifier": r[0],
                "name": r[1],
                "first_tree_size": int(r[2]),
                "added_at": float(r[3]),
                "retired_at": r[4],
                "retired_tree_size": r[5],
            }
            for r in rows
        ]

    def _has_table_ro(self, table: str) -> bool:
        return bool(self._read(lambda: self._has_table(table)))

    def verify(
        self,
        *,
        since: int | str | Path | None = None,
        trusted: Sequence[Verifier] | None = None,
        require_signed: bool = False,
    ) -> VerifyReport:
        """Stream the log once and check it (:func:`~mnemoscope.server.ledger.verify_log`).

        ``since``: a checkpoint tree size (or a saved checkpoint note file, text) to resume
        after; only later entries are read. ``trusted``: verifier keys for the signed
        checkpoints; ``None`` uses the keys recorded in the log (which tamper-evidence then
        rests on: pass the operator's published key to rule out a rewritten key table).
        """
        keys = list(trusted) if trusted is not None else [Verifier.parse(k["verifier"]) for k in self.keys()]
        start = None if since is None else self._start(since, keys)
        return verify_log(
            self.entries(after=0 if start is None else start.tree_size),
            self.iter_checkpoints(after=0 if start is None else start.tree_size),
            trusted=keys,
            origin=self.origin or None,
            start=start,
            require_signed=require_signed,
        )

    def _start(self, since: int | str | Path, keys: Sequence[Verifier]) -> VerifyStart:
        note_text: str | None = None
        if isinstance(since, Path) or (isinstance(since, str) and not since.strip().isdigit()):
            try:
                note_text = Path(since).read_text(encoding="utf-8")
            except OSError as e:
                raise StorageError(
                    f"--since {since}: not a tree size and not a readable checkpoint file ({e})"
                ) from e
            try:
                size = open_checkpoint(note_text, keys).tree_size
            except NoteError as e:
                raise StorageError(f"--since {since}: {e}") from e
        else:
            size = int(since)
        cp = self._read(lambda: self._latest_checkpoint_at(size))
        if cp is None:
            raise StorageError(f"no checkpoint at tree size {size} in {self.url}")
        if note_text is not None:
            opened = open_checkpoint(note_text, None)
            if opened.root != cp.root:
                raise StorageError(
                    f"the log's checkpoint at tree size {size} differs from the saved one: the log was rewritten"
                )
        if cp.compact is None:
            raise StorageError(
                f"the checkpoint at tree size {size} predates resumable verify (no compact range)"
            )
        cr = CompactRange.from_bytes(size, cp.compact)
        if cr.root() != cp.root:
            raise StorageError(f"the checkpoint at tree size {size} does not match its own compact range")
        if cp.note is not None and keys:
            try:
                open_checkpoint(cp.note, keys)
            except NoteError as e:
                raise StorageError(f"the checkpoint at tree size {size}: {e}") from e
        return VerifyStart(size, cp.head, cr)

    def _latest_checkpoint_at(self, size: int) -> Checkpoint | None:
        note = "note" if "note" in self._cp_cols else "NULL"
        comp = "compact" if "compact" in self._cp_cols else "NULL"
        row = self._exec(
            f"SELECT tree_size, root, head, created_at, {note}, {comp} FROM checkpoints WHERE tree_size = ?",
            (size,),
        ).fetchone()
        return None if row is None else self._cp(row)

    # -- proofs ------------------------------------------------------------------------------------

    def _fetch_nodes(self, want: Iterable[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
        want = list(want)
        leaves = [i for lvl, i in want if lvl == 0]
        inner = [lvl * _NID_LEVEL + i for lvl, i in want if lvl > 0]
        out: dict[tuple[int, int], bytes] = {}
        if leaves:
            marks = ", ".join("?" * len(leaves))
            for seq, lh in self._exec(
                f"SELECT seq, leaf_hash FROM audits WHERE seq IN ({marks})", [i + 1 for i in leaves]
            ).fetchall():
                out[(0, int(seq) - 1)] = self._b(lh)
        if inner:
            marks = ", ".join("?" * len(inner))
            for nid, h in self._exec(f"SELECT nid, hash FROM nodes WHERE nid IN ({marks})", inner).fetchall():
                out[(int(nid) // _NID_LEVEL, int(nid) % _NID_LEVEL)] = self._b(h)
        return out

    def _covering_checkpoint(self, seq: int) -> Checkpoint:
        cp = self._read(lambda: self._latest_checkpoint(seq))
        if cp is None and not self.readonly:
            self.checkpoint()
            cp = self._read(lambda: self._latest_checkpoint(seq))
        if cp is None:
            raise ProofUnavailable(
                f"no checkpoint covers seq {seq} yet; the next one is written on the next append"
            )
        return cp

    def prove(self, audit_id: str) -> dict[str, Any]:
        """RFC 9162 inclusion proof of an audit against the latest (signed) checkpoint.

        A read-write store writes a checkpoint first when none covers the audit yet.

        Raises:
            ProofUnavailable: unknown id, or (read-only) no checkpoint covers it yet.
        """
        self._need_v2("an inclusion proof")
        row = self._read(
            lambda: self._exec(
                "SELECT seq, leaf_hash, content FROM audits WHERE id = ?", (audit_id,)
            ).fetchone()
        )
        if row is None:
            raise ProofUnavailable(f"no audit with id {audit_id!r}")
        seq, lh, content = int(row[0]), self._b(row[1]), row[2]
        cp = self._covering_checkpoint(seq)
        try:
            path = self._read(lambda: inclusion_proof(seq - 1, cp.tree_size, self._fetch_nodes))
        except ProofError as e:
            raise StorageError(f"cannot build the proof: {e}") from e
        return {
            "kind": "inclusion",
            "log": self.origin,
            "id": audit_id,
            "seq": seq,
            "leaf_index": seq - 1,
            "tree_size": cp.tree_size,
            "leaf_hash": _b64(lh),
            "root": _b64(cp.root),
            "inclusion_path": [_b64(h) for h in path],
            "checkpoint": cp.note,
            "record": None if content is None else json.loads(content),
        }

    def root_at(self, size: int) -> bytes:
        """The tree hash of the first ``size`` leaves (from stored nodes, O(log n))."""
        pieces = perfect_pieces(0, size)
        nodes = self._read(lambda: self._fetch_nodes(pieces))
        try:
            return root_from_range([nodes[p] for p in pieces])
        except KeyError as e:
            raise ProofUnavailable(f"the log has fewer than {size} entries") from e

    def consistency(self, first: int, second: int | None = None) -> dict[str, Any]:
        """RFC 9162 consistency proof that the tree of size ``first`` is a prefix of that of ``second``
        (default: the latest checkpoint). Signed notes are included where the sizes are checkpoints."""
        self._need_v2("a consistency proof")
        latest = self._read(lambda: self._latest_checkpoint())
        if second is None:
            if latest is None:
                raise ProofUnavailable("the log has no checkpoint yet")
            second = latest.tree_size
        size = int(
            self._read(lambda: self._exec("SELECT tree_size FROM log_state WHERE id = 1").fetchone()[0])
        )
        if not 0 < first <= second or second > size:
            raise ProofUnavailable(
                f"no consistency proof from size {first} to size {second} (the log has {size})"
            )
        proof = self._read(lambda: consistency_proof(first, second, self._fetch_nodes))
        notes = {}
        for s in (first, second):
            cp = self._read(lambda s=s: self._latest_checkpoint_at(s))
            notes[s] = None if cp is None else cp.note
        return {
            "kind": "consistency",
            "log": self.origin,
            "first": first,
            "second": second,
            "first_root": _b64(self.root_at(first)),
            "second_root": _b64(self.root_at(second)),
            "consistency_path": [_b64(h) for h in proof],
            "first_checkpoint": notes[first],
            "second_checkpoint": notes[second],
        }

    def ping(self) -> bool:
        self._read(lambda: self._exec("SELECT 1").fetchone())
        return True

    def close(self) -> None:
        with self._lock:
            with contextlib.suppress(Exception):
                self._conn.close()
            if self._lock_file is not None:
                with contextlib.suppress(Exception):
                    self._lock_file.close()
                self._lock_file = None


def _b64(h: bytes) -> str:
    return base64.b64encode(h).decode()


def _short(e: BaseException) -> str:
    return str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__


def _is_connection_error(e: BaseException) -> bool:
    try:
        import psycopg
    except ImportError:  # pragma: no cover
        return False
    return isinstance(e, (psycopg.OperationalError, psycopg.InterfaceError))


def _is_pg(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


def _signer_of(signing_key: str | Path | Signer | None) -> Signer | None:
    if signing_key is None or isinstance(signing_key, Signer):
        return signing_key
    try:
        return load_signer(signing_key)
    except NoteError as e:
        raise StorageError(str(e)) from e


def open_store(
    url: str | Path,
    *,
    readonly: bool = False,
    checkpoint_every: int = 64,
    signing_key: str | Path | Signer | None = None,
    origin: str | None = None,
) -> AuditStore:
    """Open an audit store from a SQLite path (``audits.db``, ``sqlite:///path``) or a PostgreSQL URL.

    ``signing_key``: a signer key (file path or :class:`~mnemoscope.server.signing.Signer`)
    that signs every checkpoint; a key not seen before is recorded as a rotation. ``origin``
    names a new log in its checkpoints (default ``mnemoscope.local/log/<random>``).

    Raises:
        StorageError: the database cannot be opened, or another process holds the SQLite writer lock.
    """
    signer = _signer_of(signing_key)
    s = str(url)
    if _is_pg(s):
        try:
            import psycopg
        except ImportError as e:
            raise StorageError("PostgreSQL storage needs psycopg (pip install 'psycopg[binary]')") from e
        try:
            pconn: Any = psycopg.connect(s, autocommit=True)
        except Exception as e:
            raise StorageError(f"cannot connect to {s.split('@')[-1]}: {_short(e)}") from e
        if readonly:
            pconn.read_only = True
        try:
            return AuditStore(
                pconn,
                pg=True,
                url=s,
                checkpoint_every=checkpoint_every,
                readonly=readonly,
                signer=signer,
                origin=origin,
            )
        except StorageError:
            pconn.close()
            raise
        except Exception as e:
            pconn.close()
            raise StorageError(f"cannot open the audit log at {s.split('@')[-1]}: {_short(e)}") from e
    path = Path(s[len("sqlite:///") :] if s.startswith("sqlite:///") else s).expanduser()
    if readonly:
        if not path.is_file():
            raise StorageError(f"no audit database at {path}")
        conn = sqlite3.connect(
            f"file:{path}?mode=ro", uri=True, check_same_thread=False, isolation_level=None
        )
        conn.execute(f"PRAGMA cache_size=-{_SQLITE_CACHE_KB}")
        return AuditStore(conn, pg=False, url=str(path), checkpoint_every=checkpoint_every, readonly=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock_file = _take_writer_lock(path)
    try:
        conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=30)
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StorageError(f"{path}: could not switch to WAL mode (got {mode})")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute(f"PRAGMA cache_size=-{_SQLITE_CACHE_KB}")  # index pages stay hot at millions of rows
        return AuditStore(
            conn,
            pg=False,
            url=str(path),
            checkpoint_every=checkpoint_every,
            lock_file=lock_file,
            signer=signer,
            origin=origin,
        )
    except sqlite3.Error as e:
        lock_file.close()
        raise StorageError(f"cannot open {path}: {e}") from e
    except StorageError:
        lock_file.close()
        raise


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
