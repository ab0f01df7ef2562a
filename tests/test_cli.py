"""CLI: JSON contract, batch mode, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from mnemoscope.cli.main import main
from mnemoscope.trace import load_traces


@pytest.fixture
def run(tmp_path, capsys):
    def _run(*argv):
        code = main(["--quiet", "--cache-dir", str(tmp_path / "cache"), *argv])
        out, err = capsys.readouterr()
        return code, out, err

    return _run


def test_trace_json_contract(run, tiny_folder):
    code, out, _ = run(
        "trace",
        "--model",
        str(tiny_folder),
        "--context",
        "Vell is a fox.",
        "--query",
        "Who is Vell?",
        "-T",
        "5",
        "--json",
    )
    assert code == 0
    d = json.loads(out)
    assert d["model"] == tiny_folder.name and d["n_layers"] == 3 and d["hidden_size"] == 64
    assert len(d["kl_per_step"]) == d["n_steps"] <= 5 and all(isinstance(x, float) for x in d["kl_per_step"])
    assert isinstance(d["answer_with_context"], str) and isinstance(d["answer_without_context"], str)
    assert len(d["displacement_norm_per_layer"]) == 4


def test_trace_human_summary(run, tiny_folder):
    code, out, _ = run("trace", "--model", str(tiny_folder), "--context", "", "--query", "Who?", "-T", "3")
    assert code == 0
    assert "KL(p_with || p_without)" in out and "both paths are the same prompt" in out


def test_batch_trace_skips_bad_lines_and_resumes(run, tiny_folder, tmp_path):
    inp = tmp_path / "pairs.jsonl"
    inp.write_text(
        json.dumps({"id": "a", "context": "Vell is a fox.", "query": "Who is Vell?", "label": "member"})
        + "\n"
        + "{broken\n"
        + json.dumps({"id": "b", "context": "Quenmar.", "query": "Where?", "label": 0})
        + "\n"
        + json.dumps({"id": "c", "context": "x", "query": ""})
        + "\n"
    )
    out = tmp_path / "traces"
    code, stdout, err = run(
        "trace", "--model", str(tiny_folder), "--input", str(inp), "--out", str(out), "-T", "3"
    )
    assert code == 0
    assert "line 2" in err and "line 4" in err and "field 'query'" in err
    assert "2 traced" in stdout
    traces = load_traces(out)
    assert sorted(t.id for t in traces) == ["a", "b"] and {t.label for t in traces} == {0, 1}
    assert len(traces.errors) == 2
    code, stdout, _ = run(
        "trace", "--model", str(tiny_folder), "--input", str(inp), "--out", str(out), "-T", "3"
    )
    assert code == 0 and "0 traced, 2 already done" in stdout
    code, _, err = run(
        "trace", "--model", str(tiny_folder), "--input", str(inp), "--out", str(out), "-T", "4"
    )
    assert code == 1 and "other settings" in err
    code, _, err = run(
        "trace",
        "--model",
        str(tiny_folder),
        "--input",
        str(inp),
        "--out",
        str(tmp_path / "s"),
        "-T",
        "3",
        "--on-error",
        "raise",
    )
    assert code == 1 and "line 2" in err and "invalid JSON" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["trace", "--query", "q", "--template", "Z"], "unknown template 'Z'"),
        (["trace", "--input", "x.jsonl"], "--input needs --out"),
        (["trace", "--context", "c"], "give --query"),
        (["trace", "--model", "./missing-folder", "--query", "q"], "no such model file or folder"),
        (["trace", "--model", "missing.gguf", "--query", "q"], "GGUF file not found"),
        (["validate", "--input", "nope.jsonl"], "input file not found"),
    ],
)
def test_errors_are_one_line(run, argv, message):
    code, _, err = run(*argv)
    assert code == 1
    assert message in err and "Traceback" not in err and err.count("\n") == 1


def test_validate(run, tmp_path):
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"id": 1, "context": "c", "query": "q", "label": "clean"}) + "\n")
    code, out, _ = run("validate", "--input", str(good))
    assert code == 0 and "1 valid, 0 invalid" in out
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": 1, "context": "c"}) + "\n")
    code, out, _ = run("validate", "--input", str(bad), "--json")
    assert code == 1 and json.loads(out)["errors"][0]["field"] == "query"


def test_models_command(run):
    code, out, _ = run("models", "--json")
    d = json.loads(out)
    assert code == 0 and "cache_dir" in d and "installed" in d["default"]


def test_console_script_help_is_fast_and_usage_errors_exit_2():
    r = subprocess.run(
        [sys.executable, "-m", "mnemoscope.cli.main", "--help"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0 and "trace" in r.stdout
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, mnemoscope.cli.main as m; "
            "print('torch' in sys.modules, 'transformers' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.stdout.split() == ["False", "False"]  # --help never pays for torch
    r = subprocess.run(
        [sys.executable, "-m", "mnemoscope.cli.main", "trace", "--bogus"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2


def test_threads_flag_on_model_commands(monkeypatch, capsys):
    import os

    from mnemoscope.cli.main import build_parser
    from mnemoscope.cli.options import resolve_threads

    assert resolve_threads(3) == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert resolve_threads("auto") == 2
    monkeypatch.delenv("OMP_NUM_THREADS")
    cores = len(os.sched_getaffinity(0))
    assert 1 <= resolve_threads("auto") <= cores
    parser = build_parser()
    for argv in (
        ["bench", "run", "--suite", "membership", "--out", "x"],
        ["audit", "--context", "c", "--query", "q"],
    ):
        assert parser.parse_args([*argv, "--threads", "1"]).threads == 1
        assert parser.parse_args(argv).threads == "auto"
    with pytest.raises(SystemExit) as e:
        parser.parse_args(["bench", "run", "--suite", "membership", "--out", "x", "--threads", "0"])
    assert e.value.code == 2
    assert "expected a positive integer or 'auto'" in capsys.readouterr().err


@pytest.mark.parametrize("module", ["mnemoscope.bench.reliance", "mnemoscope.bench.corpus"])
def test_data_generators_require_out(module, capsys):
    """They never default into the installed package's own data folder."""
    import importlib

    with pytest.raises(SystemExit) as e:
        importlib.import_module(module).main([])
    assert e.value.code == 2
    assert "--out" in capsys.readouterr().err


def test_render_audit_marks_pieces_without_colour():
    from mnemoscope.cli.render import render_audit, use_colour

    d = {
        "answer": "The river Zorblat runs.",
        "spans": [{"source": "context", "start": 10, "end": 17}, {"source": "neutral", "start": 0, "end": 3}],
        "source": "context",
        "p_memory": 0.04,
        "summary": "Answered from the context.",
        "evidence": {
            "repcs_z": 22.19,
            "tau": 5.96,
            "closed_book_logprob": None,
            "context_token_fraction": 1.0,
        },
        "guarantee": {"statement": "at most 0.05"},
        "rule": "combined",
        "notes": ["n1"],
    }
    text = render_audit(d, colour=False)
    assert "The river [ctx: Zorblat] runs." in text
    assert "Verdict: CONTEXT   p_memory = 0.04" in text
    assert "closed-book log-prob = not measured" in text and "100 %" in text and "Note: n1" in text
    assert "\033[" in render_audit(d, colour=True)
    assert use_colour("always", sys.stdout) and not use_colour("never", sys.stdout)


def test_sdist_carries_license_tests_and_what_they_read(tmp_path):
    """The source distribution (MANIFEST.in) holds the licence, the test helpers, the docs the README
    links to and the committed result files; the wheel's metadata carries the licence expression."""
    import tarfile
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from setuptools import build_meta as b; print(b.build_sdist({str(tmp_path)!r}))",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    name = r.stdout.strip().splitlines()[-1]
    with tarfile.open(tmp_path / name) as tar:
        members = {m.split("/", 1)[1] for m in tar.getnames() if "/" in m}
        pkg_info = tar.extractfile(f"{name[: -len('.tar.gz')]}/PKG-INFO").read().decode()  # type: ignore[union-attr]
    for need in (
        "LICENSE",
        "tests/conftest.py",
        "tests/helpers.py",
        "tests/server_helpers.py",
        "docs/architecture.md",
        "benchmarks/results/verdict/eval.json",
        "benchmarks/results/verdict/verified.jsonl",
        "benchmarks/results/calibration/smollm2-135m-instruct-grounded-t128/held_out.jsonl",
        "benchmarks/results_manifest.py",
        "benchmarks/results/membership/roc.png",
    ):
        assert need in members, need
    assert not any("__pycache__" in m or "/cache/" in m for m in members)
    assert "License-Expression: Apache-2.0" in pkg_info and "License-File: LICENSE" in pkg_info
    assert "Project-URL: Documentation" in pkg_info and "Classifier: Typing :: Typed" in pkg_info
    assert 'Requires-Dist: tomli>=1.1; python_version < "3.11" and extra == "server"' in pkg_info


def test_calibrate_command_writes_a_profile_and_says_what_it_fitted(tiny_folder, tmp_path, capsys):
    records = tmp_path / "calib.jsonl"
    records.write_text(
        "".join(
            json.dumps({"id": f"r{i}", "context": f"The town of Zor{i} lies on the river Ka{i % 5}.",
                        "query": f"Where is Zor{i}?", "label": i % 2}) + "\n"
            for i in range(40)
        )
    )  # fmt: skip
    out = tmp_path / "profile"
    argv = ["calibrate", "--model", str(tiny_folder), "--input", str(records), "--out", str(out), "-T", "4",
            "--labels", "given"]  # fmt: skip
    assert main(["--quiet", *argv, "--threads", "1"]) == 0
    said = capsys.readouterr().out
    assert said.startswith(f"wrote {out}: ") and "RePCS tau" in said and "profile hash" in said
    assert (out / "profile.json").is_file()


def test_http_request_lines_are_quiet_unless_debugging() -> None:
    """An endpoint calibration sends thousands of requests: httpx's INFO line per request would
    drown the progress bar; --debug brings them back."""
    import logging

    from mnemoscope.cli.options import configure_logging

    configure_logging(quiet=False, debug=False)
    assert logging.getLogger("httpx").getEffectiveLevel() == logging.WARNING
    assert logging.getLogger("httpcore").getEffectiveLevel() == logging.WARNING
    logging.getLogger("httpx").setLevel(logging.NOTSET)
    logging.getLogger("httpcore").setLevel(logging.NOTSET)


def test_default_calibration_draws_until_enough_labels_verify(tiny_folder, tmp_path, monkeypatch):
    """On the shipped data without --max-records / --per-class, calibrate draws until 300 answers
    of each class verify (at most 2400 traced); --max-records alone is a budget the draw spends
    balanced (a fixed sample only with --labels given); --budget is a time budget."""
    import mnemoscope.audit.calibrate as cal
    from mnemoscope.audit.profile import DEFAULT_MAX_TRACED, DEFAULT_PER_CLASS

    seen: list[tuple[int, Any]] = []

    class Stop(Exception):
        pass

    def fake(lm, records, out, config, **kw):  # type: ignore[no-untyped-def]
        seen.append((len(records), config))
        raise Stop

    monkeypatch.setattr(cal, "calibrate", fake)
    base = [
        "--quiet",
        "calibrate",
        "--model",
        str(tiny_folder),
        "--out",
        str(tmp_path / "p"),
        "--threads",
        "1",
    ]
    with pytest.raises(Stop):
        main(base)
    n, cfg = seen[-1]
    assert (cfg.per_class, cfg.max_traced) == (DEFAULT_PER_CLASS, DEFAULT_MAX_TRACED) == (300, 2400)
    assert n > 2400  # the whole shipped pool: the draw picks from it
    with pytest.raises(Stop):
        main([*base, "--max-records", "60"])
    n, cfg = seen[-1]
    assert cfg.per_class is None and cfg.max_traced == 60 and cfg.draws and n > 2400
    with pytest.raises(Stop):
        main([*base, "--max-records", "60", "--labels", "given"])
    n, cfg = seen[-1]
    assert cfg.per_class is None and cfg.max_traced is None and not cfg.draws and n == 60
    with pytest.raises(Stop):
        main([*base, "--budget", "7.5"])
    n, cfg = seen[-1]
    assert cfg.per_class is None and cfg.budget_seconds == 450.0 and cfg.max_traced == 2400 and cfg.draws
    # the verdict's signals: the black-box three by default, CRM's classifier opt-in
    from mnemoscope.detectors.verdict import DEFAULT_CANDIDATES

    assert cfg.verdict_candidates == DEFAULT_CANDIDATES
    with pytest.raises(Stop):
        main([*base, "--max-records", "60", "--verdict-signals", "repcs_z, crm_probability,repcs_z"])
    assert seen[-1][1].verdict_candidates == ("repcs_z", "crm_probability")
    assert seen[-1][1].certify == "marginal"
    with pytest.raises(Stop):
        main([*base, "--max-records", "60", "--certify", "per-kind"])
    assert seen[-1][1].certify == "per-kind"


def test_calibrate_refuses_an_unknown_verdict_signal(tiny_folder, tmp_path, capsys):
    args = ["--quiet", "calibrate", "--model", str(tiny_folder), "--out", str(tmp_path / "p")]
    rc = main([*args, "--max-records", "8", "--verdict-signals", "repcs_z,nope"])
    err = capsys.readouterr().err
    assert rc != 0 and "nope" in err and "crm_probability" in err and "verdict_signals" in err
    rc = main([*args, "--max-records", "8", "--verdict-signals", "repcs_z,lts_score"])
    assert rc != 0 and "lts_score" in capsys.readouterr().err  # reported by audits, not a verdict signal
