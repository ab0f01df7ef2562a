"""A results folder that explains itself (issue 36): each row's query and context digest, each
run's command, commit, profile and time in ``meta.json``; ``mnemoscope report DIR`` from the folder
alone; old folders reported with what they lack; bad folders refused naming the file and line."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from mnemoscope.audit.results import ResultsFile, ResultsFolder, context_digest, row_fields
from mnemoscope.cli.main import main
from mnemoscope.errors import InputError

IDENT = {"model": {"fingerprint": "m1"}, "profile_hash": "p1", "settings": {"rule": "combined"}}


def _meta(out: Path) -> dict[str, Any]:
    return json.loads((out / "meta.json").read_text())


# -- what a row records of its request ----------------------------------------------------------------


def test_row_fields_keep_the_query_and_the_context_digest() -> None:
    from mnemoscope.audit.requests import AuditRequest

    req = AuditRequest("Quenmar lies on the Zorblat.", "Which river?", id="a")
    digest = "sha256:" + hashlib.sha256(b"Quenmar lies on the Zorblat.").hexdigest()
    assert context_digest(req.context) == digest
    assert row_fields(req) == {"query": "Which river?", "context_sha256": digest}
    assert row_fields(req, store_context=True)["context"] == req.context
    # the digest is of the UTF-8 bytes: a non-ASCII context is hashed as written
    assert context_digest("Zürich") == "sha256:" + hashlib.sha256("Zürich".encode()).hexdigest()


# -- run records --------------------------------------------------------------------------------------


def test_each_run_appends_its_record_and_the_identity_ignores_them(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = ResultsFolder(
        out, {**IDENT, "run": {"profile": {"path": "/a/prof", "hash": "p1"}}}, command=["x", "1"]
    )
    first.append(['{"id": "1"}', '{"id": "2"}'])
    first.end_run([{"id": "3", "message": "bad", "status": 422}])
    meta = _meta(out)
    assert "run" not in meta and set(meta) == {"format", "model", "profile_hash", "settings", "runs"}
    (r1,) = meta["runs"]
    assert r1["command"] == "x 1" and r1["profile"] == {"path": "/a/prof", "hash": "p1"}
    assert (
        r1["done_before"] == 0 and r1["appended"] == 2 and r1["errors"] == 1 and r1["outcome"] == "finished"
    )
    assert r1["started"] <= r1["ended"] and "git_commit" in r1 and r1["mnemoscope"]
    # a resumed run with the same profile at another path: same identity, a second record
    second = ResultsFolder(
        out, {**IDENT, "run": {"profile": {"path": "/b/prof", "hash": "p1"}}}, command=["y"]
    )
    assert second.done_ids == {"1", "2"}
    second.append(['{"id": "3"}'])
    second.write_errors([])  # the Ray driver's end: the outcome is not recorded
    runs = _meta(out)["runs"]
    assert [r["command"] for r in runs] == ["x 1", "y"]
    assert runs[0] == r1  # an earlier record is never rewritten
    assert runs[1]["done_before"] == 2 and runs[1]["appended"] == 1 and runs[1]["outcome"] is None
    assert runs[1]["profile"]["path"] == "/b/prof"
    # another profile (hash), model or rule is refused as before, and the refusal writes nothing
    for other in (
        {**IDENT, "profile_hash": "p2"},
        {**IDENT, "model": {"fingerprint": "m2"}},
        {**IDENT, "settings": {"rule": "repcs"}},
    ):
        with pytest.raises(InputError, match="holds results of another run"):
            ResultsFolder(out, other)
    assert len(_meta(out)["runs"]) == 2


def test_a_folder_of_an_older_version_resumes_and_says_what_came_before(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "meta.json").write_text(json.dumps({"format": "mnemoscope-audit-results/1", **IDENT}))
    (out / "results.jsonl").write_text('{"id": "old-1"}\n{"id": "old-2"}\n')
    f = ResultsFolder(out, IDENT, command=["mnemoscope", "audit"])
    assert f.done_ids == {"old-1", "old-2"}
    (run,) = _meta(out)["runs"]
    assert run["done_before"] == 2  # the report says these came from unrecorded runs


def test_a_corrupt_line_or_meta_names_the_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "results.jsonl"
    p.write_text('{"id": "a"}\n{"id": "b", oops\n{"id": "c"}\n')
    with pytest.raises(InputError, match=r"results\.jsonl line 2 is not valid JSON"):
        _ = ResultsFile(p).done_ids
    p.write_text('{"id": "a"}\n["not", "a", "row"]\n')
    with pytest.raises(InputError, match=r"results\.jsonl line 2 is not a results row"):
        _ = ResultsFile(p).done_ids
    out = tmp_path / "out"
    out.mkdir()
    (out / "meta.json").write_text('{"format": "mnemoscope-audit-results/1",\n "model": }')
    with pytest.raises(InputError, match=r"meta\.json is not valid JSON .*line 2"):
        ResultsFolder(out, IDENT)


# -- the batch audit writes it; the report reads the folder alone ------------------------------------------


@pytest.fixture(scope="module")
def tiny(tiny_service: Any) -> tuple[str, str]:
    model_dir, prof = tiny_service
    return str(model_dir), str(prof)


def _write_input(path: Path, n: int, offset: int = 0) -> list[dict[str, str]]:
    recs = [
        {
            "id": f"r{i}",
            "context": f"The town of Velm{i} lies on the river Odrin.",
            "query": f"Where is Velm{i}?",
        }
        for i in range(offset, offset + n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return recs


def test_batch_audit_records_queries_and_runs_and_the_report_needs_nothing_else(
    tiny: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mnemoscope.audit.profile import load_profile
    from mnemoscope.report.batch import load_run

    model, prof = tiny
    out = tmp_path / "out"
    recs = _write_input(tmp_path / "a.jsonl", 3)
    base = ["-q", "audit", "--model", model, "--profile", prof, "--out", str(out), "--batch-size", "2"]
    assert main([*base, "--input", str(tmp_path / "a.jsonl")]) == 0
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [(r["id"], r["query"]) for r in rows] == [(r["id"], r["query"]) for r in recs]
    assert [r["context_sha256"] for r in rows] == [context_digest(r["context"]) for r in recs]
    assert all("context" not in r for r in rows)  # not stored unless asked
    # a second file into the same folder: resumed, a second run record
    recs += _write_input(tmp_path / "b.jsonl", 2, offset=3)
    assert main([*base, "--input", str(tmp_path / "b.jsonl"), "--store-context"]) == 0
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [r.get("context") for r in rows[3:]] == [r["context"] for r in recs[3:]]
    capsys.readouterr()
    runs = _meta(out)["runs"]
    assert len(runs) == 2
    assert runs[0]["command"].startswith("mnemoscope -q audit --model") and "a.jsonl" in runs[0]["command"]
    assert "b.jsonl" in runs[1]["command"] and runs[1]["done_before"] == 3
    p = load_profile(prof)
    assert all(r["profile"] == {"path": str(Path(prof).resolve()), "hash": p.content_hash} for r in runs)
    assert [r["appended"] for r in runs] == [3, 2] and all(r["outcome"] == "finished" for r in runs)

    # the report: queries and runs from the folder, no --input, nothing "left out"
    run = load_run(out)
    assert run.notes == [] and run.skipped == [] and len(run.runs) == 2
    assert [run.query_of(r) for r in run.rows] == [r["query"] for r in recs]
    assert main(["report", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert "a.jsonl" in page and "b.jsonl" in page and p.content_hash[:12] in page
    assert "results.jsonl last modified" not in page and "What this report left out" not in page
    assert main(["report", str(out), "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert "- run 1: mnemoscope -q audit" in md and "- run 2:" in md and "(not recorded)" not in md

    # the same folder with another rule (settings) is refused, and so is another profile
    assert main([*base, "--input", str(tmp_path / "a.jsonl"), "--rule", "repcs"]) == 1
    assert "holds results of another run (differs in settings)" in capsys.readouterr().err
    meta = _meta(out)
    (out / "meta.json").write_text(json.dumps({**meta, "profile_hash": "0" * 64}))
    assert main([*base, "--input", str(tmp_path / "a.jsonl")]) == 1
    assert "differs in profile_hash" in capsys.readouterr().err
    (out / "meta.json").write_text(json.dumps(meta))
    # a corrupt line: the resumed audit names the file and the line; the report lists it
    lines = (out / "results.jsonl").read_text().splitlines()
    lines[1] = lines[1][:40]
    (out / "results.jsonl").write_text("\n".join(lines) + "\n")
    assert main([*base, "--input", str(tmp_path / "a.jsonl")]) == 1
    assert "results.jsonl line 2 is not valid JSON" in capsys.readouterr().err
    assert [(s.file, s.line) for s in load_run(out).skipped] == [("results.jsonl", 2)]
    assert len(_meta(out)["runs"]) == 2  # refused runs leave no record


def test_store_context_is_refused_where_it_does_not_apply(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "--query", "q?", "--store-context"]) == 1
    assert "--store-context needs --input" in capsys.readouterr().err
    assert main(["audit", "--input", "x.jsonl", "--out", "o", "--engine", "ray", "--store-context"]) == 1
    assert "not supported with --engine ray" in capsys.readouterr().err


def test_report_of_an_old_folder_says_what_is_missing_and_takes_queries_from_input(tmp_path: Path) -> None:
    from mnemoscope.report.batch import load_run, render_markdown, run_payload
    from mnemoscope.report.batch_html import render_html

    d = tmp_path / "old"
    d.mkdir()
    (d / "meta.json").write_text(json.dumps({"format": "mnemoscope-audit-results/1", **IDENT}))
    rows = [
        {"id": "o1", "source": "memory", "answer": "Rome."},
        {"id": "o2", "source": "context", "answer": "Odrin."},
    ]
    (d / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = load_run(d)
    assert run.runs == [] and run.queries == {}
    assert any("meta.json records no run" in n for n in run.notes)
    assert any("2 of 2 results do not store their query" in n and "--input" in n for n in run.notes)
    page = render_html(run_payload(run))
    assert (
        "results.jsonl last modified; meta.json records no run" in page and "meta.json records no run" in page
    )
    assert "do not store their query" in render_markdown(run)
    # --input fills the queries
    inp = tmp_path / "in.jsonl"
    inp.write_text(
        json.dumps({"id": "o1", "context": "c1", "query": "Capital of Italy?"})
        + "\n"
        + json.dumps({"id": "o2", "context": "c2", "query": "Which river?"})
        + "\n"
    )
    run = load_run(d, input_path=inp)
    assert [run.query_of(r) for r in run.rows] == ["Capital of Italy?", "Which river?"]
    assert not any("do not store their query" in n for n in run.notes)


def test_report_notes_an_input_that_is_not_the_audited_one(tmp_path: Path) -> None:
    from mnemoscope.report.batch import load_run

    d = tmp_path / "new"
    d.mkdir()
    row = {
        "id": "a",
        "source": "context",
        "answer": "Odrin.",
        "query": "Which river?",
        "context_sha256": context_digest("c"),
    }
    (d / "results.jsonl").write_text(json.dumps(row) + "\n")
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"id": "a", "context": "another context", "query": "Which river?"}) + "\n")
    run = load_run(d, input_path=inp)
    assert any("1 records of in.jsonl differ from the ones audited" in n and "id a" in n for n in run.notes)
    assert run.query_of(run.rows[0]) == "Which river?"
    inp.write_text(json.dumps({"id": "a", "context": "c", "query": "Which river?"}) + "\n")
    assert not any("differ" in n for n in load_run(d, input_path=inp).notes)


def test_endpoint_batch_records_the_same(llama_server: Any, endpoint_profile: Any, tmp_path: Path) -> None:
    """Over an endpoint (a real llama.cpp server): the same row fields and run record."""
    from mnemoscope.audit.auditor import Auditor, run_audit_file
    from mnemoscope.models.endpoint import EndpointClient, EndpointConfig

    inp = tmp_path / "in.jsonl"
    recs = [
        {"id": "e1", "context": "Paris is the capital of France.", "query": "What is the capital of France?"},
        {"id": "e2", "context": "The town of Velmora lies on the river Odrin.", "query": "Where is Velmora?"},
    ]
    inp.write_text("".join(json.dumps(r) + "\n" for r in recs))
    with EndpointClient(EndpointConfig(llama_server.base_url, concurrency=1, timeout=300)) as c:
        aud = Auditor.from_endpoint(c, endpoint_profile, check_identity=False)
        s = run_audit_file(
            aud, inp, tmp_path / "out", progress=False, command=["mnemoscope", "x"], store_context=True
        )
    assert s["audited"] == 2
    rows = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert [(r["query"], r["context"], r["context_sha256"]) for r in rows] == [
        (r["query"], r["context"], context_digest(r["context"])) for r in recs
    ]
    meta = _meta(tmp_path / "out")
    assert meta["settings"]["backend"] == "endpoint"
    (run,) = meta["runs"]
    assert run["command"] == "mnemoscope x" and run["appended"] == 2 and run["outcome"] == "finished"
    assert run["profile"] == {"path": str(Path(aud.profile.path).resolve()), "hash": aud.profile.content_hash}
