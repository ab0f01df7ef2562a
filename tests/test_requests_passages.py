"""A context given as a list of passages (issue 41): the request contract, batch records, the CLI
flag, the server body, the proxy's split rule and the integrations' documents -> passages."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mnemoscope.audit.requests import (
    AUDIT_RECORD_FIELDS,
    AuditFailure,
    AuditRequest,
    check_passages,
    check_request,
    parse_audit_lines,
    passages_too_long,
)
from mnemoscope.errors import InputError
from mnemoscope.trace.passages import join_passages, split_passage_spans, split_passages

# -- the request ----------------------------------------------------------------------------------


def test_from_passages_joins_by_the_one_rule_and_check_request_holds_it() -> None:
    r = AuditRequest.from_passages(
        ["Paris is in France. ", "Lyon is on the Rhone."], "Where?", answer="In France"
    )
    assert r.context == join_passages(r.passages or ()) == "Paris is in France.\n\nLyon is on the Rhone."
    assert r.passages == ("Paris is in France. ", "Lyon is on the Rhone.") and r.answer == "In France"
    assert check_request(r, 8) is None
    bad = AuditRequest("Paris is in France.", "Where?", passages=("Paris is in France.", "Lyon."))
    f = check_request(bad, 8)
    assert f is not None and f.status == 422 and f.field == "passages" and "from_passages" in f.message
    # a list (a request that went through JSON) is kept as a tuple
    assert AuditRequest("a\n\nb", "q", passages=["a", "b"]).passages == ("a", "b")  # type: ignore[arg-type]


def test_prompts_requests_need_the_passages_verbatim_in_order() -> None:
    ctx = "Notes:\n[1] Paris is in France.\n[2] Lyon is on the Rhone."
    ok = AuditRequest(ctx, "q", prompts=("p with", "p without"), passages=tuple(split_passages(ctx)))
    assert check_request(ok, 8) is None
    swapped = AuditRequest(ctx, "q", prompts=("p", "p0"), passages=tuple(reversed(split_passages(ctx))))
    f = check_request(swapped, 8)
    assert f is not None and f.field == "passages" and "passages[1] is not in the context" in f.message


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("one string", "must be a list of strings, got str"),
        ([], "is an empty list"),
        (["a", 3], "passages[1] must be a string, got int"),
        (["a", "  \n"], "passages[1] is empty"),
        (["a", "b", " a "], "passages[0] and passages[2] are the same text"),
        (["a", "b\x07"], "passages[1] contains the control character U+0007"),
    ],
)
def test_check_passages_names_the_passage(value: Any, message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)) as e:
        check_passages(value, record="r1")
    assert e.value.field == "passages" and e.value.record == "r1"
    with pytest.raises(InputError):
        AuditRequest.from_passages(value, "q")


def test_a_413_on_a_passages_request_names_the_longest_passage() -> None:
    r = AuditRequest.from_passages(["short one", "the longest passage of the three", "mid size"], "q")
    f = AuditFailure(413, "context has 60 tokens; the limit is 20", "context", kind="InputTooLongError")
    out = passages_too_long(r, f, count=lambda s: len(s.split()), unit="tokens")
    assert out.status == 413 and out.field == "passages" and out.kind == "InputTooLongError"
    assert "the limit is 20" in out.message and "passages[1] (6 tokens)" in out.message
    # the tracer's window refusal names the prompt: the same
    assert passages_too_long(r, AuditFailure(413, "prompt is 900 tokens", "prompt")).field == "passages"
    # anything else is returned as is
    plain = AuditRequest("ctx", "q")
    assert passages_too_long(plain, f) is f
    q413 = AuditFailure(413, "query has 90 tokens", "query")
    assert passages_too_long(r, q413) is q413
    prepared = ("rid", r)
    assert passages_too_long(r, prepared) is prepared


# -- batch records ---------------------------------------------------------------------------------


def _parse(*records: Any) -> list[tuple[int, Any]]:
    lines = [(r if isinstance(r, str) else json.dumps(r)).encode() for r in records]
    return list(parse_audit_lines(lines))


def test_batch_records_bad_inputs_are_per_record_errors_and_the_rest_goes_on() -> None:
    out = _parse(
        {"id": "ok1", "context": "Paris.", "query": "q"},
        {"id": "nocontext", "query": "q"},
        {"id": "extra", "context": "c", "query": "q", "label": "clean", "kind": "x"},
        {"id": "notlist", "passages": "Paris.", "query": "q"},
        {"id": "notstr", "passages": ["Paris.", {"t": 1}], "query": "q"},
        {"id": "emptylist", "passages": [], "query": "q"},
        {"id": "blank", "passages": ["Paris.", " "], "query": "q"},
        {"id": "both", "context": "c", "passages": ["Paris."], "query": "q"},
        {"id": "dups", "passages": ["Paris.", "Lyon.", "Paris."], "query": "q"},
        {"id": "emptyctx", "context": "", "query": "q"},
        {"id": "ok2", "passages": ["Paris. ", "Lyon."], "query": "q", "max_new_tokens": 3},
    )
    got = {(item.id if isinstance(item, AuditRequest) else item.record): item for _, item in out}
    assert [line for line, _ in out] == list(range(1, 12))
    ok = [k for k, v in got.items() if isinstance(v, AuditRequest)]
    assert ok == ["ok1", "emptyctx", "ok2"]
    assert got["emptyctx"].context == "" and got["emptyctx"].passages is None  # explicit empty: valid
    assert got["ok2"].context == "Paris.\n\nLyon." and got["ok2"].passages == ("Paris. ", "Lyon.")
    assert got["ok2"].max_new_tokens == 3
    expect = {
        "nocontext": ("context", "missing"),
        "extra": ("label", "unknown fields 'label', 'kind'"),
        "notlist": ("passages", "must be a list of strings"),
        "notstr": ("passages", "passages[1] must be a string, got dict"),
        "emptylist": ("passages", "is an empty list"),
        "blank": ("passages", "passages[1] is empty"),
        "both": ("passages", "either context or passages, not both"),
        "dups": ("passages", "passages[0] and passages[2] are the same text"),
    }
    for rid, (field, text) in expect.items():
        e = got[rid]
        assert isinstance(e, InputError) and e.field == field and text in e.reason, (rid, e)
        assert f"record {rid}" in str(e) and f"field '{field}'" in str(e)
    assert all(f in got["extra"].reason for f in AUDIT_RECORD_FIELDS)  # the known fields listed


def test_every_record_without_a_context_field_is_reported(tmp_path: Path) -> None:
    """The issue's case: 60 records without ``context`` were audited as empty contexts, silently."""
    from mnemoscope.audit.requests import read_audit_inputs

    p = tmp_path / "in.jsonl"
    p.write_text("".join(json.dumps({"id": f"r{i}", "query": "Where?"}) + "\n" for i in range(60)))
    out = list(read_audit_inputs(p))
    assert len(out) == 60 and all(isinstance(e, InputError) and e.field == "context" for _, e in out)


def test_ray_parquet_rows_read_only_the_record_columns(tmp_path: Path, caplog: Any) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from mnemoscope.pipelines.ray.runners import _audit_inputs

    rows = [
        {"id": "a", "context": "Paris.", "passages": None, "query": "q", "label": 1},
        {"id": "b", "context": None, "passages": ["Paris.", "Lyon."], "query": "q", "label": 0},
        {"id": "c", "context": None, "passages": None, "query": "q", "label": 0},
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in.parquet")
    with caplog.at_level("WARNING"):
        out = dict(_audit_inputs(tmp_path / "in.parquet"))
    assert "columns not read" in caplog.text and "label" in caplog.text
    assert isinstance(out[1], AuditRequest) and out[1].context == "Paris."
    assert isinstance(out[2], AuditRequest) and out[2].passages == ("Paris.", "Lyon.")
    assert isinstance(out[3], InputError) and out[3].field == "context"


# -- the CLI ---------------------------------------------------------------------------------------


@pytest.fixture
def run(tmp_path: Path, capsys: Any) -> Any:
    from mnemoscope.cli.main import main

    def _run(*argv: str) -> tuple[int, str, str]:
        code = main(["--quiet", "--cache-dir", str(tmp_path / "cache"), *argv])
        out, err = capsys.readouterr()
        return code, out, err

    return _run


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--passage", "a", "--context", "b", "--query", "q"], "either --context or --passage"),
        (["--passage", "a", "--passage", " a", "--query", "q"], "passages[0] and passages[1] are the same"),
        (["--passage", "a", "--passage", "  ", "--query", "q"], "passages[1] is empty"),
        (["--passage", "a", "--input", "x.jsonl", "--out", "o"], "either --input FILE or"),
        (["--passage", "a"], "give --query"),
    ],
)
def test_cli_passage_flag_errors_before_any_model(run: Any, argv: list[str], message: str) -> None:
    code, _, err = run("audit", "--model", "/nonexistent/model", *argv)
    assert code == 1 and message in err and "Traceback" not in err


def test_cli_passages_make_the_request(tiny_folder: Path) -> None:
    from mnemoscope.cli.audit_cmd import _request
    from mnemoscope.cli.main import build_parser

    args = build_parser().parse_args(
        ["audit", "--passage", "Zor1 lies on Ka1.", "--passage", "Ka1 is a river.", "--query", "Where?"]
    )
    r = _request(args)
    assert (
        r.passages == ("Zor1 lies on Ka1.", "Ka1 is a river.")
        and r.context == "Zor1 lies on Ka1.\n\nKa1 is a river."
    )
    args = build_parser().parse_args(["audit", "--context", "Zor1.", "--query", "Where?"])
    assert _request(args).passages is None and _request(args).context == "Zor1."


# -- the server ------------------------------------------------------------------------------------


def test_server_body_passages_exclusive_with_context() -> None:
    pytest.importorskip("fastapi")
    from pydantic import ValidationError

    from mnemoscope.server.config import load_settings
    from mnemoscope.server.routes.audit import job_of
    from mnemoscope.server.schemas import AuditIn

    job = job_of(AuditIn(passages=["Paris. ", "Lyon."], query="q"), load_settings(None, env={}))
    assert job.request.context == "Paris.\n\nLyon." and job.request.passages == ("Paris. ", "Lyon.")
    job = job_of(AuditIn(context="", query="q"), load_settings(None, env={}))
    assert job.request.context == "" and job.request.passages is None
    for body, text in [
        ({"query": "q"}, "give context"),
        ({"query": "q", "context": "c", "passages": ["a"]}, "not both"),
        ({"query": "q", "passages": []}, "at least 1"),
        ({"query": "q", "passages": ["a", " "]}, "passages[1] is empty"),
        ({"query": "q", "passages": ["a", "b", "a"]}, "passages[0] and passages[2]"),
    ]:
        with pytest.raises(ValidationError) as e:
            AuditIn(**body)
        (err,) = e.value.errors()
        assert err["loc"] == ("passages",) and text in err["msg"], body


def test_server_answers_422_naming_passages(tiny_service: tuple[Path, Path], tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from mnemoscope.audit.auditor import Auditor
    from mnemoscope.audit.profile import load_profile
    from mnemoscope.models import load_model
    from mnemoscope.server.app import create_app
    from mnemoscope.server.config import load_settings
    from mnemoscope.server.storage import open_store

    model_dir, profile = tiny_service
    lm = load_model(str(model_dir))
    settings = load_settings(None, env={"MNEMOSCOPE_API_KEYS": "k"})
    app = create_app(settings, engine=Auditor(lm, load_profile(profile)), store=open_store(tmp_path / "s.db"))
    h = {"Authorization": "Bearer k"}
    with TestClient(app) as c:
        r = c.post("/v1/audit", json={"query": "q", "context": "c", "passages": ["a"]}, headers=h)
        assert r.status_code == 422 and r.json()["field"] == "passages" and "not both" in r.json()["detail"]
        r = c.post("/v1/audit", json={"query": "q", "passages": ["a", "a"]}, headers=h)
        assert r.status_code == 422 and r.json()["field"] == "passages"
        r = c.post("/v1/audit/batch", json={"items": [{"query": "q"}]}, headers=h)
        assert r.status_code == 422 and r.json()["field"] == "items.0.passages"
        body = {"query": "Where is Zor1?", "passages": ["Zor1 lies on Ka1.", "Ka1 is a river."]}
        r = c.post("/v1/audit", json={**body, "options": {"max_new_tokens": 2}}, headers=h)
        assert r.status_code == 200, r.text
        assert r.json()["context"] == "Zor1 lies on Ka1.\n\nKa1 is a river."


# -- the proxy's split rule ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("context", "passages"),
    [
        (
            "[1] Paris is in France.\n[2] Lyon is on the Rhone.",
            ["[1] Paris is in France.", "[2] Lyon is on the Rhone."],
        ),
        ("Sources:\n\n[1] A\nmore of A\n\n[2] B", ["[1] A\nmore of A", "[2] B"]),
        (
            "[1] A cites [3]\n[3] not a document here\n[2] B",
            ["[1] A cites [3]\n[3] not a document here", "[2] B"],
        ),
        ("Document 1: A\nDocument 2: B\nDOCUMENT 3: C", ["Document 1: A", "Document 2: B", "DOCUMENT 3: C"]),
        ("Passage #1 A\n\nPassage #2 B", ["Passage #1 A", "Passage #2 B"]),
        ("1. A\n2. B\n   still B\n3) C", ["1. A", "2. B\n   still B", "3) C"]),
        ("Steps:\n1. mix\n2. bake", ["Steps:\n1. mix\n2. bake"]),  # a list inside one document
        ("- A\n  more A\n- B\n* C", ["- A\n  more A", "- B", "* C"]),
        ("A first.\n\n \t\nB second.\n\nC third.", ["A first.", "B second.", "C third."]),
        ("One document\non two lines.", ["One document\non two lines."]),
        ("  \n ", []),
    ],
)
def test_split_passages_rule(context: str, passages: list[str]) -> None:
    assert split_passages(context) == passages
    pos = 0  # verbatim slices, in order, without overlap
    for (a, b), p in zip(split_passage_spans(context), passages, strict=True):
        assert context[a:b] == p and a >= pos
        pos = b


def test_split_is_the_converse_of_join() -> None:
    ps = ["Paris is in France.", "Lyon is on the Rhone.", "Nice is by the sea."]
    assert split_passages(join_passages(ps)) == ps


def test_proxy_passages_of_a_located_context() -> None:
    from mnemoscope.server.proxy_audit import located_passages

    ctx = "\n[1] Paris is in France.\n[2] Lyon is on the Rhone.\n"
    ps = located_passages(ctx)
    assert ps == ("[1] Paris is in France.", "[2] Lyon is on the Rhone.")
    req = AuditRequest(ctx, "q", prompts=("with", "without"), passages=ps)
    assert check_request(req, 8) is None  # the context stays as located
    assert located_passages("one document") is None
    assert located_passages("Same.\n\nSame.") is None  # a repeated block: one context


# -- the integrations ------------------------------------------------------------------------------


def test_integration_documents_become_passages() -> None:
    from mnemoscope.integrations._common import passages_of

    docs = [
        {"content": "Paris is in France.\n"},
        {"content": "  "},
        {"content": "Lyon."},
        {"content": "Lyon. "},
    ]
    assert passages_of(docs) == ("Paris is in France.", "Lyon.")
    assert passages_of([{"content": "Only one."}]) == ("Only one.",)  # one document: its text


def test_integration_truncation_cuts_passage_wise() -> None:
    from mnemoscope.integrations._common import fit_passages

    endpoint_auditor = SimpleNamespace(tracer=None, max_context_chars=30, max_context_tokens=None)
    ps = ("Paris is in France.", "Lyon is on the Rhone.", "Nice is by the sea.")
    kept, info = fit_passages(endpoint_auditor, ps)
    assert kept == ("Paris is in France.", "Lyon is o") and info["truncated"]
    assert info["passages"] == 2 and info["passages_given"] == 3
    assert join_passages(kept) == join_passages(ps)[:30].strip()
    kept, info = fit_passages(
        SimpleNamespace(tracer=None, max_context_chars=1000, max_context_tokens=None), ps
    )
    assert kept == ps and not info["truncated"] and info["passages"] == 3


def test_integration_audit_sends_passages() -> None:
    from mnemoscope.integrations._common import audit_pair

    seen: list[AuditRequest] = []

    class Fake:
        tracer = None
        max_context_chars = 10_000
        max_context_tokens = None

        def audit(self, reqs: list[AuditRequest]) -> list[Any]:
            seen.extend(reqs)
            return [AuditFailure(422, "stop here", None)]

    docs = [{"content": "Paris is in France.", "id": "d1"}, {"content": "Lyon is on the Rhone.", "id": "d2"}]
    rec = audit_pair(Fake(), query="Where?", documents=docs, answer="In France.")
    assert rec.status == "failed" and len(seen) == 1
    assert seen[0].passages == ("Paris is in France.", "Lyon is on the Rhone.")
    assert seen[0].context == "Paris is in France.\n\nLyon is on the Rhone."
    assert check_request(seen[0], 8) is None
