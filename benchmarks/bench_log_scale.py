"""The audit log at scale (issue 26): build a log of N synthetic ~1.5 KB audits through the
storage API and measure what a service sees at 1k and at N.

Measured, on SQLite or PostgreSQL:

* per-append latency (p50/p99 of ``append()`` calls of ``--batch`` audits, each its own
  durable transaction) in a window of ``--window`` audits at 1k and at every decade up to N;
* open/restart time of a log of N audits;
* full verify time (one streaming pass) and ``--since`` the last checkpoint;
* inclusion proof time and size (oldest, middle, newest audits), consistency proof time;
* history page time (newest, oldest, filtered by source and by memory flag, by time);
* ``counts()`` time.

A *bare insert* baseline runs beside the log: the same records go, in the same batches and one
durable transaction per batch, into a plain table with the audits table's columns and indexes
(no chain, no tree, no state row; SQLite: a separate file with the same settings, PostgreSQL: a
table in the same schema), filled to the same size. In the measured windows a log append and a
bare insert alternate batch by batch, so both see the same machine load: the ratio log / bare
is the log's own overhead, and the bare insert's growth from 1k to N is the database's own
(B-tree depth, random-id index pages, WAL), a floor the log cannot go under.

Between the measurement windows the log is filled with ``--fill-batch`` audits per
``append()`` (the same code path, larger transactions) so a 1M-audit log builds in minutes;
the windows themselves use ``--batch``.

    OMP_NUM_THREADS=1 python benchmarks/bench_log_scale.py --db /tmp/scale.db --n 1000000 \\
        --out benchmarks/results/server/log-scale-sqlite.json
    OMP_NUM_THREADS=1 python benchmarks/bench_log_scale.py --db "$MNEMOSCOPE_TEST_PG_URL" --n 1000000 \\
        --out benchmarks/results/server/log-scale-postgres.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any

from mnemoscope.provenance import provenance
from mnemoscope.server.ledger import new_audit_id
from mnemoscope.server.signing import Signer
from mnemoscope.server.storage import SOURCES, open_store

WORDS = tuple(
    [
        "the",
        "of",
        "river",
        "town",
        "lies",
        "model",
        "answer",
        "context",
        "memory",
        "source",
        "token",
        "layer",
        "audit",
        "log",
        "tree",
        "hash",
    ]
)


IDS = "server"


def audit_id(i: int) -> str:
    """The server's ids (``server``: UUIDv7, time-ordered, from ``new_audit_id`` with the record's
    ``created_at`` as the clock and reproducible random bits), the uuid4-like random ids the
    server gave before (``random``: their unique index is written at random places), or plain
    sequential ones (``sequential``: always at the index's right edge)."""
    if IDS == "sequential":
        return f"bench-{i:09d}"
    digest = hashlib.md5(str(i).encode()).digest()
    if IDS == "server":
        return new_audit_id(ms=int(created_at(i) * 1000), rand=digest[:10])
    return digest.hex()


def created_at(i: int) -> float:
    return 1.7e9 + i * 0.01


def record(i: int, rng: random.Random) -> dict[str, Any]:
    text = " ".join(rng.choice(WORDS) for _ in range(180))  # ~1.2 KB of answer
    src = SOURCES[i % 4]
    return {
        "id": audit_id(i),
        "created_at": created_at(i),
        "source": src,
        "memory_flag": src == "memory",
        "p_memory": round(rng.random(), 6),
        "latency_ms": round(rng.uniform(5, 50), 3),
        "answer": text,
        "evidence": {"repcs_kl": round(rng.random(), 6), "crm_p": round(rng.random(), 6)},
        "model": {"name": "synthetic", "fingerprint": "0" * 16},
    }


class BareTable:
    """The baseline: the audits table's columns and indexes, plain INSERTs, no log."""

    def __init__(self, db: str, pg: bool):
        from mnemoscope.server.log_schema import INDEXES, ddl

        self.pg = pg
        create = next(d for d in ddl(pg) if "TABLE IF NOT EXISTS audits" in d)
        stmts = [create.replace(" audits ", " bare_audits ")] + [
            i.replace(" audits ", " bare_audits ").replace(
                "INDEX IF NOT EXISTS audits_", "INDEX IF NOT EXISTS bare_"
            )
            for i in INDEXES
        ]
        if pg:
            import psycopg

            self.conn: Any = psycopg.connect(db, autocommit=True)
            self.conn.execute("DROP TABLE IF EXISTS bare_audits")
        else:
            import sqlite3

            path = db + ".bare"
            for suffix in ("", "-wal", "-shm"):
                Path(path + suffix).unlink(missing_ok=True)
            self.conn = sqlite3.connect(path, isolation_level=None)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=FULL")
            from mnemoscope.server.storage import _SQLITE_CACHE_KB

            self.conn.execute(f"PRAGMA cache_size=-{_SQLITE_CACHE_KB}")  # as the store
        for st in stmts:
            self.conn.execute(st)
        q = "%s" if pg else "?"
        self.sql = (
            "INSERT INTO bare_audits (seq, id, created_at, source, memory_flag, latency_ms, content, "
            f"leaf_hash, prev_hash, entry_hash) VALUES ({', '.join([q] * 10)})"
        )

    def rows(self, recs: list[dict[str, Any]], first_seq: int) -> list[tuple[Any, ...]]:
        out = []
        for k, r in enumerate(recs):
            data = json.dumps(r, sort_keys=True, separators=(",", ":")).encode()
            h = hashlib.sha256(data).digest()
            out.append(
                (first_seq + k, "b" + r["id"], r["created_at"], r["source"], int(r["memory_flag"]),
                 r["latency_ms"], data.decode(), h, h, h)
            )  # fmt: skip
        return out

    def insert(self, rows: list[tuple[Any, ...]]) -> None:
        if self.pg:
            with self.conn.transaction():
                self.conn.cursor().executemany(self.sql, rows)
        else:
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.executemany(self.sql, rows)
            self.conn.execute("COMMIT")

    def size_bytes(self, db: str) -> int | None:
        if self.pg:
            return int(self.conn.execute("SELECT pg_total_relation_size('bare_audits')").fetchone()[0])
        return sum(
            Path(db + ".bare" + s).stat().st_size for s in ("", "-wal") if Path(db + ".bare" + s).exists()
        )

    def close(self) -> None:
        self.conn.close()


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q / 100 * (len(s) - 1)))]


def summary_ms(xs: list[float]) -> dict[str, float]:
    return {
        "n": len(xs),
        "p50_ms": round(pct(xs, 50) * 1e3, 3),
        "p99_ms": round(pct(xs, 99) * 1e3, 3),
        "mean_ms": round(statistics.fmean(xs) * 1e3, 3),
    }


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", required=True, help="SQLite path or postgresql:// URL (emptied first)")
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=8, help="audits per append() in the measured windows")
    ap.add_argument("--window", type=int, default=1000, help="audits per measured window")
    ap.add_argument("--fill-batch", type=int, default=500, help="audits per append() between windows")
    ap.add_argument("--ids", choices=["server", "random", "sequential"], default="server")
    ap.add_argument("--no-bare", action="store_true", help="skip the bare-insert baseline")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    global IDS
    IDS = args.ids
    pg = args.db.startswith(("postgresql://", "postgres://"))
    if pg:
        import psycopg

        with psycopg.connect(args.db, autocommit=True) as con:
            for t in ("audits", "checkpoints", "nodes", "log_state", "log_keys", "meta"):
                con.execute(f"DROP TABLE IF EXISTS {t}")
    else:
        for suffix in ("", "-wal", "-shm"):
            Path(args.db + suffix).unlink(missing_ok=True)
    rng = random.Random(0)
    signer = Signer.generate("bench.example/log")
    out: dict[str, Any] = {
        "backend": "postgresql" if pg else "sqlite",
        "n": args.n,
        "batch": args.batch,
        "fill_batch": args.fill_batch,
        "window": args.window,
        "ids": args.ids,
        "threads": os.environ.get("OMP_NUM_THREADS"),
        "note": "shared 2-core machine (other sessions running); loadavg recorded per phase",
        "provenance": provenance(),
        "append": {},
        "load": {"start": load()},
    }
    st = open_store(args.db, checkpoint_every=64, signing_key=signer, origin="bench.example/log")
    bare = None if args.no_bare else BareTable(args.db, pg)
    out["bare_append"] = {}
    marks = sorted({m for m in (1_000, 10_000, 100_000, 1_000_000, args.n) if m <= args.n})
    i = 0
    t_build = time.perf_counter()
    for m in marks:
        fill_to = m - args.window
        while i < fill_to:
            k = min(args.fill_batch, fill_to - i)
            recs = [record(i + j, rng) for j in range(k)]
            st.append(recs)
            if bare is not None:
                bare.insert(bare.rows(recs, i + 1))
            i += k
        lat, cpu, blat, bcpu = [], [], [], []
        while i < m:
            k = min(args.batch, m - i)
            recs = [record(i + j, rng) for j in range(k)]
            brows = None if bare is None else bare.rows(recs, i + 1)
            t0, c0 = time.perf_counter(), time.process_time()
            st.append(recs)
            lat.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            if bare is not None and brows is not None:  # the same batch, right after: same load
                t0, c0 = time.perf_counter(), time.process_time()
                bare.insert(brows)
                blat.append(time.perf_counter() - t0)
                bcpu.append(time.process_time() - c0)
            i += k
        out["append"][str(m)] = {
            "cpu_this_process": summary_ms(cpu),
            **summary_ms(lat),
            "per_audit_mean_ms": round(statistics.fmean(lat) * 1e3 / args.batch, 4),
            "load": load(),
        }
        if blat:
            out["bare_append"][str(m)] = {"cpu_this_process": summary_ms(bcpu), **summary_ms(blat)}
            out["append"][str(m)]["log_vs_bare_p50"] = round(
                out["append"][str(m)]["p50_ms"] / out["bare_append"][str(m)]["p50_ms"], 3
            )
        print(
            f"{m}: append {out['append'][str(m)]} bare {out['bare_append'].get(str(m))} "
            f"({time.perf_counter() - t_build:.0f} s)",
            flush=True,
        )
    out["build_s"] = round(time.perf_counter() - t_build, 1)
    if bare is not None:
        out["bare_bytes"] = bare.size_bytes(args.db)
        bare.close()
    st.close()
    if not pg:
        out["db_bytes"] = sum(
            Path(args.db + s).stat().st_size for s in ("", "-wal") if Path(args.db + s).exists()
        )

    t0 = time.perf_counter()
    st = open_store(args.db, checkpoint_every=64, signing_key=signer)
    out["open_s"] = round(time.perf_counter() - t0, 4)
    lat = []
    for _ in range(50):
        recs = [record(i + j, rng) for j in range(args.batch)]
        t0 = time.perf_counter()
        st.append(recs)
        lat.append(time.perf_counter() - t0)
        i += args.batch
    out["append_after_restart"] = summary_ms(lat)

    def timed(fn: Any, reps: int = 20) -> tuple[dict[str, float], Any]:
        xs, res = [], None
        for _ in range(reps):
            t0 = time.perf_counter()
            res = fn()
            xs.append(time.perf_counter() - t0)
        return summary_ms(xs), res

    st.checkpoint()
    proofs = {}
    for name, k in (("oldest", 0), ("middle", args.n // 2), ("newest", i - 1)):
        t, p = timed(lambda k=k: st.prove(audit_id(k)))
        path_bytes = len(json.dumps(p["inclusion_path"]))
        no_record = {k2: v for k2, v in p.items() if k2 != "record"}
        proofs[name] = {
            **t,
            "path_hashes": len(p["inclusion_path"]),
            "path_json_bytes": path_bytes,
            "proof_json_bytes_without_record": len(json.dumps(no_record)),
        }
    out["inclusion_proof"] = proofs
    out["consistency_proof"] = timed(lambda: st.consistency(1000))[0]
    page = st.history(limit=50)
    oldest_cursor = 52
    out["history"] = {
        "newest": timed(lambda: st.history(limit=50))[0],
        "oldest": timed(lambda: st.history(limit=50, before_seq=oldest_cursor))[0],
        "middle": timed(lambda: st.history(limit=50, before_seq=args.n // 2))[0],
        "source_memory_newest": timed(lambda: st.history(limit=50, source="memory"))[0],
        "source_memory_oldest": timed(lambda: st.history(limit=50, source="memory", before_seq=400))[0],
        "memory_flag_oldest": timed(lambda: st.history(limit=50, memory_flag=True, before_seq=400))[0],
        "time_window_oldest": timed(lambda: st.history(limit=50, since=1.7e9, until=1.7e9 + 5))[0],
        "next_cursor_of_newest_page": page.next_before_seq,
    }
    out["counts"] = timed(lambda: st.counts())[0]
    out["load"]["before_verify"] = load()
    st.close()
    ro = open_store(args.db, readonly=True)
    t0, c0 = time.perf_counter(), time.process_time()
    rep = ro.verify()
    out["verify"] = {
        "s": round(time.perf_counter() - t0, 2),
        "cpu_s_this_process": round(time.process_time() - c0, 2),
        "ok": rep.ok,
        "n_entries": rep.n_entries,
        "n_checkpoints": rep.n_checkpoints,
        "n_signed": rep.n_signed,
        "problem": rep.problem,
    }
    last = rep.last_checkpoint
    t0 = time.perf_counter()
    rep2 = ro.verify(since=max(64, ((last or 64) // 64 - 10) * 64))
    out["verify_since"] = {
        "s": round(time.perf_counter() - t0, 4),
        "ok": rep2.ok,
        "n_entries": rep2.n_entries,
    }
    ro.close()
    out["load"]["end"] = load()
    a1k, aN = out["append"]["1000"], out["append"][str(marks[-1])]
    out["targets"] = {
        "append_p50_ratio_N_vs_1k": round(aN["p50_ms"] / a1k["p50_ms"], 3),
        "append_p99_ratio_N_vs_1k": round(aN["p99_ms"] / a1k["p99_ms"], 3),
        "append_cpu_p50_ratio_N_vs_1k": round(
            aN["cpu_this_process"]["p50_ms"] / a1k["cpu_this_process"]["p50_ms"], 3
        ),
        "bare_insert_p50_ratio_N_vs_1k": None
        if not out["bare_append"]
        else round(out["bare_append"][str(marks[-1])]["p50_ms"] / out["bare_append"]["1000"]["p50_ms"], 3),
        "log_vs_bare_p50_at_1k": a1k.get("log_vs_bare_p50"),
        "log_vs_bare_p50_at_N": aN.get("log_vs_bare_p50"),
        "verify_s": out["verify"]["s"],
        "proof_p50_ms_max": max(p["p50_ms"] for p in proofs.values()),
        "proof_path_bytes_max": max(p["path_json_bytes"] for p in proofs.values()),
        "history_p50_ms_max": max(v["p50_ms"] for k, v in out["history"].items() if isinstance(v, dict)),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["targets"], indent=1))


if __name__ == "__main__":
    main()
