"""The verdict: token attribution, the verdict model, its guarantee, the decision, input checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.base import clone

from mnemoscope.audit.auditor import check_text, decide_source
from mnemoscope.detectors.verdict import VerdictModel, evaluate_verdict
from mnemoscope.errors import InputError
from mnemoscope.features.attribution import (
    MIN_MARGIN,
    Span,
    attribute_tokens,
    calibrate_margin,
    content_word_pmis,
    context_token_fraction,
    merge_spans,
)
from mnemoscope.stats.conformal import conformal_lower, conformal_upper, min_n_for_alpha

LOG2 = math.log(2)


def _attr(pieces, lw, lo, top1, query="Which river runs through Quenmar?", margin=LOG2):  # type: ignore[no-untyped-def]
    return attribute_tokens(
        pieces=pieces,
        logp_with=np.log(lw),
        logp_without=np.log(lo),
        kl=np.zeros(len(pieces)),
        top1_without=np.array(top1),
        query=query,
        margin=margin,
    )


# -- token attribution ----------------------------------------------------------------------------


def test_word_pmi_sums_subword_pieces_and_labels_whole_words() -> None:
    # " Zor" + "bl" + "at": each piece alone is below the margin, the word is far above it
    toks = _attr(
        [" The", " capital", " is", " Paris", " and", " the", " river", " Zor", "bl", "at", "."],
        [0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.5, 0.9, 0.9, 0.9],
        [0.9, 0.9, 0.9, 0.85, 0.9, 0.9, 0.9, 0.3, 0.5, 0.5, 0.9],
        [True, True, True, True, True, True, True, False, False, True, True],
        query="What is the capital of France and which river runs through Quenmar?",
    )
    src = {t.text: t.source for t in toks}
    assert src[" Paris"] == "memory"  # predicted top-1 without the context, the context barely helps
    assert src[" Zor"] == src["bl"] == src["at"] == "context"  # word PMI = log(0.5/0.3 * 1.8 * 1.8) > log 2
    assert src[" capital"] == src[" river"] == "query"  # restating the query is neither memory nor context
    assert src[" The"] == src["."] == src[" and"] == "neutral"
    zor = next(t for t in toks if t.text == " Zor")
    assert zor.word_pmi == pytest.approx(math.log(0.5 / 0.3) + 2 * math.log(1.8))
    assert zor.pmi == pytest.approx(math.log(0.5 / 0.3))
    spans = [(s.text, s.source) for s in merge_spans(toks) if s.source in ("context", "memory")]
    assert spans == [("Paris", "memory"), ("Zorblat", "context")]
    assert context_token_fraction(toks) == pytest.approx(3 / 4)


def test_memory_needs_the_no_context_top1_and_offsets_spell_the_answer() -> None:
    pieces = [" Jules", " Verne", " wrote", " it", "."]
    toks = _attr(pieces, [0.6] * 5, [0.5] * 5, [True, False, True, True, True], query="Who wrote it?")
    # " Verne" is not the no-context top-1: no evidence for memory, and no context gain either
    assert [t.source for t in toks] == [
        "memory",
        "neutral",
        "query",
        "neutral",
        "neutral",
    ]  # "wrote": in the query
    answer = "".join(pieces)
    for t in toks:
        assert answer[t.start : t.end] == t.text
    for s in merge_spans(toks):
        assert answer[s.start : s.end] == s.text


def test_spans_bridge_blanks_between_same_source_runs() -> None:
    pieces = [" New", " ", " York"]
    toks = _attr(pieces, [0.9, 0.9, 0.9], [0.9, 0.9, 0.9], [True, True, True], query="Which city?")
    spans = merge_spans(toks)
    assert [(s.text, s.source) for s in spans] == [("New  York", "memory")]


def test_attribution_rejects_bad_shapes_and_non_finite() -> None:
    with pytest.raises(InputError, match="logp_with"):
        _attr([" a", " b"], [0.5], [0.5, 0.5], [True, True])
    with pytest.raises(InputError, match="top1_without"):
        _attr([" a"], [0.5], [0.5], [True, True])
    with pytest.raises(InputError, match="non-finite"):
        attribute_tokens(
            pieces=[" a"],
            logp_with=np.array([np.nan]),
            logp_without=np.array([0.0]),
            kl=np.zeros(1),
            top1_without=np.array([True]),
            query="q",
            margin=LOG2,
        )
    assert context_token_fraction([]) is None


def test_margin_calibration() -> None:
    assert calibrate_margin([], 0.9) == MIN_MARGIN
    assert calibrate_margin(np.linspace(0, 10, 101), 0.9) == pytest.approx(9.0)
    with pytest.raises(InputError):
        calibrate_margin([1.0], 1.5)
    pm = content_word_pmis([" The", " river", " Zor", "blat"], np.array([0.0, 0.5, 1.0, 2.0]), "Which river?")
    np.testing.assert_allclose(pm, [3.0])  # "The" is a function word, "river" is in the query


# -- conformal ------------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.2])
def test_conformal_thresholds_match_brute_force_rank_argument(alpha: float) -> None:
    rng = np.random.default_rng(0)
    for n in (5, 19, 20, 57):
        s = rng.normal(size=n)
        up, lo = conformal_upper(s, alpha), conformal_lower(s, alpha)
        if n < min_n_for_alpha(alpha):
            assert math.isinf(up) and math.isinf(lo)
            continue
        # rank argument: a new exchangeable score lands in each of the n+1 gaps with prob 1/(n+1)
        assert (np.sort(s) > up).sum() / (n + 1) <= alpha
        assert (np.sort(s) < lo).sum() / (n + 1) <= alpha


def test_conformal_rejects_bad_input() -> None:
    with pytest.raises(InputError):
        conformal_upper([1.0, np.nan], 0.1)
    with pytest.raises(InputError):
        conformal_lower([1.0], 0.0)


# -- the verdict model ----------------------------------------------------------------------------


#: the whole-answer signals the synthetic data below carries (the default candidates add more)
WHOLE = ("repcs_z", "closed_book_logprob", "context_token_fraction")


def _data(n: int = 200, seed: int = 0) -> tuple[dict[str, np.ndarray], np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.permutation(np.r_[np.ones(n // 2, int), np.zeros(n - n // 2, int)])
    X = {
        "repcs_z": rng.normal(6 - 3 * y, 1.5),  # strong, oriented: memory = small Z
        "closed_book_logprob": rng.normal(-2 + 1.2 * y, 1.0),  # adds information
        "context_token_fraction": rng.uniform(size=n),  # pure noise
    }
    return X, y


def test_verdict_selects_what_adds_and_drops_noise() -> None:
    X, y = _data()
    m = VerdictModel(candidates=WHOLE, seed=0).fit(X, y)
    assert m.selected_[0] == "repcs_z" and "closed_book_logprob" in m.selected_
    assert "context_token_fraction" not in m.selected_
    assert m.single_auc_["repcs_z"] > 0.85 and abs(m.single_auc_["context_token_fraction"] - 0.5) < 0.12
    p = m.predict_proba(X)
    assert p.shape == (len(y),) and np.all((p >= 0) & (p <= 1))
    assert p[y == 1].mean() > p[y == 0].mean()  # orientation: higher = memory


def test_verdict_guarantee_holds_on_fresh_clean_data() -> None:
    X, y = _data(400, seed=1)
    m = VerdictModel(candidates=WHOLE, alpha=0.1, seed=1).fit(X, y)
    assert m.certified_ and m.n_conformal_ == 100
    fresh, fy = _data(4000, seed=2)
    flags = m.flag(m.predict_proba(fresh))
    # the guarantee is on the expectation over calibration draws; one draw may exceed alpha slightly
    assert flags[fy == 0].mean() <= 0.1 + 0.05
    assert flags[fy == 1].mean() > 0.3


def test_verdict_uncertified_when_too_few_clean_and_says_so() -> None:
    X, y = _data(200)
    keep = np.r_[np.flatnonzero(y == 1), np.flatnonzero(y == 0)[:20]]
    m = VerdictModel(candidates=WHOLE, alpha=0.05, seed=0).fit({k: v[keep] for k, v in X.items()}, y[keep])
    assert m.n_conformal_ == 10 < min_n_for_alpha(0.05) and not m.certified_ and m.threshold_ == 0.5


def test_verdict_roundtrip_clone_and_bad_input() -> None:
    X, y = _data()
    m = VerdictModel(candidates=WHOLE, seed=3).fit(X, y)
    m2 = VerdictModel.from_dict(m.to_dict())
    np.testing.assert_array_equal(m.predict_proba(X), m2.predict_proba(X))
    assert m2.threshold_ == m.threshold_ and m2.certified_ == m.certified_
    c = clone(m)
    assert c.get_params() == m.get_params() and not hasattr(c, "coef_")
    with pytest.raises(InputError, match="both labels"):
        VerdictModel(candidates=WHOLE).fit(X, np.zeros(len(y), int))
    with pytest.raises(InputError, match="label"):
        VerdictModel(candidates=WHOLE).fit(X, np.full(len(y), 2))
    with pytest.raises(InputError, match="not available"):
        m.predict_proba({"repcs_z": X["repcs_z"]})
    bad = dict(X)
    bad["repcs_z"] = X["repcs_z"].copy()
    bad["repcs_z"][3] = np.inf
    with pytest.raises(InputError, match="row 3"):
        VerdictModel(candidates=WHOLE).fit(bad, y)
    with pytest.raises(InputError, match="unknown"):
        VerdictModel(candidates=("nope",)).fit(X, y)
    with pytest.raises(InputError, match="malformed"):
        VerdictModel.from_dict({"params": {}})
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        VerdictModel(candidates=WHOLE).predict_proba(X)


def test_evaluate_verdict_is_leakage_free_and_deterministic() -> None:
    X, y = _data(200, seed=4)
    rng = np.random.default_rng(9)
    shuffled = rng.permutation(y)  # labels unrelated to the signals: the CV AUC must sit at chance
    r = evaluate_verdict(X, shuffled, VerdictModel(candidates=WHOLE), n_resamples=200, seed=0)
    assert abs(r["combination"]["auc"] - 0.5) < 0.12
    good = evaluate_verdict(X, y, VerdictModel(candidates=WHOLE), n_resamples=200, seed=0)
    assert good["combination"]["auc"] > 0.85 and good["signals"]["repcs_z"]["auc"] > 0.85
    again = evaluate_verdict(X, y, VerdictModel(candidates=WHOLE), n_resamples=200, seed=0)
    assert again["combination"] == good["combination"]
    grouped = evaluate_verdict(
        X, y, VerdictModel(candidates=WHOLE), n_resamples=200, seed=0, groups=np.arange(len(y)) // 2
    )
    assert grouped["n"] == len(y)
    calls = []

    def fold_signals(train: np.ndarray) -> dict[str, np.ndarray]:
        calls.append(len(train))
        return X

    evaluate_verdict(X, y, VerdictModel(candidates=WHOLE), n_resamples=50, fold_signals=fold_signals)
    assert len(calls) == 5 and all(c < len(y) for c in calls)


# -- the decision and input checks ----------------------------------------------------------------


def _span(src: str, text: str = "Zorblat") -> Span:
    return Span(text=text, source=src, start=0, end=len(text), pmi=0.0)  # type: ignore[arg-type]


def test_decide_source_rules() -> None:
    kw = {"answer": "Paris.", "p_memory": 0.9}
    assert decide_source(identical_prompts=True, memory_flag=True, spans=[_span("memory")], **kw)[0] == (
        "undetermined"
    )
    src, why = decide_source(identical_prompts=False, memory_flag=True, spans=[], answer="  ", p_memory=0.9)
    assert src == "undetermined" and "empty answer" in why
    assert (
        decide_source(identical_prompts=False, memory_flag=True, spans=[_span("memory")], **kw)[0] == "memory"
    )
    assert (
        decide_source(
            identical_prompts=False, memory_flag=True, spans=[_span("memory"), _span("context")], **kw
        )[0]
        == "mixed"
    )
    assert (
        decide_source(
            identical_prompts=False,
            memory_flag=False,
            spans=[_span("context")],
            answer="Zorblat",
            p_memory=0.1,
            context="The river Zorblat.",
        )[0]
        == "context"
    )
    # a word the context does not state is never from the context, whatever its token source
    assert (
        decide_source(
            identical_prompts=False,
            memory_flag=False,
            spans=[_span("context")],
            answer="Zorblat",
            p_memory=0.1,
            context="The river Quen.",
        )[0]
        == "unsupported"
    )
    assert decide_source(identical_prompts=False, memory_flag=False, spans=[], answer="x", p_memory=0.7)[
        0
    ] == ("undetermined")
    assert (
        decide_source(
            identical_prompts=False,
            memory_flag=False,
            spans=[_span("context"), _span("memory", "Brevani")],
            answer="x",
            p_memory=0.2,
            context="Zorblat.",
        )[0]
        == "mixed"
    )
    # a prior word ("written") is marked memory at the token level but does not make the item mixed
    assert (
        decide_source(
            identical_prompts=False,
            memory_flag=False,
            spans=[_span("context"), _span("memory", "written")],
            answer="x",
            p_memory=0.2,
            context="Zorblat.",
        )[0]
        == "context"
    )


def test_check_text() -> None:
    assert check_text("a\tb\nc", "context", allow_empty=True) == "a\tb\nc"
    assert check_text("", "context", allow_empty=True) == ""
    with pytest.raises(InputError, match=r"field .query.*empty"):
        check_text("  ", "query", allow_empty=False)
    with pytest.raises(InputError, match="U\\+0007"):
        check_text("bell\x07", "context", allow_empty=True, record="r1")
    with pytest.raises(InputError, match="surrogate"):
        check_text("bad \udcff", "query", allow_empty=False)
    with pytest.raises(InputError, match="string"):
        check_text(3, "query", allow_empty=False)


def test_committed_held_out_figures_come_from_the_committed_audits() -> None:
    """Part B of benchmarks/verdict_eval.py recomputed from the audits the core writes with the
    shipped profile (benchmarks/results/verdict/regression/current.jsonl.gz,
    benchmarks/verdict_regression.py) equals the committed eval.json figures exactly (the run
    time aside). (after.jsonl.gz / before.jsonl.gz are the audit-core refactor's regression pair,
    made with the earlier shipped profile.)"""
    import gzip
    import json
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "benchmarks"))
    try:
        from verdict_eval import held_out_items, held_out_metrics
    finally:
        sys.path.remove(str(root / "benchmarks"))
    results = root / "benchmarks" / "results" / "verdict"
    verified = [json.loads(x) for x in (results / "verified.jsonl").read_text().splitlines() if x.strip()]
    audits = {}
    with gzip.open(results / "regression" / "current.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            if d.pop("rule") == "combined":
                audits[d.pop("id")] = d
    items = held_out_items(verified)
    got = held_out_metrics(items, [audits[it["id"]] for it in items], 0.0)
    committed = json.loads((results / "eval.json").read_text())["B_held_out"]
    got.pop("seconds"), committed.pop("seconds")
    assert got == committed


def test_verdict_certifies_on_the_conformal_set_it_is_given_and_refuses_a_memory_row() -> None:
    X, y = _data(300, seed=5)
    m = VerdictModel(candidates=WHOLE, alpha=0.1, seed=5)
    conf = m.conformal_split(y)
    assert (y[conf] == 0).all() and len(conf) == round(0.5 * (y == 0).sum())
    # the default draw is the one conformal_split names
    np.testing.assert_array_equal(
        VerdictModel(candidates=WHOLE, alpha=0.1, seed=5).fit(X, y).conformal_index_, conf
    )
    # an explicit set: the threshold is the conformal quantile of exactly those rows' p_memory
    mine = np.flatnonzero(y == 0)[:60]
    m.fit(X, y, conformal=mine)
    assert m.n_conformal_ == 60 and m.n_fit_ == len(y) - 60
    assert m.threshold_ == conformal_upper(m.predict_proba({k: v[mine] for k, v in X.items()}), 0.1)
    with pytest.raises(InputError, match="clean"):
        m.fit(X, y, conformal=[int(np.flatnonzero(y == 1)[0])])
    with pytest.raises(InputError, match="clean"):
        m.fit(X, y, conformal=[len(y)])


def test_per_kind_certification_bounds_false_flags_within_every_kind() -> None:
    """Mondrian conformal: with item kinds as groups the threshold is the largest of the kinds'
    own conformal quantiles, so a hard kind of context-needed answer (here: clean answers whose
    signals look like memory, as followed knowledge conflicts do) keeps the bound too."""
    rng = np.random.default_rng(11)

    def draw(n: int) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        y = rng.permutation(np.r_[np.ones(n // 2, int), np.zeros(n - n // 2, int)])
        kind = np.where(y == 1, "memorized", np.where(rng.uniform(size=n) < 0.4, "conflict", "clean"))
        shift = np.where(kind == "conflict", 2.0, 0.0)  # conflicts sit between clean and memory
        X = {
            "repcs_z": rng.normal(6 - 4 * y - shift, 1.0),
            "closed_book_logprob": rng.normal(-2 + y, 1.0),
            "context_token_fraction": rng.uniform(size=n),
        }
        return X, y, kind

    X, y, kind = draw(1200)
    marginal = VerdictModel(candidates=WHOLE, alpha=0.05, seed=0).fit(X, y)
    per_kind = VerdictModel(candidates=WHOLE, alpha=0.05, seed=0).fit(X, y, groups=kind)
    assert per_kind.certified_ and set(per_kind.group_thresholds_) == {"clean", "conflict"}
    assert per_kind.threshold_ == max(per_kind.group_thresholds_.values()) >= marginal.threshold_
    assert sum(per_kind.n_conformal_by_group_.values()) == per_kind.n_conformal_
    fresh, fy, fk = draw(20000)
    conflict = (fy == 0) & (fk == "conflict")
    p_m, p_k = marginal.predict_proba(fresh), per_kind.predict_proba(fresh)
    assert marginal.flag(p_m)[conflict].mean() > 0.08  # the marginal bound does not hold per kind
    assert per_kind.flag(p_k)[conflict].mean() <= 0.05 + 0.03  # the per-kind one does
    back = VerdictModel.from_dict(per_kind.to_dict())
    assert back.group_thresholds_ == per_kind.group_thresholds_ and back.threshold_ == per_kind.threshold_
    assert per_kind.to_dict()["certify"] == "per-kind" and "certify" not in marginal.to_dict()
    # a kind with too few conformal answers cannot certify alpha: the model says so
    few = np.flatnonzero((y == 0) & (kind == "conflict"))[10:]
    keep = np.setdiff1d(np.arange(len(y)), few)
    small = VerdictModel(candidates=WHOLE, alpha=0.05, seed=0).fit(
        {k: v[keep] for k, v in X.items()}, y[keep], groups=kind[keep]
    )
    assert not small.certified_ and small.threshold_ == 0.5
    assert "conflict (5)" in str(small.uncertified_reason()) and "within each kind" in str(
        small.uncertified_reason()
    )
    # a rare kind is in the conformal set whatever the seed (the draw is stratified by kind) and,
    # with too few answers, leaves the model uncertified, naming it
    rare = kind.copy()
    rare[np.flatnonzero((y == 0) & (kind == "clean"))[:2]] = "rare"
    for seed in range(4):
        m = VerdictModel(candidates=WHOLE, alpha=0.05, seed=seed).fit(X, y, groups=rare)
        assert m.n_conformal_by_group_["rare"] == 1 and not m.certified_
        assert "rare (1)" in str(m.uncertified_reason())
    assert per_kind.uncertified_reason() is None
    with pytest.raises(InputError, match="groups"):
        VerdictModel(candidates=WHOLE).fit(X, y, groups=kind[:10])
