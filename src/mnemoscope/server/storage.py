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

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mnemoscope.server.ledger import (
    GENESIS,
    Checkpoint,
    canonical,
    entry_hash,
)
from mnemoscope.server.log_checks import LogChecks
from mnemoscope.server.log_schema import (
    NID_LEVEL,
    SOURCE_COLUMNS,
    SOURCES,
    ProofUnavailable,
    StorageError,
    short_error,
    source_of,
)
from mnemoscope.server.merkle import (
    CompactRange,
    leaf_hash_bytes,
)
from mnemoscope.server.signing import (
    NoteError,
    Signer,
    load_signer,
    sign_checkpoint,
)

__all__ = ["SOURCES", "AuditStore", "HistoryPage", "ProofUnavailable", "StorageError", "open_store"]

# The page cache of each connection. An append writes at the right edge of every B-tree (seq, the
# time-ordered ids of ledger.new_audit_id, the per-source indexes, the tree nodes): a few pages per
# tree, not whole indexes. The cache is also what a long-running server's memory grows by as the
# log grows, about 1 kB per logged request, until it is full: with 8 MB it was still filling at
# 10,000 proxy requests and was most of the proxy's RSS growth (issue 36); 2 MB (SQLite's own
# default size) is full after ~2,500, and appends to 1M audits cost the same as with 8 MB
# (docs/proxy.md "Memory"). It was 64 MB, then 8 MB.
_SQLITE_CACHE_KB = 2 * 1024


@dataclass(frozen=True)
class HistoryPage:
    """One page of history, newest first; pass ``next_before_seq`` as ``before_seq`` for the next."""

    items: list[dict[str, Any]]
    next_before_seq: int | None


class AuditStore(LogChecks):
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

    def _state_for_update(self) -> tuple[int, bytes, CompactRange, list[int]]:
        row = self._exec(
            f"SELECT tree_size, head, compact, {', '.join(SOURCE_COLUMNS)}, n_memory_flag, "
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
        default ``undetermined``), ``memory_flag`` (default: not flagged; for records without a
        source, RePCS memorized) and ``latency_ms`` are indexed; the whole dict is the hashed
        content.
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
            src, flag = source_of(rec)
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
                    raise StorageError(
                        f"an audit with one of these ids already exists ({short_error(e)})"
                    ) from e
                raise StorageError(f"could not store audits: {short_error(e)}") from e

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
                row = (*row, int(anomaly), int(flag))
            rows.append(row)
            for level, idx, h in cr.append(lh):
                nodes.append((level * NID_LEVEL + idx, h))
            counters[SOURCES.index(src)] += 1
            counters[len(SOURCES)] += int(flag)
            counters[len(SOURCES) + 1] += int(anomaly)
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
        # PostgreSQL: the four writes go out in one pipeline (one round trip, not four); an
        # error in any of them is raised when the pipeline syncs and the transaction rolls back
        with self._conn.pipeline() if self._pg else contextlib.nullcontext():
            self._many(f"INSERT INTO audits ({cols}) VALUES ({marks})", rows)
            self._many("INSERT INTO nodes (nid, hash) VALUES (?, ?)", nodes)
            self._many(
                "INSERT INTO checkpoints (tree_size, root, head, created_at, note, compact) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                cps,
            )
            self._exec(
                "UPDATE log_state SET tree_size = ?, head = ?, compact = ?, "
                + "".join(f"{c} = ?, " for c in SOURCE_COLUMNS)
                + "n_memory_flag = ?, n_anomaly = ? WHERE id = 1",
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
                raise StorageError(f"could not write a checkpoint: {short_error(e)}") from e
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

        # a read-only view of a log made before a source existed counts it as 0
        src_cols = ", ".join(c if c in self._state_cols else "0" for c in SOURCE_COLUMNS)

        def q() -> Any:
            row = self._exec(
                f"SELECT tree_size, {src_cols}, n_memory_flag, n_anomaly FROM log_state WHERE id = 1"
            ).fetchone()
            lat = self._exec(
                "SELECT latency_ms FROM audits WHERE seq > ? AND latency_ms IS NOT NULL",
                (int(row[0]) - int(recent),),
            ).fetchall()
            return row, lat

        row, lat = self._read(q)
        k = len(SOURCES)
        by_source = dict(zip(SOURCES, (int(x) for x in row[1 : 1 + k]), strict=True))
        return {
            "n": int(row[0]),
            "by_source": by_source,
            "n_memory_flag": int(row[1 + k]),
            "n_memorized": by_source["memory"],
            "n_anomalies": int(row[2 + k]),
            "recent_latency_ms": [float(r[0]) for r in lat],
        }

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
            raise StorageError(f"cannot connect to {s.split('@')[-1]}: {short_error(e)}") from e
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
            raise StorageError(f"cannot open the audit log at {s.split('@')[-1]}: {short_error(e)}") from e
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
        conn.execute(f"PRAGMA cache_size=-{_SQLITE_CACHE_KB}")
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
