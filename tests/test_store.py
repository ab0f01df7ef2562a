"""Trace storage: round trip, resume, settings guard, crash safety."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from mnemoscope.data import Record, RecordError
from mnemoscope.errors import TraceStoreError
from mnemoscope.trace import (
    Capture,
    PairConfig,
    PairItem,
    Tracer,
    TraceWriter,
    load_traces,
    save_traces,
    trace_pairs,
)
from mnemoscope.trace.pipeline import run_pairs

CFG = PairConfig(max_new_tokens=4, top_k=3)


def _equal(a, b):
    assert type(a) is type(b)
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape, f.name
            np.testing.assert_array_equal(x, y)
        else:
            assert x == y, f.name


def test_pair_traces_round_trip(lm, tmp_path):
    items = [PairItem("a", "Zorblat.", "Which?", 1), PairItem("b", "", "Which?", None)]
    traces = trace_pairs(Tracer(lm), items, CFG)
    save_traces(tmp_path / "t", traces, model=lm.info.to_dict(), settings=CFG.to_dict())
    loaded = load_traces(tmp_path / "t")
    assert loaded.meta["kind"] == "pair" and loaded.meta["model"]["fingerprint"] == lm.info.fingerprint
    assert len(loaded) == 2
    for a, b in zip(traces, loaded, strict=True):
        _equal(a, b)


def test_prompt_traces_round_trip_with_optional_fields(lm, tmp_path):
    traces = Tracer(lm).trace(["ab", "cde"], capture=Capture(hidden="all", logprobs="all", attentions=True))
    save_traces(tmp_path / "p", traces, model=lm.info.to_dict())
    for a, b in zip(traces, load_traces(tmp_path / "p"), strict=True):
        _equal(a, b)
        assert isinstance(b.tokens, tuple)


def test_writer_refuses_other_settings_and_resumes(lm, tmp_path):
    w = TraceWriter(tmp_path / "w", kind="pair", model=lm.info.to_dict(), settings=CFG.to_dict())
    w.write(trace_pairs(Tracer(lm), [PairItem("a", "c", "q")], CFG))
    again = TraceWriter(tmp_path / "w", kind="pair", model=lm.info.to_dict(), settings=CFG.to_dict())
    assert again.done_ids == {"a"}
    with pytest.raises(TraceStoreError, match="other settings"):
        TraceWriter(
            tmp_path / "w", kind="pair", model=lm.info.to_dict(), settings={**CFG.to_dict(), "top_k": 9}
        )
    fresh = TraceWriter(
        tmp_path / "w", kind="pair", model=lm.info.to_dict(), settings={"x": 1}, overwrite=True
    )
    assert fresh.done_ids == set()
    with pytest.raises(TraceStoreError, match=r"no meta\.json"):
        load_traces(tmp_path / "nothing")


def test_torn_index_line_and_orphan_shard_are_ignored(lm, tmp_path):
    out = tmp_path / "crash"
    w = TraceWriter(out, kind="pair", model=lm.info.to_dict(), settings=CFG.to_dict())
    w.write(trace_pairs(Tracer(lm), [PairItem("a", "c", "q")], CFG))
    # a crash mid-append leaves a partial line; a crash before the append leaves an orphan shard
    with (out / "index.jsonl").open("a") as f:
        f.write('{"id": "b", "sha')
    (out / "shards" / ".tmp-orphan.npz.tmp").write_bytes(b"partial")
    loaded = load_traces(out)
    assert [t.id for t in loaded] == ["a"]
    assert TraceWriter(out, kind="pair", model=lm.info.to_dict(), settings=CFG.to_dict()).done_ids == {"a"}


def _records(n, start=0):
    return [
        Record(id=f"r{i}", context=f"Fact {i} about Vell.", query="Who is Vell?", label=i % 2, line=i + 1)
        for i in range(start, start + n)
    ]


def test_run_pairs_resumes_and_isolates_bad_records(lm, tmp_path):
    out = tmp_path / "run"
    s1 = run_pairs(lm, _records(3), out, config=CFG, batch_size=2, progress=False)
    assert (s1.n_traced, s1.n_already_done, s1.n_errors) == (3, 0, 0)
    bad = Record(id="empty", context="c", query=" ", line=9)
    s2 = run_pairs(
        lm,
        [*_records(5), bad],
        out,
        config=CFG,
        batch_size=2,
        progress=False,
        input_errors=[RecordError(7, None, None, "invalid JSON")],
    )
    assert (s2.n_traced, s2.n_already_done, s2.n_errors) == (2, 3, 2)
    errors = [json.loads(x) for x in (out / "errors.jsonl").read_text().splitlines()]
    assert {(e["line"], e["field"]) for e in errors} == {(7, None), (9, "query")}
    loaded = load_traces(out)
    assert sorted(t.id for t in loaded) == [f"r{i}" for i in range(5)]
    assert [t.label for t in loaded if t.id == "r1"] == [1]


def test_run_pairs_raise_mode_keeps_written_batches(lm, tmp_path):
    from mnemoscope.errors import InputError

    out = tmp_path / "strict"
    bad = Record(id="empty", context="c", query=" ", line=4)
    with pytest.raises(InputError, match="line 4"):
        run_pairs(lm, [*_records(2), bad], out, config=CFG, progress=False, on_error="raise")
    run_pairs(lm, _records(2), out, config=CFG, progress=False)
    assert len(load_traces(out)) == 2


def test_failing_batch_is_retried_one_by_one(lm, tmp_path, monkeypatch):
    import mnemoscope.trace.pipeline as pipeline

    real = pipeline.trace_prepared

    def flaky(tracer, prepared, config):
        if len(prepared) > 1 or prepared[0].item.id == "r1":
            raise RuntimeError("simulated failure")
        return real(tracer, prepared, config)

    monkeypatch.setattr(pipeline, "trace_prepared", flaky)
    s = run_pairs(lm, _records(3), tmp_path / "flaky", config=CFG, batch_size=3, progress=False)
    assert s.n_traced == 2 and s.errors[0]["id"] == "r1" and "simulated" in s.errors[0]["message"]
