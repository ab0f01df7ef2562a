"""The audit pipeline on the embedded default model with its shipped profile (what a user runs first)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mnemoscope.audit.auditor import AuditFailure, Auditor, AuditRequest, run_audit_file
from mnemoscope.audit.profile import ProfileError, default_profile_path, load_profile
from mnemoscope.errors import InputError, InputTooLongError

pytestmark = pytest.mark.real_model

CONTEXT = "Quenmar is a small town in the north. The river Zorblat runs through Quenmar."
QUERY = "Which river runs through Quenmar?"


@pytest.fixture(scope="module")
def auditor(real_lm: Any) -> Auditor:
    return Auditor(real_lm, load_profile(default_profile_path(real_lm.info), model=real_lm.info))


def test_shipped_profile_is_certified_and_combines_measured_signals(auditor: Auditor) -> None:
    v = auditor.profile.verdict
    assert v is not None and v.certified_ and v.n_conformal_ >= 19
    from mnemoscope.detectors.verdict import DEFAULT_CANDIDATES

    # the shipped profile combines only signals the default offers (CRM's classifier is opt-in)
    assert v.selected_ and set(v.selected_) <= set(DEFAULT_CANDIDATES)
    assert auditor.profile.header.get("source_rule") == "grounded"
    assert auditor.profile.token_margin >= 0.69


def test_invented_fact_is_attributed_to_the_context(auditor: Auditor) -> None:
    r = auditor.audit_one(CONTEXT, QUERY)
    assert "Zorblat" in r.answer
    assert r.source == "context" and r.p_memory is not None and r.p_memory < 0.5
    ctx = [s for s in r.spans if s.source == "context"]
    assert any("Zorblat" in s.text for s in ctx), r.spans
    assert r.guarantee["certified"] and r.guarantee["alpha"] == 0.05
    assert r.evidence["repcs_z"] > 1.0


def test_well_known_fact_is_attributed_to_memory(auditor: Auditor) -> None:
    r = auditor.audit_one(
        "Paris is the capital and largest city of France.", "What is the capital of France?"
    )
    assert "Paris" in r.answer
    assert r.p_memory is not None and r.p_memory > 0.5
    # the fact is the model's own; a long answer may add what the context says around it
    # ("the largest city") or what no passage says ("the European Union"): then it is mixed
    assert r.source in ("memory", "undetermined", "mixed")
    assert not any(s.source == "context" and "Paris" in s.text for s in r.spans)
    words = r.evidence["answer_words"]["words"]
    assert [w["grounded"] for w in words if w["text"] == "Paris"] == ["memory"]
    if r.source == "mixed":
        assert "Paris" in r.summary and any(w["grounded"] != "memory" for w in words)


def test_empty_context_is_undetermined_and_said(auditor: Auditor) -> None:
    r = auditor.audit_one("", "What is the capital of France?")
    assert r.source == "undetermined" and r.identical_prompts and not r.repcs["memorized"]
    assert "empty" in r.summary and r.repcs["note"]


def test_bad_input(auditor: Auditor, real_lm: Any) -> None:
    with pytest.raises(InputTooLongError, match="limit is 2048"):
        auditor.audit_one("word " * 3000, QUERY)
    with pytest.raises(InputError, match="control character"):
        auditor.audit_one("bell \x07", QUERY)
    with pytest.raises(InputError, match="query"):
        auditor.audit_one(CONTEXT, "   ")
    out = auditor.audit([AuditRequest(CONTEXT, "\udcff"), AuditRequest(CONTEXT, QUERY)])
    assert isinstance(out[0], AuditFailure) and out[0].field == "query" and out[0].status == 422
    assert not isinstance(out[1], AuditFailure)


def test_altered_or_foreign_profile_is_refused(tmp_path: Path, real_lm: Any) -> None:
    src = default_profile_path(real_lm.info)
    dst = tmp_path / "p"
    shutil.copytree(src, dst)
    h = json.loads((dst / "profile.json").read_text())
    h["verdict"]["threshold"] = 0.99
    (dst / "profile.json").write_text(json.dumps(h))
    with pytest.raises(ProfileError, match="hash mismatch"):
        load_profile(dst)
    with pytest.raises(ProfileError, match="no audit profile fits the model"):
        default_profile_path({"name": "other", "fingerprint": "0" * 64})


def test_batch_file_resumes_and_reports_bad_records(tmp_path: Path, auditor: Auditor) -> None:
    inp = tmp_path / "in.jsonl"
    rows = [
        {"id": "a", "context": CONTEXT, "query": QUERY},
        {"id": "b", "context": "", "query": "What is the capital of Japan?"},
        {"id": "c", "context": CONTEXT},
        {"id": "a", "context": CONTEXT, "query": QUERY},
    ]
    inp.write_text("\n".join(json.dumps(r) for r in rows) + "\n{not json\n")
    s = run_audit_file(auditor, inp, tmp_path / "out", progress=False)
    assert s["audited"] == 2 and s["errors"] == 3
    res = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert [r["id"] for r in res] == ["a", "b"] and res[1]["source"] == "undetermined"
    errs = [json.loads(x) for x in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert {(e["id"], e["field"]) for e in errs} == {("c", "query"), ("a", "id"), (None, None)}
    again = run_audit_file(auditor, inp, tmp_path / "out", progress=False)
    assert again["audited"] == 0 and again["skipped_done"] == 2


def test_cli_audit_human_and_json() -> None:
    base = [sys.executable, "-m", "mnemoscope", "--quiet", "audit", "--context", CONTEXT, "--query", QUERY]
    out = subprocess.run([*base, "--color", "never"], capture_output=True, text=True, timeout=300, check=True)
    assert "[ctx: " in out.stdout and "Verdict: CONTEXT" in out.stdout and "Guarantee" in out.stdout
    js = subprocess.run([*base, "--json"], capture_output=True, text=True, timeout=300, check=True)
    d = json.loads(js.stdout)
    for k in ("source", "p_memory", "answer", "evidence", "guarantee", "tokens", "spans", "crm"):
        assert k in d
    assert set(d["evidence"]) >= {"repcs_z", "tau", "closed_book_logprob", "context_token_fraction"}
    assert set(d["guarantee"]) >= {"alpha", "n_calibration", "certified"}
    bad = subprocess.run(
        [*base[:4], "audit", "--model", "default", "--profile", "/nonexistent", "--query", "q"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (
        bad.returncode == 1 and "no audit profile" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    )


def test_a_given_answer_is_scored_not_generated(auditor: Auditor) -> None:
    given = "The Zorblat river runs through Quenmar, and the capital of France is Paris."
    r = auditor.audit_one(CONTEXT, QUERY, answer=given)
    assert r.answer == given and r.n_steps == len(
        auditor.tracer.tokenizer(given, add_special_tokens=False)["input_ids"]
    )
    ctx = [s.text for s in r.spans if s.source == "context"]
    assert any("Zorblat" in t for t in ctx), r.spans
    # the context says nothing about Paris: it must not be credited to the context
    assert not any("Paris" in t for t in ctx)
    assert r.source in ("context", "mixed")


MONA_LISA = (
    "The Mona Lisa is a portrait displayed in the Louvre in Paris.",
    "Who painted the Mona Lisa?",
    "The Mona Lisa is a portrait displayed in the Louvre in Paris. It was painted by Leonardo da Vinci.",
)


def _check_mona_lisa(r: Any) -> None:
    words = r.evidence["answer_words"]["words"]
    by = {w["text"]: w for w in words}
    assert "Leonardo da Vinci" in by, words
    assert not any("Mona" in w["text"] or "Lisa" in w["text"] for w in words)  # query words are not facts
    assert by["Leonardo da Vinci"]["source"] == "memory" and not by["Leonardo da Vinci"]["in_context"]
    assert r.answer[by["Leonardo da Vinci"]["start"] : by["Leonardo da Vinci"]["end"]] == "Leonardo da Vinci"
    assert r.source in ("memory", "undetermined") and r.source != "context", r.summary


def test_answer_bearing_words_of_a_paraphrased_memory_answer_are_memory(real_lm: Any) -> None:
    """The Mona Lisa answer copies the context ("displayed in the Louvre in Paris") but states a fact the
    context does not give ("painted by Leonardo da Vinci"): its answer-bearing words are found from the
    answer and the query alone, the name is one phrase, and greedy decoding without the context writes it.
    Measured with a `facts`-rule profile (the previous shipped one, tests/data/previous_default_profile),
    whose answer-bearing words are every such word of the answer."""
    previous = Path(__file__).parent / "data" / "previous_default_profile"
    prof = load_profile(previous, model=real_lm.info)
    assert prof.header.get("source_rule") in (None, "facts")
    r = Auditor(real_lm, prof).audit_one(*MONA_LISA[:2], answer=MONA_LISA[2])
    _check_mona_lisa(r)


@pytest.mark.xfail(
    strict=True,
    reason="the grounded rule takes the answer-bearing phrases of the first sentence with a candidate "
    "('Louvre', 'Paris', restating the context), not of the sentence that answers the query "
    "('It was painted by Leonardo da Vinci.')",
)
def test_answer_bearing_words_of_a_paraphrased_memory_answer_are_memory_grounded(auditor: Auditor) -> None:
    """The same answer with the shipped (grounded) profile: a known limitation, kept visible."""
    assert auditor.profile.header.get("source_rule") == "grounded"
    _check_mona_lisa(auditor.audit_one(*MONA_LISA[:2], answer=MONA_LISA[2]))


def test_an_answer_naming_nothing_beyond_the_query_is_undetermined_and_not_flagged(auditor: Auditor) -> None:
    r = auditor.audit_one(
        "The capital of Scotland is Glasgow.", "Is Glasgow the capital of Scotland?", answer="Yes."
    )
    assert r.source == "undetermined" and not r.memory_flag
    assert "nothing beyond the query" in r.summary
