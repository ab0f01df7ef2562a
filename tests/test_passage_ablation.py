"""Leave-one-passage-out scoring (issue 41): known-answer checks on a tiny random llama, forward
passes counted (never timed), and the trace store round-trip of the new PairTrace fields."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from mnemoscope.errors import InputError
from mnemoscope.trace.ablation import AblationJob, ablated_prompt, passage_logprobs, score_ablations
from mnemoscope.trace.hooks import counted_forwards as counted
from mnemoscope.trace.passages import join_passages, without_passage
from mnemoscope.trace.templates import PromptBuilder
from mnemoscope.trace.tracer import Tracer

PASSAGES = (
    "Zor lies on the river Ka.",
    "The mayor of Zor is Mira Tal.",
    "Ka flows into the Brim sea.",
    "Zor was founded in 1204.",
)
QUERY = "Who is the mayor of Zor?"


@torch.no_grad()
def direct(lm: Any, builder: PromptBuilder, context: str, answer: list[int]) -> np.ndarray:
    """The reference: one unbatched forward of the model itself (no tracer, no padding) over the
    prompt rendered from ``context`` + the answer, log p of each answer token."""
    text = builder.build(context, QUERY, lm.tokenizer)
    ids = list(lm.tokenizer(text, add_special_tokens=not builder.chat)["input_ids"])
    x = torch.tensor([ids + answer[:-1]], dtype=torch.long)
    logits = lm.model(input_ids=x).logits[0, len(ids) - 1 :].double().log_softmax(-1)
    return logits[torch.arange(len(answer)), torch.tensor(answer)].float().numpy()


@pytest.fixture(scope="module")
def answer(lm: Any) -> list[int]:
    return list(lm.tokenizer(" Mira Tal.", add_special_tokens=False)["input_ids"])


@pytest.mark.parametrize("chat", [False, True])
def test_each_row_equals_a_direct_forward_on_the_prompt_without_that_passage(
    lm: Any, answer: list[int], chat: bool
) -> None:
    builder = PromptBuilder(chat=chat)
    tracer = Tracer(lm, batch_size=8)
    got = passage_logprobs(tracer, builder, QUERY, PASSAGES, [3, 1, 0], answer)
    assert got.shape == (3, len(answer)) and got.dtype == np.float32
    for r, j in enumerate([3, 1, 0]):
        ref = direct(lm, builder, without_passage(PASSAGES, j), answer)
        np.testing.assert_allclose(got[r], ref, atol=1e-5, rtol=0)
    # the ablated prompt is the with-context prompt's renderer on the shorter context
    full = builder.build(join_passages(PASSAGES), QUERY, lm.tokenizer)
    assert tracer.encode(full, chat=chat) != ablated_prompt(builder, tracer, QUERY, PASSAGES, 1)


def test_batching_changes_no_result_and_rows_of_all_jobs_share_forwards(lm: Any, answer: list[int]) -> None:
    builder = PromptBuilder()
    other = [int(i) for i in lm.tokenizer(" 1204, on the Ka river", add_special_tokens=False)["input_ids"]]
    jobs = [
        AblationJob(QUERY, PASSAGES, (0, 1, 2, 3), np.array(answer)),
        AblationJob("When was Zor founded?", PASSAGES[1:], (2, 0), np.array(other)),
        AblationJob(QUERY, PASSAGES[:2], (), np.array(answer)),
    ]
    one = Tracer(lm, batch_size=1)
    many = Tracer(lm, batch_size=8)
    with counted(lm.model) as n1:
        a = score_ablations(one, builder, jobs)
    with counted(lm.model) as n8:
        b = score_ablations(many, builder, jobs)
    assert n1[0] == 6 and n8[0] == 1  # six rows: one forward each, or one forward for all
    assert [x.shape for x in b] == [(4, len(answer)), (2, len(other)), (0, len(answer))]
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x, y, atol=1e-5, rtol=0)
    three = Tracer(lm, batch_size=3)
    with counted(lm.model) as n3:
        c = score_ablations(three, builder, jobs)
    assert n3[0] == 2
    for x, y in zip(a, c, strict=True):
        np.testing.assert_allclose(x, y, atol=1e-5, rtol=0)


def test_leaving_out_the_only_passage_is_the_no_context_path_never_rescored(
    lm: Any, answer: list[int]
) -> None:
    builder = PromptBuilder()
    tracer = Tracer(lm)
    nc = direct(lm, builder, "", answer)
    with counted(lm.model) as n:
        got = passage_logprobs(tracer, builder, QUERY, PASSAGES[:1], [0], answer, no_context=nc)
        blank = passage_logprobs(tracer, builder, QUERY, (PASSAGES[0], "  "), [0], answer, no_context=nc)
    assert n[0] == 0
    np.testing.assert_array_equal(got[0], nc)
    np.testing.assert_array_equal(blank[0], nc)
    with pytest.raises(InputError, match="no context"):
        passage_logprobs(tracer, builder, QUERY, PASSAGES[:1], [0], answer)


def test_bad_indices_are_refused(lm: Any, answer: list[int]) -> None:
    tracer = Tracer(lm)
    with pytest.raises(InputError, match="out of range"):
        passage_logprobs(tracer, PromptBuilder(), QUERY, PASSAGES, [4], answer)
    with pytest.raises(InputError, match="repeat"):
        passage_logprobs(tracer, PromptBuilder(), QUERY, PASSAGES, [1, 1], answer)


# -- the trace store ------------------------------------------------------------------------------------


def _pair_trace(n: int = 3, **kw: Any) -> Any:
    from mnemoscope.trace.types import PairTrace

    z = np.zeros(n, dtype=np.float32)
    k = np.zeros((n, 2), dtype=np.int64)
    return PairTrace(
        id="r1",
        context="c",
        query="q",
        prompt_with="pw",
        prompt_without="po",
        n_prompt_tokens_with=4,
        n_prompt_tokens_without=2,
        h_with=None,
        h_without=None,
        h_with_prenorm=None,
        h_without_prenorm=None,
        answer_ids=np.arange(n, dtype=np.int64),
        answer_with="abc",
        kl_steps=z,
        kl_rev_steps=z,
        entropy_with=z,
        entropy_without=z,
        logprob_answer_with=z,
        logprob_answer_without=z,
        topk_ids_with=k,
        topk_logprobs_with=k.astype(np.float32),
        topk_ids_without=k,
        topk_logprobs_without=k.astype(np.float32),
        stopped_at_eos=False,
        identical_prompts=False,
        **kw,
    )


def test_stored_traces_round_trip_the_passage_fields(tmp_path: Path) -> None:
    from mnemoscope.trace.store import load_traces, save_traces

    lp = np.array([[-1.0, -2.0, -3.0], [-0.5, -0.25, -0.125]], dtype=np.float32)
    t = _pair_trace(passages=("a", "b", "c"), passage_ablated=(2, 0), passage_logprobs=lp)
    plain = dataclasses.replace(_pair_trace(), id="r2")
    save_traces(tmp_path / "t", [t, plain], model={})
    back = load_traces(tmp_path / "t").traces
    assert back[0].passages == ("a", "b", "c") and back[0].passage_ablated == (2, 0)
    np.testing.assert_array_equal(back[0].passage_logprobs, lp)
    assert back[1].passages is None and back[1].passage_ablated == () and back[1].passage_logprobs is None


def test_traces_stored_before_the_passage_fields_still_load(tmp_path: Path) -> None:
    """A shard written without the three fields (as every trace before issue 41): they default."""
    from mnemoscope.trace.store import load_traces, save_traces

    save_traces(tmp_path / "t", [_pair_trace()], model={})
    shard = next((tmp_path / "t" / "shards").glob("*.npz"))
    with np.load(shard, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    sc = json.loads(str(arrays["0/__scalars__"]))
    for name in ("passages", "passage_ablated", "passage_logprobs"):
        sc.pop(name, None)
        arrays.pop(f"0/{name}", None)
    arrays["0/__scalars__"] = np.array(json.dumps(sc))
    np.savez(shard, **arrays)
    (t,) = load_traces(tmp_path / "t").traces
    assert t.passages is None and t.passage_ablated == () and t.passage_logprobs is None
    assert t.answer_with == "abc"


# -- the in-process backend -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def backend_parts(tiny_service: Any) -> tuple[Any, Any]:
    from mnemoscope.audit.profile import load_profile
    from mnemoscope.models import load_model

    model_dir, prof = tiny_service
    lm = load_model(str(model_dir))
    return lm, load_profile(prof, model=lm.info)


def _request(passages: tuple[str, ...] | None, query: str = QUERY, **kw: Any) -> Any:
    """A request with passages (``AuditRequest.passages`` once requests.py has it; a stand-in before)."""
    from mnemoscope.audit.requests import AuditRequest

    context = join_passages(passages) if passages is not None else kw.pop("context", "")
    if any(f.name == "passages" for f in dataclasses.fields(AuditRequest)):
        return AuditRequest(context, query, passages=passages, **kw)

    @dataclasses.dataclass(frozen=True)
    class WithPassages(AuditRequest):
        passages: tuple[str, ...] | None = None

    return WithPassages(context, query, passages=passages, **kw)


def _local(backend_parts: Any, select: Any = None, **kw: Any) -> Any:
    from mnemoscope.audit.backends import LocalBackend

    lm, prof = backend_parts
    b = LocalBackend(lm, prof, batch_size=4, **kw)
    if select is not None:  # explicit passages to leave out (the facts' choice is tested on its own)
        b.passages_to_ablate = select
    return b


def _run(backend: Any, reqs: list[Any]) -> tuple[list[Any], int]:
    prepared = [backend.prepare(i, r) for i, r in enumerate(reqs)]
    with counted(backend.tracer.model) as n:
        out = backend.run(prepared)
    return out, n[0]


def test_the_backend_stores_each_ablated_passage_as_a_direct_forward_scores_it(backend_parts: Any) -> None:
    lm, prof = backend_parts
    b = _local(backend_parts, select=lambda t, pieces: [3, 0, 1], max_ablations=2)
    ((t, _),) = _run(b, [_request(PASSAGES, answer=" Mira Tal.")])[0]
    assert t.context == join_passages(PASSAGES) and t.passages == PASSAGES
    assert t.passage_ablated == (3, 0) and t.passage_logprobs.shape == (2, t.n_steps)
    for r, j in enumerate(t.passage_ablated):
        ref = direct(lm, prof.builder, without_passage(PASSAGES, j), t.answer_ids.tolist())
        np.testing.assert_allclose(t.passage_logprobs[r], ref, atol=1e-5, rtol=0)
    # the row of the full context would be the with-context path: same arithmetic, same numbers
    full = direct(lm, prof.builder, join_passages(PASSAGES), t.answer_ids.tolist())
    np.testing.assert_allclose(t.logprob_answer_with, full, atol=1e-4, rtol=0)
    info = t.backend["passage_ablation"]
    assert info == {"candidates": [3, 0, 1], "ablated": [3, 0], "dropped": [1], "max_ablations": 2}
    assert any("max_ablations" in n and "[1]" in n for n in b.notes(t))
    assert b.result_fields(t) == {"passage_ablation": info}


def test_all_audits_of_a_run_share_one_ablation_batch_and_one_passage_costs_nothing(
    backend_parts: Any,
) -> None:
    b = _local(backend_parts, select=lambda t, pieces: [0, 2])
    plain = [_request(None, context=join_passages(PASSAGES), answer=" Mira Tal.")] * 2
    _, n_plain = _run(b, plain)
    # answers of one length: the lockstep groups by length, so both pairs trace in one batch
    many = [_request(PASSAGES, answer=" Mira Tal."), _request(PASSAGES[1:], answer=" Tal Mira.")]
    out, n_many = _run(b, many)
    assert n_many == n_plain + 1  # four ablated rows, one forward (batch_size 4)
    assert [t.passage_ablated for t, _ in out] == [(0, 2), (0, 2)]
    # one passage: leaving it out is the no-context path, already traced; nothing more is run
    one, n_one = _run(b, [_request(PASSAGES[:1], answer=" Mira Tal.")] * 2)
    assert n_one == n_plain
    for t, _ in one:
        assert t.passages == PASSAGES[:1] and t.passage_ablated == () and t.passage_logprobs is None
        assert "passage_ablation" not in t.backend
    # nothing to leave out (no passage states an answer-bearing phrase): no forward either
    none = _local(backend_parts, select=lambda t, pieces: [])
    out, n_none = _run(none, many)
    assert n_none == n_plain
    assert all(t.passage_logprobs is None and t.backend["passage_ablation"]["ablated"] == [] for t, _ in out)


def test_a_run_without_passages_is_todays_audit(backend_parts: Any) -> None:
    def never(t: Any, pieces: Any) -> list[int]:
        raise AssertionError("no passages: nothing is selected")

    b = _local(backend_parts, select=never)
    out, _ = _run(b, [_request(None, context=join_passages(PASSAGES), answer=" Mira Tal.")])
    ((t, _),) = out
    assert t.passages is None and t.passage_ablated == () and t.passage_logprobs is None and t.backend == {}
    assert b.notes(t) == [] and b.result_fields(t) == {}


def test_the_callers_own_prompts_are_not_ablated_and_say_so(backend_parts: Any) -> None:
    b = _local(backend_parts, select=lambda t, pieces: [0])
    req = _request(PASSAGES, answer=" Mira Tal.", prompts=("Facts: ...\nQ: who?\nA:", "Q: who?\nA:"))
    ((t, _),), n = _run(b, [req])
    assert n == 2 and t.passages == PASSAGES and t.passage_logprobs is None
    assert "skipped" in t.backend["passage_ablation"] and any("not left out" in x for x in b.notes(t))


def test_over_an_endpoint_passages_are_carried_and_said_not_measured() -> None:
    from types import SimpleNamespace

    from mnemoscope.audit.backends import NOT_MEASURED, EndpointBackend

    fake = SimpleNamespace(caps=SimpleNamespace(method="native"), client=SimpleNamespace(endpoint="http://x"))
    t = _pair_trace(passages=PASSAGES, backend={"kind": "endpoint", "notes": []})
    assert EndpointBackend.result_fields(fake, t)["passage_ablation"] == NOT_MEASURED  # type: ignore[arg-type]
    assert any("not left out" in n for n in EndpointBackend.notes(fake, t))  # type: ignore[arg-type]
    one = _pair_trace(passages=PASSAGES[:1], backend={"kind": "endpoint"})
    assert "passage_ablation" not in EndpointBackend.result_fields(fake, one)  # type: ignore[arg-type]


def test_the_facts_choose_the_passage_that_states_the_answer(backend_parts: Any) -> None:
    """With the facts' own choice (features.facts.passages_to_ablate): the passage stating the
    answer-bearing phrase "Mira Tal" is left out, the others are not."""
    facts = pytest.importorskip("mnemoscope.features.facts")
    if not hasattr(facts, "passages_to_ablate"):
        pytest.skip("features.facts.passages_to_ablate is not on this branch yet")
    b = _local(backend_parts)
    ((t, _),), _ = _run(b, [_request(PASSAGES, answer=" Mira Tal.")])
    assert 1 in t.passage_ablated and t.passage_logprobs.shape == (len(t.passage_ablated), t.n_steps)
