"""The Ray engine on a real local Ray cluster (``ray.init`` with 2 CPUs, once per session).

Without ``ray`` installed these tests skip, unless ``MNEMOSCOPE_REQUIRE_SERVICES=1``, which turns
the skip into a failure. Actors are other processes: the tiny model and its profile are saved to
disk (``tiny_service``) and loaded by spec, as a user's model would be.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mnemoscope.errors import InputError

ROOT = Path(__file__).resolve().parents[1]


def _unavailable(reason: str) -> None:
    if os.environ.get("MNEMOSCOPE_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{reason} (MNEMOSCOPE_REQUIRE_SERVICES=1)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    try:
        import ray
        import ray.data
    except ImportError:
        _unavailable("ray is not installed: pip install 'mnemoscope[ray]'")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()


def _options(**kw: Any) -> Any:
    from mnemoscope.pipelines.ray import RayOptions

    return RayOptions(progress=False, **kw)


def _by_id(path: Path) -> dict[str, str]:
    rows = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    out = {str(json.loads(line)["id"]): line for line in rows}
    assert len(out) == len(rows), "an id is written twice"
    return out


def _close(a: Any, b: Any, tol: float = 1e-5) -> bool:
    """Equal JSON, numbers within ``tol`` (what padding another batch composition changes)."""
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and abs(a - b) <= tol
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_close(a[k], b[k], tol) for k in a)
    if isinstance(a, list):
        return (
            isinstance(b, list)
            and len(a) == len(b)
            and all(_close(x, y, tol) for x, y in zip(a, b, strict=True))
        )
    return bool(a == b)


def _audit_input(path: Path) -> Path:
    rows: list[Any] = [
        {
            "id": f"q{i}",
            "context": f"The town of Zor{i} lies on the river Ka{i % 3}.",
            "query": f"Where is Zor{i}?",
        }
        for i in range(7)
    ]
    rows[2]["answer"] = "on the river"  # teacher-forced: its own group inside the batch
    rows[4]["context"] = ""  # identical prompts
    rows[5]["max_new_tokens"] = 2
    lines = [json.dumps(r) for r in rows]
    lines.insert(3, "{not json")
    lines.append(json.dumps({"id": "q0", "context": "dup", "query": "dup?"}))
    lines.append(json.dumps({"id": "blank", "context": "x", "query": "  "}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _local_single_thread() -> Any:
    import torch

    class _Ctx:
        def __enter__(self) -> None:
            self.n = torch.get_num_threads()
            torch.set_num_threads(1)  # as each actor (cpus_per_worker=1): same kernels, same bits

        def __exit__(self, *a: Any) -> None:
            torch.set_num_threads(self.n)

    return _Ctx()


def test_audit_equals_local_engine_resumes_and_refuses_another_run(
    ray_cluster: Any, tiny_service: tuple[Path, Path], tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    from mnemoscope.audit.auditor import Auditor, run_audit_file
    from mnemoscope.audit.profile import load_profile
    from mnemoscope.models import load_model
    from mnemoscope.pipelines.ray import ray_audit_file

    model_dir, profile = tiny_service
    inp = _audit_input(tmp_path / "in.jsonl")
    lm = load_model(str(model_dir))
    auditor = Auditor(lm, load_profile(profile, model=lm.info), batch_size=3)
    with _local_single_thread():
        local = run_audit_file(auditor, inp, tmp_path / "local", progress=False)
    kw = {"model": str(model_dir), "profile": str(profile)}
    res = ray_audit_file(inp, tmp_path / "ray", options=_options(workers=2, batch_size=3), **kw)

    assert {k: res[k] for k in ("records", "audited", "skipped_done", "errors")} == {
        k: local[k] for k in ("records", "audited", "skipped_done", "errors")
    }
    assert res["audited"] == 7 and res["errors"] == 3
    a, b = _by_id(tmp_path / "local/results.jsonl"), _by_id(tmp_path / "ray/results.jsonl")
    assert a == b  # same batches, same function: the same bytes, line by line
    errs = lambda p: sorted(p.read_text().splitlines())  # noqa: E731
    assert errs(tmp_path / "local/errors.jsonl") == errs(tmp_path / "ray/errors.jsonl")
    metas = [json.loads((tmp_path / e / "meta.json").read_text()) for e in ("local", "ray")]
    ident = [{k: v for k, v in m.items() if k != "runs"} for m in metas]
    assert ident[0] == ident[1]  # the same identity from either engine
    (lrun,), (rrun,) = (m["runs"] for m in metas)  # each engine recorded its run
    assert lrun["profile"] == rrun["profile"] and lrun["appended"] == rrun["appended"] == 7
    table = pq.read_table(tmp_path / "ray/results.parquet")
    assert sorted(table.column("id").to_pylist()) == sorted(a)
    row = table.slice(0, 1).to_pylist()[0]
    full = json.loads(b[row["id"]])
    assert row["source"] == full["source"] and json.loads(row["tokens"]) == full["tokens"]
    assert res["engine"]["duplicate_batches_dropped"] == 0
    assert json.loads((tmp_path / "ray/runs.jsonl").read_text().splitlines()[-1])["workers"] == 2

    # resume after a crash that lost the last lines: only those are redone, in other batches than
    # the first run's (other padding), so equal within 1e-5 rather than bit for bit
    kept = (tmp_path / "ray/results.jsonl").read_text().splitlines()[:4]
    (tmp_path / "ray/results.jsonl").write_text("\n".join(kept) + "\n" + '{"id": "torn')
    again = ray_audit_file(inp, tmp_path / "ray", options=_options(batch_size=3), **kw)
    assert again["audited"] == 3 and again["skipped_done"] == 4
    resumed = _by_id(tmp_path / "ray/results.jsonl")
    assert resumed.keys() == a.keys()
    assert all(_close(json.loads(resumed[k]), json.loads(a[k])) for k in a)
    assert run_audit_file(auditor, inp, tmp_path / "ray", progress=False)["audited"] == 0  # local resumes it

    # another run's settings, nothing left to do: a probe actor's identity is refused, nothing written
    with pytest.raises(InputError, match="another run"):
        ray_audit_file(inp, tmp_path / "ray", rule="repcs", options=_options(batch_size=3), **kw)
    assert _by_id(tmp_path / "ray/results.jsonl") == resumed


def test_audit_parquet_input(ray_cluster: Any, tiny_service: tuple[Path, Path], tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mnemoscope.audit.auditor import Auditor, run_audit_file
    from mnemoscope.audit.profile import load_profile
    from mnemoscope.models import load_model
    from mnemoscope.pipelines.ray import ray_audit_file

    model_dir, profile = tiny_service
    rows = [
        {"id": f"p{i}", "context": f"Zor{i} lies on Ka{i}.", "query": f"Where is Zor{i}?"} for i in range(3)
    ]
    rows.append({"id": "p3", "context": "x", "query": ""})
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in.parquet")
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    kw = {"model": str(model_dir), "profile": str(profile), "options": _options(batch_size=4)}
    a = ray_audit_file(tmp_path / "in.parquet", tmp_path / "a", **kw)
    lm = load_model(str(model_dir))
    with _local_single_thread():
        b = run_audit_file(Auditor(lm, load_profile(profile, model=lm.info), batch_size=4), tmp_path / "in.jsonl",
                           tmp_path / "b", progress=False)  # fmt: skip
    assert a["audited"] == b["audited"] == 3 and a["errors"] == 1
    assert _by_id(tmp_path / "a/results.jsonl") == _by_id(tmp_path / "b/results.jsonl")
    err = json.loads((tmp_path / "a/errors.jsonl").read_text())
    assert (err["id"], err["field"], err["line"]) == ("p3", "query", 4)


def test_trace_folder_equals_local_engine(
    ray_cluster: Any, tiny_service: tuple[Path, Path], tmp_path: Path
) -> None:
    from mnemoscope.cli.main import main
    from mnemoscope.data import read_records
    from mnemoscope.errors import TraceStoreError
    from mnemoscope.models import load_model
    from mnemoscope.pipelines.ray import ray_run_pairs
    from mnemoscope.trace import PairConfig, PromptBuilder
    from mnemoscope.trace.pipeline import run_pairs
    from mnemoscope.trace.store import load_traces

    model_dir, _ = tiny_service
    inp = tmp_path / "in.jsonl"
    inp.write_text(
        "".join(
            json.dumps(
                {"id": f"t{i}", "context": f"Zor{i} lies on the river Ka{i}.", "query": f"Where is Zor{i}?"}
            )
            + "\n"
            for i in range(5)
        )
        + '{"id": "t5", "context": "c"}\n'
    )
    records, errors = read_records(inp)
    config = PairConfig(builder=PromptBuilder(chat=True), max_new_tokens=4, top_k=5)
    with _local_single_thread():
        local = run_pairs(load_model(str(model_dir)), records, tmp_path / "local", config=config, batch_size=2,
                          input_errors=errors, progress=False)  # fmt: skip
    # the Ray side through the CLI (it joins the session's cluster)
    code = main(["--quiet", "trace", "--input", str(inp), "--out", str(tmp_path / "ray"), "--model", str(model_dir),
                 "-T", "4", "--top-k", "5", "--chat", "--batch-size", "2", "--engine", "ray", "--workers", "2"])  # fmt: skip
    assert code == 0 and (local.n_traced, local.n_errors) == (5, 1)
    a = {t.id: t for t in load_traces(tmp_path / "local")}
    ray_set = load_traces(tmp_path / "ray")
    b = {t.id: t for t in ray_set}
    assert a.keys() == b.keys() and len(ray_set.errors) == 1
    for k in a:
        for name in (
            "kl_steps",
            "answer_ids",
            "logprob_answer_with",
            "logprob_answer_without",
            "h_with",
            "h_without",
        ):
            assert np.array_equal(getattr(a[k], name), getattr(b[k], name)), (k, name)
    meta = lambda p: {k: v for k, v in json.loads(p.read_text()).items() if k != "created"}  # noqa: E731
    assert meta(tmp_path / "local/meta.json") == meta(tmp_path / "ray/meta.json")
    with pytest.raises(TraceStoreError):
        ray_run_pairs(records, tmp_path / "ray", config=PairConfig(max_new_tokens=3), model=str(model_dir),
                      options=_options(batch_size=2))  # fmt: skip


def test_repcs_score_equals_local_engine(
    ray_cluster: Any, tiny_service: tuple[Path, Path], tmp_path: Path
) -> None:
    from mnemoscope.models import load_model
    from mnemoscope.pipelines.ray import ray_score_file
    from mnemoscope.pipelines.repcs import score_file

    model_dir, profile = tiny_service
    inp = tmp_path / "in.jsonl"
    inp.write_text(
        "".join(json.dumps({"id": f"s{i}", "context": f"Zor{i} is on Ka{i}.", "query": f"Zor{i}?"}) + "\n" for i in range(5))
    )  # fmt: skip
    with _local_single_thread():
        local = score_file(load_model(str(model_dir)), profile, inp, tmp_path / "local.jsonl", batch_size=2,
                           progress=False)  # fmt: skip
    res = ray_score_file(
        profile, inp, tmp_path / "ray.jsonl", model=str(model_dir), options=_options(workers=2, batch_size=2)
    )
    assert res["scored"] == local["scored"] == 5
    assert _by_id(tmp_path / "local.jsonl") == _by_id(tmp_path / "ray.jsonl")
    again = ray_score_file(
        profile, inp, tmp_path / "ray.jsonl", model=str(model_dir), options=_options(batch_size=2)
    )
    assert (again["scored"], again["already_done"]) == (0, 5)


def test_bench_run_leaderboard_equals_local_engine(
    ray_cluster: Any, tiny_service: tuple[Path, Path], tmp_path: Path
) -> None:
    from mnemoscope.bench.datasets import Document
    from mnemoscope.pipelines.leaderboard import LeaderboardConfig, run_leaderboard
    from mnemoscope.pipelines.ray import ModelLoader, RayLeaderboardEngine

    model_dir, _ = tiny_service
    docs = [
        Document(id=f"d{i}", text=f"Document {i}: the river Ka{i} runs past Zor{i % 3}.", label=i % 2)
        for i in range(8)
    ]
    load = ModelLoader(str(model_dir))  # picklable: the actors load the model themselves
    cfg = LeaderboardConfig(methods=("loss", "zlib", "min_k_20", "lowercase"), n_resamples=50, batch_size=3)
    with _local_single_thread():
        local = run_leaderboard(docs, [("base", load)], tmp_path / "local", cfg, progress=False)
    ray_res = run_leaderboard(
        docs, [("base", load)], tmp_path / "ray", cfg, progress=False,
        engine=RayLeaderboardEngine(_options(workers=2)),
    )  # fmt: skip
    for m, v in local.scores["base"].items():
        assert np.array_equal(v, ray_res.scores["base"][m]), m
    assert local.entries == ray_res.entries


def test_unreachable_address_fails_fast(ray_cluster: Any, tmp_path: Path) -> None:
    import socket

    from mnemoscope.pipelines.ray import RayUnavailableError, connect

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused
        with pytest.raises(RayUnavailableError, match=f"cannot reach the Ray cluster at 127.0.0.1:{port}"):
            connect(_options(address=f"127.0.0.1:{port}"))
    with pytest.raises(RayUnavailableError, match="is not HOST:PORT"):
        connect(_options(address="nowhere"))


def test_cli_missing_ray_is_one_line(tmp_path: Path) -> None:
    inp = tmp_path / "in.jsonl"
    inp.write_text('{"id": "a", "context": "c", "query": "q"}\n')
    code = (
        "import sys; sys.modules['ray'] = None\n"  # what an environment without ray looks like
        "from mnemoscope.cli.main import main\n"
        f"sys.exit(main(['audit', '--input', {str(inp)!r}, '--out', {str(tmp_path / 'o')!r}, '--engine', 'ray']))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "mnemoscope[ray]" in lines[0], out.stderr


def _actor_pids() -> list[int]:
    """Processes whose title Ray set to the audit actor's (``ray::MapWorker(MapBatches(AuditWorker))...``)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone meanwhile
        if cmd.startswith("ray::MapWorker(MapBatches(AuditWorker))"):
            pids.append(int(d.name))
    return pids


@pytest.mark.real_model
def test_default_model_kill_a_worker_mid_run_every_record_once(
    ray_cluster: Any, real_lm: Any, tmp_path: Path
) -> None:
    """SIGKILL one of two actors after the first batch is written: Ray restarts it and retries its
    batch; every record ends up in results.jsonl exactly once, equal to the local engine's."""
    from mnemoscope.audit.auditor import Auditor, run_audit_file
    from mnemoscope.audit.profile import default_profile_path, load_profile
    from mnemoscope.pipelines.ray import ray_audit_file

    n = 6
    inp = tmp_path / "in.jsonl"
    inp.write_text(
        "".join(
            json.dumps({"id": f"r{i}", "context": f"The village of Quen{i}mar lies on the river Zorb{i}at.",
                        "query": f"Which river is Quen{i}mar on?"}) + "\n"
            for i in range(n)
        )
    )  # fmt: skip
    out = tmp_path / "ray"
    killed: list[tuple[int, int]] = []

    def killer() -> None:
        deadline = time.time() + 600
        while time.time() < deadline and not killed:
            done = (out / "results.jsonl").read_text().count("\n") if (out / "results.jsonl").exists() else 0
            pids = _actor_pids()
            if done >= 1 and pids:
                os.kill(pids[0], signal.SIGKILL)
                killed.append((pids[0], done))
            time.sleep(0.1)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    res = ray_audit_file(inp, out, options=_options(workers=2, batch_size=1))
    t.join(5)
    assert killed, "no actor was killed"
    assert killed[0][1] < n, "the kill came after the run had finished"
    ray_rows = _by_id(out / "results.jsonl")  # asserts no id twice
    assert sorted(ray_rows) == [f"r{i}" for i in range(n)] and res["audited"] == n
    assert res["engine"]["duplicate_batches_dropped"] == 0

    auditor = Auditor(
        real_lm, load_profile(default_profile_path(real_lm.info), model=real_lm.info), batch_size=1
    )
    with _local_single_thread():
        run_audit_file(auditor, inp, tmp_path / "local", progress=False)
    assert _by_id(tmp_path / "local/results.jsonl") == ray_rows


# -- tracing for calibration (RayTraceEngine) --------------------------------------------------------


def _calibration_records(n: int) -> list[Any]:
    """The first ``n`` shipped calibration records (what ``calibrate`` traces by default)."""
    from mnemoscope.bench.calibration_data import default_path
    from mnemoscope.data import read_records

    records, errors = read_records(default_path())
    assert not errors
    return list(records[:n])


def _calibration_pair_config(max_new_tokens: int = 4) -> Any:
    """The pair settings calibration traces with today on a model without a chat template
    (audit/calibrate.py: CRMExtractConfig(hidden=False).pair_config() plus the layout's stops):
    prompt A, plain task, the closed-book answer, no hidden states."""
    from mnemoscope.trace import PairConfig, PromptBuilder
    from mnemoscope.trace.templates import default_stops

    builder = PromptBuilder(template="A", task="plain", chat=False, stop=default_stops(False))
    return PairConfig(builder=builder, max_new_tokens=max_new_tokens, answer_without=True, hidden=False)


def _index_ids(folder: Path) -> list[str]:
    return [str(json.loads(x)["id"]) for x in (folder / "index.jsonl").read_text().splitlines() if x.strip()]


def _assert_same_traces(a_dir: Path, b_dir: Path, exact: bool) -> None:
    """Same ids, answers (both paths) and token ids; log-probs, KL and top-k within float tolerance
    (``exact``: bit for bit)."""
    from mnemoscope.trace.store import load_traces

    a = {t.id: t for t in load_traces(a_dir)}
    b = {t.id: t for t in load_traces(b_dir)}
    assert a.keys() == b.keys() and a
    for k in a:
        assert (a[k].answer_with, a[k].answer_without) == (b[k].answer_with, b[k].answer_without), k
        assert np.array_equal(a[k].answer_ids, b[k].answer_ids), k
        assert a[k].h_with is None and b[k].h_with is None  # a calibration without CRM traces no states
        for name in ("logprob_answer_with", "logprob_answer_without", "kl_steps", "topk_logprobs_with"):
            x, y = getattr(a[k], name), getattr(b[k], name)
            ok = np.array_equal(x, y) if exact else np.allclose(x, y, rtol=0, atol=1e-5)
            assert ok, (k, name, np.max(np.abs(x - y)))


def test_trace_engine_equals_in_process_calibration_tracing_and_resumes(
    ray_cluster: Any, tiny_service: tuple[Path, Path], tmp_path: Path
) -> None:
    from mnemoscope.errors import ModelMismatchError
    from mnemoscope.models import load_model
    from mnemoscope.pipelines.ray import ModelLoader, RayTraceEngine
    from mnemoscope.trace.pipeline import run_pairs

    model_dir, _ = tiny_service
    records = _calibration_records(7)
    config = _calibration_pair_config()
    lm = load_model(str(model_dir))
    with _local_single_thread():
        local = run_pairs(lm, records, tmp_path / "local", config=config, batch_size=2, decode="lockstep",
                          progress=False)  # fmt: skip
    assert local.n_traced == 7

    engine = RayTraceEngine.for_model(lm, _options(workers=2))
    # a first run stops after 3 records; the second traces the 4 others only
    first = engine.trace(records[:3], tmp_path / "ray", config, batch_size=2, progress=False)
    assert (first.n_traced, first.n_already_done) == (3, 0)
    second = engine.trace(records, tmp_path / "ray", config, batch_size=2, progress=False)
    assert (second.n_traced, second.n_already_done, second.n_errors) == (4, 3, 0)
    ids = _index_ids(tmp_path / "ray")
    assert sorted(ids) == sorted(r.id for r in records) and len(ids) == len(set(ids))
    meta = lambda p: {k: v for k, v in json.loads(p.read_text()).items() if k != "created"}  # noqa: E731
    assert meta(tmp_path / "local/meta.json") == meta(tmp_path / "ray/meta.json")
    # other batches than in process (3 + 4 records, cut by 2): padding differs, so within tolerance
    _assert_same_traces(tmp_path / "local", tmp_path / "ray", exact=False)

    # a fresh folder in one run: the very batches of run_pairs, so the very bits
    engine.trace(records, tmp_path / "fresh", config, batch_size=2, progress=False)
    _assert_same_traces(tmp_path / "local", tmp_path / "fresh", exact=True)

    # nothing left: no actor traces anything (a probe checks the folder's identity)
    again = engine.trace(records, tmp_path / "ray", config, batch_size=2, progress=False)
    assert (again.n_traced, again.n_already_done) == (0, 7) and _index_ids(tmp_path / "ray") == ids

    # actors that load other weights than the driver's model are refused before anything is written
    wrong = RayTraceEngine(_options(), model=ModelLoader(str(model_dir)), fingerprint="0" * 64)
    with pytest.raises(ModelMismatchError, match="not the driver's model"):
        wrong.trace(records, tmp_path / "wrong", config, batch_size=2, progress=False)
    assert not (tmp_path / "wrong" / "index.jsonl").exists()


class _SlowLoader:
    """Loads the tiny model, then makes each forward pass sleep, so that a batch takes long enough
    for a worker to be killed while it runs it. Shipped to the actors by value (cloudpickle)."""

    def __init__(self, spec: str, seconds: float):
        self.spec, self.seconds = spec, seconds

    def __call__(self, _: Any = None) -> Any:
        import functools

        from mnemoscope.models import load_model

        lm = load_model(self.spec)
        forward = lm.model.forward

        @functools.wraps(forward)
        def slow(*a: Any, **kw: Any) -> Any:
            time.sleep(self.seconds)
            return forward(*a, **kw)

        lm.model.forward = slow
        return lm


def _worker_pids(name: str) -> list[int]:
    """Processes whose title Ray set to an actor of ``name`` (``ray::MapWorker(MapBatches(NAME))...``)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone meanwhile
        if cmd.startswith(f"ray::MapWorker(MapBatches({name}))"):
            pids.append(int(d.name))
    return pids


@pytest.fixture
def by_value(ray_cluster: Any) -> Iterator[None]:
    """This module's classes (``_SlowLoader``) shipped to the actors by value: they cannot import tests/."""
    import ray.cloudpickle as cloudpickle

    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)
    try:
        yield
    finally:
        cloudpickle.unregister_pickle_by_value(module)


@pytest.mark.parametrize(
    "retries",
    [
        pytest.param({"max_retries": 3}, id="ray-retries-the-batch"),
        pytest.param({"max_retries": 0, "resubmits": 2}, id="driver-resubmits"),
    ],
)
def test_trace_engine_worker_killed_mid_run_every_record_once(
    ray_cluster: Any, by_value: None, tiny_service: tuple[Path, Path], tmp_path: Path, retries: dict[str, int]
) -> None:
    """SIGKILL one of two actors while it traces, after the first batch is written: Ray retries its
    batch (or, with no Ray retries, the driver submits what is missing again); every record is in
    the folder exactly once, equal to the in-process traces, and a resumed run traces nothing."""
    from mnemoscope.models import load_model
    from mnemoscope.pipelines.ray import RayTraceEngine
    from mnemoscope.trace.pipeline import run_pairs

    model_dir, _ = tiny_service
    records = _calibration_records(10)
    config = _calibration_pair_config()
    out = tmp_path / "ray"
    killed: list[tuple[int, int]] = []

    def killer() -> None:
        deadline = time.time() + 300
        while time.time() < deadline and not killed:
            index = out / "index.jsonl"
            done = len(_index_ids(out)) if index.exists() else 0
            pids = _worker_pids("TraceWorker")
            if done >= 1 and pids:
                os.kill(pids[0], signal.SIGKILL)
                killed.append((pids[0], done))
            time.sleep(0.05)

    engine = RayTraceEngine(_options(workers=2, **retries), model=_SlowLoader(str(model_dir), 0.25))
    t = threading.Thread(target=killer, daemon=True)
    t.start()
    summary = engine.trace(records, out, config, batch_size=1, progress=False)
    t.join(5)
    assert killed, "no actor was killed"
    assert killed[0][1] < len(records), "the kill came after the run had finished"
    ids = _index_ids(out)
    assert sorted(ids) == sorted(r.id for r in records) and len(ids) == len(set(ids)), ids
    assert summary.n_traced == len(records) and not summary.errors
    run = json.loads((out / "runs.jsonl").read_text().splitlines()[-1])
    # Ray's own retries cover one lost actor; without them the driver's re-submission does
    assert (run["resubmitted_rounds"] >= 1) == (retries["max_retries"] == 0), run

    again = engine.trace(records, out, config, batch_size=1, progress=False)
    assert (again.n_traced, again.n_already_done) == (0, len(records)) and _index_ids(out) == ids

    lm = load_model(str(model_dir))
    with _local_single_thread():
        run_pairs(
            lm, records, tmp_path / "local", config=config, batch_size=1, decode="lockstep", progress=False
        )
    _assert_same_traces(tmp_path / "local", out, exact=True)
