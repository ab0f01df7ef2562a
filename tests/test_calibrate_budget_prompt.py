"""``calibrate --max-records N`` / ``--budget`` (a balanced budget), ``--prompt FILE`` (the
application's own prompt) and ``--engine ray`` through the one calibrate command (issues 35, 36)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from helpers import tiny_lm, zor_records
from mnemoscope.cli.main import main

APP = [
    {"role": "system", "content": "You answer from the documents only.\n\nDocuments:\n{context}"},
    {"role": "user", "content": "{query}"},
]


def _records(path: Path, n: int) -> Path:
    rows = [
        {"id": r.id, "context": r.context, "query": r.query, "label": r.label, **(r.extra or {})}
        for r in zor_records(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_max_records_alone_draws_through_the_pipeline(tiny_folder, tmp_path, capsys):
    """The budget draw runs inside the one calibration pipeline: its rounds and forecast are
    printed before label verification (a tiny random model verifies nothing, and says so)."""
    argv = ["calibrate", "--model", str(tiny_folder), "--input", str(_records(tmp_path / "r.jsonl", 80)),
            "--out", str(tmp_path / "p"), "-T", "4", "--chat", "off", "--max-records", "40", "--threads", "1"]  # fmt: skip
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert "label verification on this model" in err and "16 items" in err  # the pilot round: a quarter


def test_a_bad_prompt_file_is_refused_before_the_model_loads(tmp_path, capsys):
    bad = tmp_path / "app.json"
    bad.write_text(json.dumps([{"role": "user", "content": "{query} only"}]), encoding="utf-8")
    rc = main(["calibrate", "--model", str(tmp_path / "no-such-model"), "--out", str(tmp_path / "p"),
               "--prompt", str(bad), "--max-records", "8"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc != 0 and "app.json has no {context} placeholder" in err
    rc = main(["calibrate", "--endpoint", "http://127.0.0.1:9/v1", "--out", str(tmp_path / "p"),
               "--engine", "ray", "--max-records", "8"])  # fmt: skip
    assert rc != 0 and "--engine ray traces in process" in capsys.readouterr().err
    rc = main(["calibrate", "--model", str(tmp_path / "m"), "--out", str(tmp_path / "p"), "--budget", "0"])
    assert rc != 0 and "--budget must be a positive number of minutes" in capsys.readouterr().err


def test_the_app_prompt_is_traced_recorded_and_read_back(tmp_path: Path):
    from mnemoscope.audit.calibrate import calibrate_profile
    from mnemoscope.audit.layout import profile_layout
    from mnemoscope.audit.profile import CalibrationConfig, load_profile
    from mnemoscope.trace.app_prompt import parse_app_prompt
    from mnemoscope.trace.store import load_traces

    lm = tiny_lm(layers=2)
    lm.tokenizer.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</s>{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    app = parse_app_prompt(APP, source="app.json")
    cfg = CalibrationConfig(max_new_tokens=4, labels="given", held_out_fraction=0, app_prompt=app)
    out = tmp_path / "p"
    calibrate_profile(lm, zor_records(24), out, cfg, progress=False)
    prof = load_profile(out, model=lm.info)
    assert prof.builder.app == app and prof.builder.chat
    assert profile_layout(prof.header) == "system"
    assert prof.header["prompt"]["app"]["fingerprint"]["sha256"] == app.fingerprint()["sha256"]
    t = next(iter(load_traces(out / "traces" / "pairs")))
    assert (
        t.prompt_with.startswith("<system>You answer from the documents only.") and t.context in t.prompt_with
    )
    assert t.prompt_without == t.prompt_with.replace(t.context, "", 1)
    # the audits build the same prompts
    assert prof.pair_config().builder.pair(t.context, t.query, lm.tokenizer) == (
        t.prompt_with,
        t.prompt_without,
    )


def test_calibrate_engine_ray_gives_the_in_process_figures(tiny_folder, tmp_path, capsys):
    try:
        import ray
    except ImportError:
        import os

        if os.environ.get("MNEMOSCOPE_REQUIRE_SERVICES") == "1":
            pytest.fail("ray is not installed (MNEMOSCOPE_REQUIRE_SERVICES=1)")
        pytest.skip("ray is not installed")
    from mnemoscope.audit.profile import load_profile

    records = _records(tmp_path / "r.jsonl", 40)
    common = ["--quiet", "calibrate", "--model", str(tiny_folder), "--input", str(records), "-T", "4",
              "--chat", "off", "--labels", "given", "--threads", "1"]  # fmt: skip
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        assert main([*common, "--out", str(tmp_path / "local"), "--batch-size", "4"]) == 0
        assert main([*common, "--out", str(tmp_path / "ray"), "--engine", "ray", "--workers", "2",
                     "--batch-size", "4"]) == 0  # fmt: skip
        # resumed: nothing is traced again
        assert main([*common, "--out", str(tmp_path / "ray"), "--engine", "ray", "--workers", "1",
                     "--batch-size", "4"]) == 0  # fmt: skip
    finally:
        if started:
            ray.shutdown()
    a: Any = load_profile(tmp_path / "local").header
    b: Any = load_profile(tmp_path / "ray").header
    assert b["data"]["n_traces_reused"] == b["data"]["n_traced"] == a["data"]["n_traced"] == 40
    assert a["repcs"]["tau"] == pytest.approx(b["repcs"]["tau"], abs=1e-4)
    assert a["split"]["held_out_ids"] == b["split"]["held_out_ids"]
    assert (a["verdict"] is None) == (b["verdict"] is None)
