"""Audit service: ledger, storage, profile, settings, batching and the HTTP API (in-process)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from helpers import tiny_lm
from mnemoscope.audit.auditor import AuditFailure, Auditor, AuditRequest, AuditResult
from mnemoscope.audit.calibrate import calibrate_profile
from mnemoscope.audit.profile import CalibrationConfig, ProfileError, load_profile
from mnemoscope.errors import InputError, ModelMismatchError
from mnemoscope.pipelines.crm.fitter import CRMFitter
from mnemoscope.server.app import create_app
from mnemoscope.server.batcher import Batcher, QueueFull, ShuttingDown
from mnemoscope.server.config import hash_key, load_settings
from mnemoscope.server.ledger import (
    GENESIS,
    Checkpoint,
    LogEntry,
    entry_hash,
    leaf_hash,
    merkle_root,
    verify_log,
)
from mnemoscope.server.records import LEGACY_CRM_FIELDS
from mnemoscope.server.storage import StorageError, open_store
from mnemoscope.stats.conformal import conformal_upper
from server_helpers import API_KEY, tiny_records

AUTH = {"Authorization": f"Bearer {API_KEY}"}


# -- ledger ---------------------------------------------------------------------------------------


def _h(b: bytes) -> bytes:
    return hashlib.sha256(b).digest()


def test_merkle_root_matches_rfc9162_definition() -> None:
    leaves = [leaf_hash(i) for i in range(7)]
    # RFC 9162 2.1.1: split at the largest power of two < n
    left = _h(b"\x01" + _h(b"\x01" + leaves[0] + leaves[1]) + _h(b"\x01" + leaves[2] + leaves[3]))
    right = _h(b"\x01" + _h(b"\x01" + leaves[4] + leaves[5]) + leaves[6])
    assert merkle_root(leaves) == _h(b"\x01" + left + right)
    assert merkle_root(leaves[:1]) == leaves[0]
    assert merkle_root([]) == _h(b"")
    assert leaf_hash({"a": 1}) == _h(b'\x00{"a":1}')


def _chain(n: int) -> list[LogEntry]:
    out, prev = [], GENESIS
    for i in range(1, n + 1):
        c = {"id": f"a{i}", "v": i}
        lh = leaf_hash(c)
        eh = entry_hash(prev, lh, i)
        out.append(LogEntry(i, f"a{i}", c, lh, prev, eh))
        prev = eh
    return out


def test_verify_log_finds_the_first_problem() -> None:
    es = _chain(8)
    cps = [Checkpoint(4, merkle_root([e.leaf_hash for e in es[:4]]), es[3].entry_hash, 0.0)]
    assert verify_log(es, cps).ok
    altered = [
        *es[:2],
        LogEntry(3, "a3", {"id": "a3", "v": 99}, *(es[2].leaf_hash, es[2].prev_hash, es[2].entry_hash)),
        *es[3:],
    ]
    r = verify_log(altered, cps)
    assert not r.ok and r.seq == 3 and "altered" in (r.problem or "")
    r = verify_log([*es[:4], *es[5:]], cps)
    assert not r.ok and r.seq == 5 and "missing" in (r.problem or "")
    swapped = [*es[:2], es[3], es[2], *es[4:]]
    assert not verify_log(swapped, cps).ok
    # tail cut below a checkpoint
    r = verify_log(es[:3], cps)
    assert not r.ok and "newest records were deleted" in (r.problem or "")


# -- storage --------------------------------------------------------------------------------------


def _rec(i: int, flag: bool = False, t: float | None = None) -> dict[str, Any]:
    return {
        "id": f"id{i}",
        "created_at": t if t is not None else 1000.0 + i,
        "source": "memory" if flag else "context",
        "memory_flag": flag,
        "repcs": {"kl": 1.0, "tau": 0.5, "memorized": False},
        "latency_ms": float(i),
        "query": f"q{i}",
    }


def test_sqlite_store_appends_verifies_and_pages(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    st = open_store(db, checkpoint_every=4)
    assert st.append([_rec(i, flag=i % 3 == 0) for i in range(1, 11)]) == list(range(1, 11))
    assert st._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert st._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert st.get("id3")["query"] == "q3" and st.get("nope") is None
    page = st.history(limit=3)
    assert [x["id"] for x in page.items] == ["id10", "id9", "id8"] and page.next_before_seq == 8
    assert [x["id"] for x in st.history(limit=3, before_seq=8).items] == ["id7", "id6", "id5"]
    flagged = st.history(memory_flag=True).items
    assert [x["id"] for x in flagged] == ["id9", "id6", "id3"] and all(x["memory_flag"] for x in flagged)
    assert len(st.history(source="context").items) == 7
    assert len(st.history(since=1004.0, until=1006.0).items) == 3
    c = st.counts()
    assert c["by_source"] == {"context": 7, "memory": 3, "mixed": 0, "undetermined": 0, "unsupported": 0}
    assert c["n_memory_flag"] == 3
    assert [c.tree_size for c in st.checkpoints()] == [4, 8]
    rep = st.verify()
    assert rep.ok and rep.n_entries == 10
    with pytest.raises(StorageError, match="already exists"):
        st.append([_rec(1)])
    assert st.verify().ok  # the failed transaction left nothing behind
    st.close()
    # survives a reopen
    st2 = open_store(db, checkpoint_every=4)
    assert st2.append([_rec(11)]) == [11]
    assert st2.verify().ok
    st2.close()


def test_second_writer_on_one_sqlite_file_is_refused(tmp_path: Path) -> None:
    st = open_store(tmp_path / "a.db")
    with pytest.raises(StorageError, match="already open for writing"):
        open_store(tmp_path / "a.db")
    ro = open_store(tmp_path / "a.db", readonly=True)  # readers are fine
    assert ro.verify().ok
    with pytest.raises(StorageError, match="read-only"):
        ro.append([_rec(1)])
    ro.close()
    st.close()
    open_store(tmp_path / "a.db").close()  # the lock is released on close


def _tamper(db: Path, sql: str, *params: Any) -> None:
    con = sqlite3.connect(db)
    con.execute(sql, params)
    con.commit()
    con.close()


@pytest.mark.parametrize(
    ("sql", "seq", "word"),
    [
        (
            "UPDATE audits SET content = replace(content, '\"q5\"', '\"q5-edited\"') WHERE seq = 5",
            5,
            "altered",
        ),
        ("DELETE FROM audits WHERE seq = 4", 4, "missing"),
        ("UPDATE audits SET seq = seq + 100 WHERE seq = 3", 3, "missing"),
        ("DELETE FROM audits WHERE seq >= 7", 7, "deleted"),
    ],
)
def test_log_verify_catches_direct_database_tampering(tmp_path: Path, sql: str, seq: int, word: str) -> None:
    from mnemoscope.cli.main import main

    db = tmp_path / "a.db"
    st = open_store(db, checkpoint_every=8)
    st.append([_rec(i) for i in range(1, 10)])
    st.close()
    assert main(["log", "verify", "--db", str(db)]) == 0
    _tamper(db, sql)
    ro = open_store(db, readonly=True)
    rep = ro.verify()
    ro.close()
    assert not rep.ok and rep.seq == seq and word in (rep.problem or ""), rep
    assert main(["log", "verify", "--db", str(db)]) == 3


def test_reordering_two_records_is_caught(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    st = open_store(db)
    st.append([_rec(i) for i in range(1, 6)])
    st.close()
    con = sqlite3.connect(db)
    a = con.execute(
        "SELECT id, content, leaf_hash, prev_hash, entry_hash FROM audits WHERE seq = 2"
    ).fetchone()
    b = con.execute(
        "SELECT id, content, leaf_hash, prev_hash, entry_hash FROM audits WHERE seq = 3"
    ).fetchone()
    con.execute("UPDATE audits SET id = 'tmp' WHERE seq = 2")
    for seq, row in ((3, a), (2, b)):
        con.execute(
            "UPDATE audits SET id = ?, content = ?, leaf_hash = ?, prev_hash = ?, entry_hash = ? WHERE seq = ?",
            (*row, seq),
        )
    con.commit()
    con.close()
    ro = open_store(db, readonly=True)
    rep = ro.verify()
    ro.close()
    assert not rep.ok and rep.seq == 2 and "link" in (rep.problem or "")


def test_retention_prunes_content_but_the_chain_still_verifies(tmp_path: Path) -> None:
    st = open_store(tmp_path / "a.db", checkpoint_every=2)
    st.append([_rec(i, t=float(i)) for i in range(1, 6)])
    assert st.prune(older_than=3.5) == 3
    assert st.get("id2")["pruned"] is True and "query" in st.get("id5")
    rep = st.verify()
    assert rep.ok and rep.n_pruned == 3
    st.close()


# -- settings -------------------------------------------------------------------------------------


def test_settings_merge_file_env_and_overrides(tmp_path: Path) -> None:
    cfg = tmp_path / "s.toml"
    cfg.write_text(
        f'[server]\nmax_batch_size = 4\nqueue_size = 9\napi_key_hashes = ["{hash_key("filekey")}"]\n'
    )
    s = load_settings(
        cfg, {"queue_size": 5}, env={"MNEMOSCOPE_MAX_WAIT_MS": "3", "MNEMOSCOPE_API_KEYS": "envkey"}
    )
    assert (s.max_batch_size, s.queue_size, s.max_wait_ms) == (4, 5, 3.0)
    assert s.check_key("filekey") and s.check_key("envkey") and not s.check_key("other")
    assert "envkey" not in json.dumps(s.model_dump())  # only hashes are kept
    with pytest.raises(InputError, match="max_batch_size"):
        load_settings(None, {"max_batch_size": 0}, env={})
    with pytest.raises(InputError, match="nonsense"):
        load_settings(None, {"nonsense": 1}, env={})


def test_app_refuses_to_start_without_keys() -> None:
    with pytest.raises(InputError, match="no API key"):
        create_app(load_settings(None, env={}))


# -- profile --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lm() -> Any:
    return tiny_lm(layers=3)


@pytest.fixture(scope="module")
def profile_dir(lm: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("profile")
    calibrate_profile(
        lm,
        tiny_records(48),
        out,
        # fit on all 48 (counts below), with CRM: these tests read its artefact and audit block
        CalibrationConfig(max_new_tokens=4, chat=False, held_out_fraction=0, with_crm=True),
        progress=False,
        fitter=CRMFitter(),
    )
    return out


def test_conformal_upper_threshold_controls_false_positives() -> None:
    rng = np.random.default_rng(0)
    fp = []
    for _ in range(300):
        cal, new = rng.normal(size=39), rng.normal()
        fp.append(new > conformal_upper(cal, 0.1))
    assert np.mean(fp) <= 0.1 + 0.05


def test_profile_contents_and_integrity(lm: Any, profile_dir: Path) -> None:
    prof = load_profile(profile_dir, model=lm.info)
    h = prof.header
    assert h["data"]["n_traced"] == 48 and h["data"]["n_clean"] == 24
    assert prof.crm.classifier == "lr" and prof.anomaly.n_threshold == 12
    assert h["repcs"]["n"] == 24 and np.isfinite(prof.repcs_tau)
    assert prof.crm.lts_std.shape == (len(prof.crm.layers),) and (prof.crm.lts_std > 0).all()
    # altering a file is caught
    p = profile_dir / "profile.json"
    text = p.read_text()
    p.write_text(text.replace('"k_sigma": 2.0', '"k_sigma": 3.0'))
    with pytest.raises(ProfileError, match="hash mismatch"):
        load_profile(profile_dir)
    p.write_text(text)
    other = tiny_lm(layers=3, seed=1)
    with pytest.raises(ModelMismatchError, match="was fitted on"):
        load_profile(profile_dir, model=other.info)


def test_calibration_bad_input(lm: Any, tmp_path: Path) -> None:
    recs = [r for r in tiny_records(12) if r.label == 1]
    with pytest.raises(InputError, match="clean records"):
        calibrate_profile(
            lm, recs, tmp_path / "p", CalibrationConfig(max_new_tokens=2, chat=False), progress=False
        )
    with pytest.raises(InputError, match="both labels"):
        calibrate_profile(
            lm,
            [r for r in tiny_records(12) if r.label == 0],
            tmp_path / "q",
            CalibrationConfig(max_new_tokens=2, chat=False, classifier="lr"),
            progress=False,
            fitter=CRMFitter(),
        )


# -- engine ---------------------------------------------------------------------------------------


def test_engine_audits_a_batch_and_isolates_bad_items(lm: Any, profile_dir: Path) -> None:
    eng = Auditor(lm, load_profile(profile_dir), max_context_tokens=200, crm_probability=True)
    reqs = [
        AuditRequest("Zor3 lies on Ka3.", "Where is Zor3?"),
        AuditRequest("ctx", "   "),
        AuditRequest("x" * 500, "Where?"),
        AuditRequest("", "Where is Zor3?"),
        AuditRequest("Zor4 lies on Ka4.", "Where is Zor4?", max_new_tokens=2),
    ]
    out = eng.audit(reqs)
    assert isinstance(out[1], AuditFailure) and out[1].status == 422 and out[1].field == "query"
    assert isinstance(out[2], AuditFailure) and out[2].status == 413 and "200" in out[2].message
    a, empty, short = out[0], out[3], out[4]
    assert isinstance(a, AuditResult) and isinstance(empty, AuditResult) and isinstance(short, AuditResult)
    assert short.n_steps <= 2
    assert a.crm is not None and len(a.crm["lts_trajectory"]) == len(a.crm["layers"])
    assert a.repcs["kl"] >= 0 and 0 <= a.crm["crm_probability"] <= 1
    assert (
        a.source in ("context", "memory", "mixed", "unsupported", "undetermined") and a.p_memory is not None
    )
    assert len(a.tokens) == a.n_steps and "".join(t.text for t in a.tokens) == a.answer
    # an empty context is no evidence: undetermined, never memory, never an anomaly, said in words
    assert empty.identical_prompts and empty.source == "undetermined" and empty.notes
    assert empty.crm is not None and not empty.crm["anomaly_flag"] and empty.repcs["kl"] < 1e-9
    assert not empty.repcs["memorized"]
    # batched == one at a time (left padding does not change the verdict numbers)
    solo = eng.audit([reqs[0]])[0]
    assert isinstance(solo, AuditResult)
    np.testing.assert_allclose(solo.crm["lts_trajectory"], a.crm["lts_trajectory"], rtol=1e-3, atol=1e-4)
    assert solo.repcs["kl"] == pytest.approx(a.repcs["kl"], rel=1e-3, abs=1e-6)
    assert solo.p_memory == pytest.approx(a.p_memory, rel=1e-3, abs=1e-5)


def test_engine_refuses_profile_of_another_model(profile_dir: Path) -> None:
    with pytest.raises(ModelMismatchError):
        Auditor(tiny_lm(layers=3, seed=7), load_profile(profile_dir))


# -- batcher --------------------------------------------------------------------------------------


def test_batcher_batches_bounds_and_drains() -> None:
    seen: list[int] = []
    gate = threading.Event()

    def process(payloads: list[Any], enq: list[float]) -> list[Any]:
        gate.wait(5)
        seen.append(len(payloads))
        return [p * 10 for p in payloads]

    async def main() -> None:
        b = Batcher(process, max_batch_size=4, max_wait_ms=50, queue_size=6)
        await b.start()
        first = asyncio.ensure_future(b.submit([0]))
        await asyncio.sleep(0.1)  # the first batch [0] is now blocked in process
        futs = [asyncio.ensure_future(b.submit([i])) for i in range(1, 7)]
        await asyncio.sleep(0.01)
        with pytest.raises(QueueFull):
            b.submit_nowait([99])
        with pytest.raises(QueueFull):  # a batch request is admitted whole or not at all
            b.submit_nowait([1, 2])
        gate.set()
        assert await first == [0]
        assert [r[0] for r in await asyncio.gather(*futs)] == [10, 20, 30, 40, 50, 60]
        assert max(seen) == 4 and sum(seen) == 7  # batched, never above max_batch_size
        await b.stop(1.0)
        with pytest.raises(ShuttingDown):
            b.submit_nowait([1])

    asyncio.run(main())


def test_batcher_rejects_what_it_cannot_finish_on_shutdown() -> None:
    def slow(payloads: list[Any], enq: list[float]) -> list[Any]:
        time.sleep(0.3)
        return payloads

    async def main() -> None:
        b = Batcher(slow, max_batch_size=1, max_wait_ms=0, queue_size=10)
        await b.start()
        futs = b.submit_nowait(list(range(6)))
        await asyncio.sleep(0.05)
        rejected = await b.stop(grace_s=0.4)
        done = [f for f in futs if f.done() and f.exception() is None]
        failed = [f for f in futs if f.done() and isinstance(f.exception(), ShuttingDown)]
        assert rejected == len(failed) >= 1 and len(done) >= 1
        assert len(done) + len(failed) + sum(not f.done() for f in futs) == 6

    asyncio.run(main())


# -- HTTP API -------------------------------------------------------------------------------------


@pytest.fixture()
def client(lm: Any, profile_dir: Path, tmp_path: Path) -> Any:
    settings = load_settings(
        None,
        {"max_body_bytes": 4096, "max_batch_request": 3, "max_new_tokens_limit": 8, "max_wait_ms": 5},
        env={"MNEMOSCOPE_API_KEYS": API_KEY},
    )
    eng = Auditor(
        lm, load_profile(profile_dir), max_context_tokens=300, max_query_tokens=50, crm_probability=True
    )
    store = open_store(tmp_path / "api.db", checkpoint_every=2)
    with TestClient(create_app(settings, engine=eng, store=store)) as c:
        yield c


def test_api_audit_roundtrip_and_history(client: Any) -> None:
    r = client.post(
        "/v1/audit", json={"context": "Zor1 lies on Ka1.", "query": "Where is Zor1?"}, headers=AUTH
    )
    assert r.status_code == 200, r.text
    a = r.json()
    for k in (
        "id",
        "repcs",
        "latency_ms",
        "model",
        "source",
        "memory_flag",
        "p_memory",
        "answer",
        "evidence",
        "guarantee",
        "tokens",
        "spans",
        "crm",
    ):
        assert k in a
    # CRM's numbers sit under crm only (no legacy copies without legacy_crm_fields)
    assert not set(a) & set(LEGACY_CRM_FIELDS), sorted(set(a) & set(LEGACY_CRM_FIELDS))
    assert {"anomaly_flag", "lts_trajectory", "layers", "flagged_layers"} <= set(a["crm"])
    assert a["memory_flag"] is (a["source"] == "memory") or a["source"] == "mixed"
    assert a["answer_given"] is False
    assert set(a["repcs"]) == {"kl", "tau", "memorized", "n_steps", "identical_prompts", "note"}
    assert a["seq"] == 1 and a["source"] in ("context", "memory", "mixed", "unsupported", "undetermined")
    assert set(a["evidence"]) >= {"repcs_z", "tau", "closed_book_logprob", "context_token_fraction"}
    assert set(a["guarantee"]) >= {"alpha", "n_calibration", "certified"}
    assert "".join(t["text"] for t in a["tokens"]) == a["answer"]
    for sp in a["spans"]:
        assert a["answer"][sp["start"] : sp["end"]] == sp["text"]
    got = client.get(f"/v1/audits/{a['id']}", headers=AUTH).json()
    assert (
        got["crm"] == a["crm"] and got["query"] == "Where is Zor1?" and got["memory_flag"] == a["memory_flag"]
    )
    client.post(
        "/v1/audit", json={"context": "", "query": "Where?", "options": {"max_new_tokens": 2}}, headers=AUTH
    )
    h = client.get("/v1/history", params={"limit": 1}, headers=AUTH).json()
    assert len(h["items"]) == 1 and h["items"][0]["seq"] == 2 and h["next_before_seq"] == 2
    assert not set(h["items"][0]) & set(LEGACY_CRM_FIELDS)
    h2 = client.get("/v1/history", params={"limit": 1, "before_seq": 2}, headers=AUTH).json()
    assert [x["seq"] for x in h2["items"]] == [1] and h2["next_before_seq"] is None
    assert client.get("/v1/history", params={"since": 4e10}, headers=AUTH).json()["items"] == []
    s = client.get("/v1/stats", headers=AUTH).json()
    assert s["n_audits"] == 2 and s["model"]["n_layers"] == 3 and s["latency_ms"]["p50"] > 0
    assert sum(s["by_source"].values()) == 2 and s["by_source"]["undetermined"] >= 1  # the empty context
    assert s["n_memory_flag"] == (a["memory_flag"] is True)
    # history filters read the stored verdict: by source, by memory flag (flag is its old name)
    for src in ("context", "memory", "mixed", "unsupported", "undetermined"):
        got_src = client.get("/v1/history", params={"source": src}, headers=AUTH).json()["items"]
        assert len(got_src) == s["by_source"][src] and all(x["source"] == src for x in got_src)
    for key in ("memory_flag", "flag"):
        for val in (True, False):
            hs = client.get("/v1/history", params={key: str(val).lower()}, headers=AUTH).json()
            assert all(x["memory_flag"] is val for x in hs["items"])
            assert len(hs["items"]) == (s["n_memory_flag"] if val else 2 - s["n_memory_flag"])
    assert s["log_head"]["seq"] == 2 and s["log_head"]["last_checkpoint"]["tree_size"] == 2
    m = client.get("/metrics").text
    assert "mnemoscope_audits_total 2.0" in m and "mnemoscope_batch_size_bucket" in m
    # the verdict counter: one series per source x memory flag, summing to the audits stored
    series = dict(
        (line.rsplit(" ", 1)[0], float(line.rsplit(" ", 1)[1]))
        for line in m.splitlines()
        if line.startswith("mnemoscope_verdicts_total{")
    )
    assert len(series) == 10 and sum(series.values()) == 2.0, series
    empty_key = 'mnemoscope_verdicts_total{memory_flag="false",source="undetermined"}'
    assert series[empty_key] >= 1.0, series  # the empty-context audit
    assert "mnemoscope_anomalies_total" not in m


def test_api_history_bad_filters_say_what_is_wrong(client: Any) -> None:
    r = client.get("/v1/history", params={"source": "brain"}, headers=AUTH)
    assert r.status_code == 422 and r.json()["field"] == "query.source", r.json()
    r = client.get("/v1/history", params={"offset": 20}, headers=AUTH)
    assert r.status_code == 422 and "before_seq" in r.json()["detail"]
    assert client.get("/v1/history", params={"offset": 0}, headers=AUTH).status_code == 200
    r = client.get("/v1/history", params={"flag": "true", "memory_flag": "false"}, headers=AUTH)
    assert r.status_code == 422 and "old name" in r.json()["detail"]
    r = client.get("/v1/history", params={"before_seq": 0}, headers=AUTH)
    assert r.status_code == 422 and r.json()["field"] == "query.before_seq"


def test_api_scores_a_given_answer(client: Any) -> None:
    """``answer`` is teacher-forced on both paths: the returned answer is the given one, token for token."""
    given = "It lies on the river Ka1."
    r = client.post(
        "/v1/audit",
        json={"context": "Zor1 lies on Ka1.", "query": "Where is Zor1?", "answer": given},
        headers=AUTH,
    )
    assert r.status_code == 200, r.text
    a = r.json()
    assert a["answer"] == given and a["answer_given"] is True
    assert "".join(t["text"] for t in a["tokens"]) == given and a["n_steps"] == len(a["tokens"])
    assert client.get(f"/v1/audits/{a['id']}", headers=AUTH).json()["answer_given"] is True
    r = client.post("/v1/audit", json={"context": "c", "query": "q", "answer": "  "}, headers=AUTH)
    assert r.status_code == 422 and r.json()["field"] == "answer", r.json()
    r = client.post("/v1/audit", json={"context": "c", "query": "q", "answer": ""}, headers=AUTH)
    assert r.status_code == 422 and r.json()["field"] == "answer", r.json()


def test_api_legacy_crm_fields_switch(lm: Any, profile_dir: Path, tmp_path: Path) -> None:
    """With legacy_crm_fields the old top-level CRM copies come back (from crm), also in history."""
    settings = load_settings(
        None, {"legacy_crm_fields": True, "max_wait_ms": 1}, env={"MNEMOSCOPE_API_KEYS": API_KEY}
    )
    eng = Auditor(lm, load_profile(profile_dir), crm_probability=True)  # the CRM fields asked for
    with TestClient(create_app(settings, engine=eng, store=open_store(tmp_path / "l.db"))) as c:
        a = c.post("/v1/audit", json={"context": "Zor2 lies on Ka2.", "query": "Where?"}, headers=AUTH).json()
        assert set(LEGACY_CRM_FIELDS) <= set(a)
        assert (
            a["anomaly_flag"] == a["crm"]["anomaly_flag"]
            and a["lts_trajectory"] == a["crm"]["lts_trajectory"]
        )
        assert a["generation"] == a["answer"] and a["crm_probability"] == a["crm"]["crm_probability"]
        item = c.get("/v1/history", headers=AUTH).json()["items"][0]
        assert item["anomaly_flag"] == a["anomaly_flag"] and item["layers"] == a["crm"]["layers"]
        # the stored (hashed) record does not carry them: the switch changes responses only
        st = c.app.state.mnemoscope.store
        assert st is not None
        raw = next(iter(st.history(limit=1).items))
        assert not set(raw) & set(LEGACY_CRM_FIELDS)


def test_records_of_an_older_server_are_presented_in_the_new_layout() -> None:
    from mnemoscope.server.records import present

    old = {
        "id": "x",
        "source": "memory",
        "anomaly_flag": True,
        "generation": "Paris",
        "answer": "Paris",
        "crm": None,
    }
    new = present(old, legacy=False)
    # the flag was not recorded then: null, not re-decided from the source
    assert new["memory_flag"] is None and not set(new) & set(LEGACY_CRM_FIELDS)
    assert present({"id": "y", "seq": 3, "pruned": True}, legacy=False) == {
        "id": "y",
        "seq": 3,
        "pruned": True,
    }
    assert present(old, legacy=True)["anomaly_flag"] is False  # read from crm (null: not measured)


def test_api_profile_card_and_pages(client: Any) -> None:
    r = client.get("/v1/profile", headers=AUTH)
    assert r.status_code == 200, r.text
    p = r.json()
    assert p["rule"] == "combined" and len(p["hash"]) == 64 and p["card"]
    # calibrated with held_out_fraction=0: no reference sample, and the card and /metrics say so
    drift = p["card"]["drift"]
    assert drift["watched"] is False and drift["state"] == "not watched"
    assert drift["reason"].startswith("no reference sample in this profile: drift not watched (")
    assert "held_out.jsonl: 0 answers with a p_memory" in drift["reason"]
    assert 'mnemoscope_drift_state{state="not watched"} 1.0' in client.get("/metrics").text
    assert client.get("/v1/profile").status_code == 401
    for page, marker in (("/", "dashboard.js"), ("/profile", "profile.js")):
        r = client.get(page)
        assert r.status_code == 200 and marker in r.text and '<script src="/static/common.js">' in r.text
    for asset in ("common.js", "dashboard.js", "profile.js", "dashboard.css"):
        assert client.get(f"/static/{asset}").status_code == 200
    assert client.get("/health").json() == {"status": "ok", "auth": "bearer"}


def test_anonymous_server_reads_without_a_key(lm: Any, profile_dir: Path, tmp_path: Path) -> None:
    settings = load_settings(None, {"allow_anonymous": True, "max_wait_ms": 1}, env={})
    eng = Auditor(lm, load_profile(profile_dir), crm_probability=True)  # the CRM fields asked for
    with TestClient(create_app(settings, engine=eng, store=open_store(tmp_path / "anon.db"))) as c:
        assert c.get("/health").json()["auth"] == "none"
        assert (
            c.post("/v1/audit", json={"context": "Zor5 lies on Ka0.", "query": "Where?"}).status_code == 200
        )
        for path in ("/v1/stats", "/v1/history", "/v1/profile"):
            assert c.get(path).status_code == 200, path


def test_api_auth(client: Any) -> None:
    body = {"context": "c", "query": "q"}
    r = client.post("/v1/audit", json=body)
    assert (
        r.status_code == 401 and "Bearer" in r.json()["detail"] and r.headers["www-authenticate"] == "Bearer"
    )
    assert client.post("/v1/audit", json=body, headers={"Authorization": "Basic abc"}).status_code == 401
    r = client.post("/v1/audit", json=body, headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 403 and "not valid" in r.json()["detail"]
    for path in ("/v1/history", "/v1/stats", "/v1/audits/x", "/v1/log/head", "/v1/profile"):
        assert client.get(path).status_code == 401
    for path in ("/health", "/ready", "/metrics", "/", "/profile", "/openapi.json"):
        assert client.get(path).status_code == 200


def test_api_limits_and_errors(client: Any) -> None:
    r = client.post("/v1/audit", json={"context": "c", "query": ""}, headers=AUTH)
    assert r.status_code == 422 and "query" in r.json()["detail"]
    r = client.post("/v1/audit", json={"context": "c"}, headers=AUTH)
    assert r.status_code == 422 and r.json()["field"] == "query"
    r = client.post("/v1/audit", json={"context": "w " * 200, "query": "q"}, headers=AUTH)
    assert r.status_code == 413 and "300" in r.json()["detail"] and r.json()["field"] == "context"
    r = client.post("/v1/audit", json={"context": "x" * 5000, "query": "q"}, headers=AUTH)
    assert r.status_code == 413 and "4096" in r.json()["detail"]
    r = client.post(
        "/v1/audit", json={"context": "c", "query": "q", "options": {"max_new_tokens": 9}}, headers=AUTH
    )
    assert r.status_code == 422 and "limit is 8" in r.json()["detail"]
    r = client.post("/v1/audit/batch", json={"items": [{"context": "c", "query": "q"}] * 4}, headers=AUTH)
    assert r.status_code == 413 and "batch limit is 3" in r.json()["detail"]
    r = client.post(
        "/v1/audit/batch",
        json={"items": [{"context": "c", "query": "q"}, {"context": "c", "query": " "}]},
        headers=AUTH,
    )
    assert r.status_code == 200
    items = r.json()["items"]
    assert items[0]["ok"] and not items[1]["ok"] and items[1]["error"]["index"] == 1
    assert client.get("/v1/audits/nope", headers=AUTH).status_code == 404
    assert client.get("/v1/history", params={"limit": 0}, headers=AUTH).status_code == 422
    r = client.post("/v1/audit", content=b"{not json", headers={**AUTH, "content-type": "application/json"})
    assert r.status_code == 422 and "not valid JSON" in r.json()["detail"] and r.json()["field"] is None


def test_api_overload_answers_503_with_retry_after(lm: Any, profile_dir: Path, tmp_path: Path) -> None:
    class Slow(Auditor):
        def audit(self, requests: Any) -> Any:
            time.sleep(0.5)
            return super().audit(requests)

    settings = load_settings(
        None, {"queue_size": 2, "max_batch_size": 1, "max_wait_ms": 0}, env={"MNEMOSCOPE_API_KEYS": API_KEY}
    )
    eng = Slow(lm, load_profile(profile_dir))
    store = open_store(tmp_path / "o.db")
    codes: list[int] = []
    retry: list[str | None] = []
    with TestClient(create_app(settings, engine=eng, store=store)) as c:

        def one() -> None:
            r = c.post("/v1/audit", json={"context": "c", "query": "q"}, headers=AUTH)
            codes.append(r.status_code)
            retry.append(r.headers.get("retry-after"))

        ts = [threading.Thread(target=one) for _ in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert sorted(set(codes)) == [200, 503], codes
        assert all(r == "1" for code, r in zip(codes, retry, strict=True) if code == 503)
        n_ok = codes.count(200)
        assert c.get("/v1/stats", headers=AUTH).json()["n_audits"] == n_ok
        assert 'mnemoscope_rejected_total{reason="queue_full"}' in c.get("/metrics").text
    ro = open_store(tmp_path / "o.db", readonly=True)
    assert ro.verify().ok
    ro.close()


def test_api_carries_the_endpoint_fields_fallbacks_bounded_and_answer_cut(
    lm: Any, profile_dir: Path, tmp_path: Path
) -> None:
    """What an endpoint audit adds to its result (the paths that failed before the one that scored it,
    the positions whose log-prob is a top-k bound, where a stop sequence cut the answer) reaches the
    POST /v1/audit answer, the stored record and GET /v1/audits/{id}, and the OpenAPI document
    describes it."""
    from dataclasses import replace

    extra = {
        "backend": "endpoint",
        "endpoint_method": "native-grammar-forced-topk+llama.cpp",
        "fallbacks": [{"path": "grammar", "status": 500, "message": "Unexpected empty grammar stack"}],
        "bounded": True,
        "bounded_positions": {"with-context": [], "no-context": [2, 5]},
        "answer_cut": {"at": 14, "stop": "\n\n", "token": 3},
    }

    class WithEndpointFields(Auditor):
        def audit(self, requests: Any) -> Any:
            return [
                r if isinstance(r, AuditFailure) else replace(r, extra={**r.extra, **extra})
                for r in super().audit(requests)
            ]

    settings = load_settings(None, {"max_wait_ms": 5}, env={"MNEMOSCOPE_API_KEYS": API_KEY})
    store = open_store(tmp_path / "e.db")
    with TestClient(
        create_app(settings, engine=WithEndpointFields(lm, load_profile(profile_dir)), store=store)
    ) as c:
        r = c.post(
            "/v1/audit", json={"context": "Zor9 lies on Ka9.", "query": "Where is Zor9?"}, headers=AUTH
        )
        assert r.status_code == 200, r.text
        a = r.json()
        for k, v in extra.items():
            assert a[k] == v, (k, a.get(k))
        again = c.get(f"/v1/audits/{a['id']}", headers=AUTH).json()
        assert {k: again[k] for k in extra} == extra
        (stored,) = c.get("/v1/history", headers=AUTH).json()["items"]
        assert {k: stored[k] for k in extra} == extra
        doc = c.get("/openapi.json").json()
    props = doc["components"]["schemas"]["AuditOut"]["properties"]
    for k in ("fallbacks", "bounded", "bounded_positions", "answer_cut"):
        assert props[k].get("description"), k
    schemas = doc["components"]["schemas"]
    assert set(schemas["BoundedPositionsOut"]["properties"]) == {"with-context", "no-context"}
    assert set(schemas["FallbackOut"]["properties"]) == {"path", "status", "message"}
    assert set(schemas["AnswerCutOut"]["properties"]) == {"at", "stop", "token"}


def test_cli_repcs_score_and_server_give_the_same_repcs_verdict(
    tiny_service: tuple[Path, Path], tmp_path: Path
) -> None:
    """One calibration, one input, two entry points: the shared JSON fields are byte-identical,
    the empty context included (never flagged, said in a note)."""
    import json as _json

    from mnemoscope.cli.main import main
    from mnemoscope.io import canonical_json

    model_dir, profile = tiny_service
    rows = [
        {"id": "a", "context": "The town of Zor3 lies on the river Ka3.", "query": "Where is Zor3?"},
        {"id": "e", "context": "", "query": "Where is Zor3?"},
    ]
    inp = tmp_path / "q.jsonl"
    inp.write_text("".join(_json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "scores.jsonl"
    args = ["--quiet", "repcs", "score", "--model", str(model_dir), "--calibration", str(profile)]
    assert main([*args, "--input", str(inp), "--out", str(out), "--batch-size", "1"]) == 0
    cli = {r["id"]: r for r in map(_json.loads, out.read_text().splitlines())}
    settings = load_settings(None, env={"MNEMOSCOPE_API_KEYS": "k", "MNEMOSCOPE_MAX_BATCH_SIZE": "1"})
    from mnemoscope.models import load_model

    lm = load_model(str(model_dir))
    app = create_app(
        settings, engine=Auditor(lm, load_profile(profile), batch_size=1), store=open_store(tmp_path / "s.db")
    )
    with TestClient(app) as c:
        for r in rows:
            a = c.post(
                "/v1/audit",
                json={"context": r["context"], "query": r["query"]},
                headers={"Authorization": "Bearer k"},
            )
            assert a.status_code == 200, a.text
            srv = a.json()["repcs"]
            shared = ("kl", "tau", "memorized", "n_steps", "identical_prompts", "note")
            assert canonical_json({k: srv[k] for k in shared}) == canonical_json(
                {k: cli[r["id"]][k] for k in shared}
            )
    assert cli["e"]["identical_prompts"] and not cli["e"]["memorized"] and "never flagged" in cli["e"]["note"]
