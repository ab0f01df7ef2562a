"""The grounded verdict on the embedded default model with its shipped profile: every answer-bearing
phrase traced to the passage that states it or to the model's memory, never ``context`` for words
no passage states (docs/audit.md, "How each label is decided")."""

from __future__ import annotations

from typing import Any

import pytest

from mnemoscope.audit.auditor import Auditor, AuditRequest
from mnemoscope.audit.profile import default_profile_path, load_profile

pytestmark = pytest.mark.real_model


@pytest.fixture(scope="module")
def auditor(real_lm: Any) -> Auditor:
    return Auditor(real_lm, load_profile(default_profile_path(real_lm.info), model=real_lm.info))


def _words(r: Any) -> list[dict[str, Any]]:
    return list(((r.evidence.get("answer_words") or {}).get("words")) or [])


def test_the_models_own_fact_against_a_context_naming_another_is_never_context(auditor: Auditor) -> None:
    ctx = "Nineteen Eighty-Four is a dystopian novel by the English writer George Tolkien, published in 1949."
    q = "Who wrote the novel Nineteen Eighty-Four?"
    given = auditor.audit([AuditRequest(ctx, q, answer="George Orwell wrote Nineteen Eighty-Four.")])[0]
    assert not hasattr(given, "status"), given
    assert given.source != "context", given.summary
    (w,) = [w for w in _words(given) if "Orwell" in w["text"]]
    # decided over the whole name: "George" is in the context, "Orwell" is not
    assert w["grounded"] in ("memory", "unsupported") and w["passages"] == []
    assert "context" not in given.summary.split(":")[0].lower() or given.source != "context"
    # the model's own answers, generated: whatever it writes, a name no passage states is not context
    conflict = "The capital of France is Lyon. Lyon is the seat of the French government."
    r = auditor.audit_one(conflict, "What is the capital of France?")
    if "Paris" in r.answer:
        assert r.source != "context", (r.answer, r.summary)
    for w in _words(r):
        if w["grounded"] == "context":
            assert w["passages"], w


def test_a_lowercase_answer_term_is_answer_bearing(auditor: Auditor) -> None:
    r = auditor.audit(
        [
            AuditRequest(
                "The mitochondria is the powerhouse of the cell. It produces most of the cell's energy.",
                "What is known as the powerhouse of the cell?",
                answer="The powerhouse of the cell is the mitochondria. They are responsible for producing ATP.",
            )
        ]
    )[0]
    texts = [w["text"].lower() for w in _words(r)]
    assert "mitochondria" in texts, texts
    # the elaboration after the answering sentence is not answer-bearing
    assert "atp" not in texts and not any("responsible" in t for t in texts), texts
    spleen = auditor.audit(
        [
            AuditRequest(
                "The spleen makes insulin in this fictional world. It is a vital organ that filters blood.",
                "Which organ makes insulin?",
                answer="The spleen plays a crucial role in producing insulin. It is a vital organ that filters blood.",
            )
        ]
    )[0]
    texts = [w["text"].lower() for w in _words(spleen)]
    assert texts == ["spleen"], texts
    assert spleen.source in ("context", "memory", "undetermined"), spleen.summary


def test_in_a_three_passage_context_the_phrase_is_traced_to_the_passage_that_states_it(
    auditor: Auditor,
) -> None:
    passages = (
        "The Eiffel Tower was completed in 1889 for the World's Fair in Paris.",
        "Quenmar is a small town in the north. The river Zorblat runs through Quenmar.",
        "Bread is baked from flour, water and yeast.",
    )
    # the answer a RAG app's model gave (this small model, generating, copies the first passage)
    answer = "The river Zorblat runs through Quenmar."
    r = auditor.audit(
        [AuditRequest.from_passages(passages, "Which river runs through Quenmar?", answer=answer)]
    )[0]
    assert not hasattr(r, "status"), r
    (w,) = [w for w in _words(r) if "Zorblat" in w["text"]]
    assert w["passages"] == [1] and w["passage"] == 1 and w["grounded"] == "context"
    # leave-one-passage-out: the model's belief in "Zorblat" rests on passage 2 (index 1)
    assert w["passage_effect"] is not None and w["passage_effect"] > 0.69 and w["passage_needed"]
    assert r.source == "context" and "passage 2" in r.summary, r.summary
    assert r.extra["passage_ablation"]["ablated"] == [1]
    # the same passages as one plain context: one passage, so no passage number is named
    plain = auditor.audit_one("\n\n".join(passages), "Which river runs through Quenmar?", answer=answer)
    assert plain.source == "context" and "passage" not in plain.summary
