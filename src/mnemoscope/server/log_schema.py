"""The audit log's schema and connection: tables, migration of older logs, transactions,
reconnecting to PostgreSQL, and the readers of entries and checkpoints that
:mod:`~mnemoscope.server.log_checks` and :mod:`~mnemoscope.server.storage` share (the design is
in the latter's module doc)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from mnemoscope.errors import MnemoscopeError
from mnemoscope.server.ledger import GENESIS, Checkpoint, LogEntry
from mnemoscope.server.merkle import CompactRange
from mnemoscope.server.signing import Signer

__all__ = [
    "ADVISORY_KEY",
    "NID_LEVEL",
    "SCHEMA_VERSION",
    "SOURCES",
    "SOURCE_COLUMNS",
    "LogBase",
    "ProofUnavailable",
    "StorageError",
    "ddl",
    "is_connection_error",
    "short_error",
    "source_of",
]

SCHEMA_VERSION = 2
SOURCES = ("context", "memory", "mixed", "undetermined", "unsupported")
#: the state row's counter column of each source (a log made before a source existed gets the column
#: on its next writable open: ``ALTER TABLE ... DEFAULT 0``; a read-only view reads it as 0)
SOURCE_COLUMNS = tuple(f"n_{s}" for s in SOURCES)
ADVISORY_KEY = 0x6D6E656D6F  # "mnemo": serialises schema changes between replicas
NID_LEVEL = 1 << 48  # node id = level * 2**48 + index


class StorageError(MnemoscopeError):
    """The database cannot be opened or written."""


class ProofUnavailable(StorageError):
    """No proof can be given (unknown id, sizes out of range, no checkpoint covering it yet)."""


def ddl(pg: bool) -> list[str]:
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
            n_undetermined {big} NOT NULL, n_memory_flag {big} NOT NULL, n_anomaly {big} NOT NULL,
            n_unsupported {big} NOT NULL DEFAULT 0)""",
        f"""CREATE TABLE IF NOT EXISTS log_keys (
            verifier TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            first_tree_size {big} NOT NULL,
            added_at {real} NOT NULL,
            retired_at {real},
            retired_tree_size {big})""",
    ]


INDEXES = [
    "CREATE INDEX IF NOT EXISTS audits_created ON audits (created_at)",
    "CREATE INDEX IF NOT EXISTS audits_source ON audits (source, seq)",
    "CREATE INDEX IF NOT EXISTS audits_memory_flag ON audits (memory_flag, seq)",
]


def source_of(rec: dict[str, Any], legacy_memorized: bool | None = None) -> tuple[str, bool]:
    """(source, memory_flag) as the record states them. Records from before the verdict (no
    ``source``) are indexed from what RePCS recorded (memorized: memory + flagged, else
    undetermined); a record with a source but no ``memory_flag`` is indexed as not flagged.
    Nothing is re-decided here: the verdict is the pipeline's."""
    src = rec.get("source")
    flag = rec.get("memory_flag")
    if src is None:
        mem = legacy_memorized
        if mem is None:
            mem = bool((rec.get("repcs") or {}).get("memorized", rec.get("memorized", False)))
        src = "memory" if mem else "undetermined"
        if flag is None:
            flag = mem
    if src not in SOURCES:
        raise StorageError(
            f"record {rec.get('id')!r}: field 'source' is {src!r}; expected one of {', '.join(SOURCES)}"
        )
    return str(src), bool(flag)


class LogBase:
    """The connection and schema half of :class:`~mnemoscope.server.storage.AuditStore`."""

    _conn: Any
    _lock: threading.Lock
    _pg: bool
    url: str
    readonly: bool
    signer: Signer | None
    schema_version: int
    origin: str
    _legacy_cols: bool
    _cp_cols: set[str]
    _state_cols: set[str]
    _q: str

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
            raise StorageError(f"the database is unavailable: cannot reconnect ({short_error(e)})") from e
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
                if not self._pg or not is_connection_error(e):
                    raise
            self._reconnect_if_broken()
            try:
                return fn()
            except Exception as e:
                raise StorageError(f"the database is unavailable: {short_error(e)}") from e

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
        self._state_cols = self._columns("log_state") if self._has_table("log_state") else set()

    def _need_v2(self, what: str) -> None:
        if self.schema_version < SCHEMA_VERSION:
            raise StorageError(
                f"{what} needs the current log schema; {self.url} has schema {self.schema_version}: "
                "open it once for writing (e.g. start the server on it) to migrate it"
            )

    def _setup(self, origin: str | None) -> None:
        with self._tx():
            if self._pg:  # two replicas starting together must not race on DDL
                self._exec("SELECT pg_advisory_xact_lock(?)", (ADVISORY_KEY,))
            legacy = self._has_table("audits") and not self._has_table("log_state")
            for stmt in ddl(self._pg):
                self._exec(stmt)
            for col, typ in (("source", "TEXT"), ("memory_flag", "INTEGER")):
                if col not in self._columns("audits"):
                    self._exec(f"ALTER TABLE audits ADD COLUMN {col} {typ}")
            state_cols = self._columns("log_state")
            for col in SOURCE_COLUMNS:  # a source added since the log was made (e.g. unsupported)
                if col not in state_cols:
                    self._exec(f"ALTER TABLE log_state ADD COLUMN {col} {'BIGINT' if self._pg else 'INTEGER'} "
                               "NOT NULL DEFAULT 0")  # fmt: skip
            cp_cols = self._columns("checkpoints")
            for col, typ in (("note", "TEXT"), ("compact", "BYTEA" if self._pg else "BLOB")):
                if col not in cp_cols:
                    self._exec(f"ALTER TABLE checkpoints ADD COLUMN {col} {typ}")
            for stmt in INDEXES:
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
                    src, fl = source_of(rec, bool(mem) if content is None else None)
                    flag = int(fl)
                    updates.append((src, flag, int(seq)))
                counts[str(src)] += 1
                n_flag += int(bool(flag))
                n_anom += int(bool(anom))
                for level, idx, h in cr.append(self._b(lh)):
                    nodes.append((level * NID_LEVEL + idx, h))
                head = self._b(eh)
            self._many("UPDATE audits SET source = ?, memory_flag = ? WHERE seq = ?", updates)
            self._many("INSERT INTO nodes (nid, hash) VALUES (?, ?)", nodes)
            last = int(rows[-1][0])
        self._exec(
            f"INSERT INTO log_state (id, tree_size, head, compact, {', '.join(SOURCE_COLUMNS)}, "
            f"n_memory_flag, n_anomaly) VALUES (1, ?, ?, ?, {', '.join('?' * len(SOURCES))}, ?, ?)",
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

    def _cp_select(self, prefix: str = "") -> str:
        """The columns :meth:`_cp` reads (NULL for those an older log lacks)."""
        note = f"{prefix}note" if "note" in self._cp_cols else "NULL"
        comp = f"{prefix}compact" if "compact" in self._cp_cols else "NULL"
        return f"{prefix}tree_size, {prefix}root, {prefix}head, {prefix}created_at, {note}, {comp}"

    def _latest_checkpoint(self, at_least: int = 0) -> Checkpoint | None:
        row = self._exec(
            f"SELECT {self._cp_select()} FROM checkpoints "
            "WHERE tree_size >= ? ORDER BY tree_size DESC LIMIT 1",
            (at_least,),
        ).fetchone()
        return None if row is None else self._cp(row)

    def _latest_checkpoint_at(self, size: int) -> Checkpoint | None:
        row = self._exec(
            f"SELECT {self._cp_select()} FROM checkpoints WHERE tree_size = ?",
            (size,),
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

    def entries(self, batch: int = 10000, after: int = 0) -> Iterator[LogEntry]:
        """Every log entry with ``seq > after`` in order (read in pages, so memory stays bounded).

        The next page is read on a helper thread while the caller works through the current one,
        so the database's work (PostgreSQL's backend, SQLite's page reads, both outside the GIL)
        overlaps the caller's hashing; at most two pages are held at a time.
        """

        def page(last: int) -> list[Any]:
            rows: list[Any] = self._read(
                lambda: self._exec(
                    "SELECT seq, id, content, leaf_hash, prev_hash, entry_hash FROM audits "
                    "WHERE seq > ? ORDER BY seq LIMIT ?",
                    (last, batch),
                ).fetchall()
            )
            return rows

        with ThreadPoolExecutor(1, thread_name_prefix="log-read") as ex:
            nxt: Future[list[Any]] | None = ex.submit(page, after)
            while nxt is not None:
                rows = nxt.result()
                nxt = ex.submit(page, int(rows[-1][0])) if len(rows) == batch else None
                for seq, rid, content, lh, ph, eh in rows:
                    yield LogEntry(
                        seq,
                        rid,
                        None,
                        lh if type(lh) is bytes else self._b(lh),
                        ph if type(ph) is bytes else self._b(ph),
                        eh if type(eh) is bytes else self._b(eh),
                        None if content is None else content.encode("utf-8"),
                    )

    def iter_checkpoints(self, after: int = 0, batch: int = 5000) -> Iterator[Checkpoint]:
        cols = self._cp_select()
        last = after
        while True:
            rows = self._read(
                lambda last=last: self._exec(
                    f"SELECT {cols} FROM checkpoints WHERE tree_size > ? ORDER BY tree_size LIMIT ?",
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


def short_error(e: BaseException) -> str:
    return str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__


def is_connection_error(e: BaseException) -> bool:
    try:
        import psycopg
    except ImportError:  # pragma: no cover
        return False
    return isinstance(e, (psycopg.OperationalError, psycopg.InterfaceError))
