"""Calibration that verifies its labels, the validation card, the layout check and bad input (issue 27).

Tiny random models where the real one is not needed; one test on the real default model (an item
it cannot know, mislabelled as memory, is dropped by the verification calibrate runs).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mnemoscope.audit.calibrate import calibrate_profile, check_class_counts
from mnemoscope.audit.profile import CalibrationConfig, ProfileError, load_profile
from mnemoscope.audit.validation import (
    binomial_ci,
    read_held_out,
    source_of_row,
    split_by_fact,
    validation_from_rows,
)
from mnemoscope.bench.label_check import check_item, check_verifiable, verify_labels
from mnemoscope.data.records import Record
from mnemoscope.errors import InputError


def _rec(i: int, label: int, answer: str, **extra: Any) -> Record:
    return Record(
        id=f"r{i}",
        context=f"The town of Zor{i} lies on the river Ka{i % 5}.",
        query=f"Where is Zor{i}?",
        label=label,
        extra={"answer": answer, **extra},
    )


# -- the rule (pure) -------------------------------------------------------------------------------


def test_rule_per_kind() -> None:
    mem = {"id": "m", "kind": "memorized", "label": 1, "answer": "Paris"}
    clean = {"id": "c", "kind": "clean", "label": 0, "answer": "Zorblat"}
    conflict = {"id": "k", "kind": "conflict", "label": 1, "answer": "Paris", "context_answer": "Lyon"}
    assert check_item(mem, "Paris.", "It is Paris").label == 1
    assert check_item(mem, "London", "Paris").reason == "not answered closed-book"
    assert check_item(mem, "Paris", "Lyon").reason == "not answered with the context"
    assert check_item(clean, "no idea", "Zorblat").label == 0
    assert check_item(clean, "Zorblat", "Zorblat").reason == "answered closed-book"
    # a conflict item is labelled by the answer given WITH the context, whatever its given label
    assert check_item(conflict, None, "The capital is Paris.").label == 1
    assert check_item(conflict, None, "The capital is Lyon.").label == 0
    assert check_item(conflict, None, "Marseille").label is None
    assert check_item(conflict, None, "Paris, not Lyon").reason == "gave both answers"
    # ... unless the model gives the context's answer closed-book too: following and believing it
    # cannot be told apart, so the item is dropped (as a clean item answered closed-book is)
    believes = check_item(conflict, "It is Lyon.", "The capital is Lyon.")
    assert believes.label is None and believes.reason == "gives the context's answer closed-book too"
    assert check_item(conflict, "It is Lyon.", "The capital is Paris.").label == 1
    chk = verify_labels([mem, clean, conflict], {"m": ("Paris", "Paris"), "c": ("x", "x"), "k": ("Lyon", "")})
    assert chk.counts["conflict"] == {"total": 1, "kept": 1, "dropped": 0, "memory": 0, "context": 1}
    assert chk.reasons == {"clean": {"not answered with the context": 1}}
    assert chk.n_class() == {"memory": 1, "context": 1}
    # given labels are kept as they are
    given = verify_labels([clean], {"c": ("x", "x")}, mode="given")
    assert [(d.label, d.keep) for d in given.decisions] == [(0, True)]


def test_bad_input_is_named_before_any_model_call() -> None:
    recs = [_rec(0, 1, "Ka0"), Record(id="r1", context="c", query="q", label=0)]
    with pytest.raises(InputError, match=r"record r1, field 'answer'.*--labels given"):
        check_verifiable(recs)
    with pytest.raises(InputError, match="context_answer"):
        check_verifiable([_rec(2, 1, "Ka2", kind="conflict", context_answer="")])
    # every item failing verification is an error that says so, with the counts per kind
    items = [{"id": f"m{i}", "kind": "memorized", "label": 1, "answer": "Paris"} for i in range(3)]
    with pytest.raises(InputError, match=r"all 3 items failed label verification.*memorized: 0/3 kept"):
        verify_labels(items, {f"m{i}": ("London", "London") for i in range(3)})
    # too few verified items per class: the counts are named
    chk = verify_labels(
        [*items, {"id": "c", "kind": "clean", "label": 0, "answer": "Zor"}],
        {"m0": ("Paris", "Paris"), "m1": ("Paris", "Paris"), "m2": ("x", "x"), "c": ("Zor", "")},
    )
    with pytest.raises(InputError, match=r"2 memory and 1 context-needed kept \(at least 5"):
        check_class_counts(chk, 5)


def test_split_keeps_facts_whole_and_stratifies() -> None:
    labels = [1, 1, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0] * 3
    groups = [f"f{i // 2}" for i in range(len(labels))]  # pairs of items share a fact
    cal, ho = split_by_fact(labels, groups, seed=0, fraction=1 / 3)
    assert len(set(cal) & set(ho)) == 0 and len(cal) + len(ho) == len(labels)
    assert not {groups[i] for i in cal} & {groups[i] for i in ho}
    assert {labels[i] for i in ho} == {0, 1}
    assert split_by_fact(labels[:4], groups[:4], seed=0, fraction=1 / 3)[1].size == 0  # too few facts


def test_binomial_ci_matches_scipy() -> None:
    from scipy.stats import binomtest

    for k, n in ((0, 20), (1, 33), (7, 40), (20, 20)):
        ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
        assert np.allclose(binomial_ci(k, n), (ci.low, ci.high))


# -- calibrate on a tiny model: the card equals a recomputation from the stored rows --------------


@pytest.fixture(scope="module")
def tiny_profile(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    from helpers import tiny_lm
    from server_helpers import tiny_records

    lm = tiny_lm(layers=3)
    out = tmp_path_factory.mktemp("calib") / "profile"
    calibrate_profile(
        lm, tiny_records(48), out, CalibrationConfig(max_new_tokens=4, chat=False), progress=False
    )
    return lm, out


def test_card_numbers_equal_a_recomputation_from_the_stored_held_out_rows(tiny_profile: Any) -> None:
    from sklearn.metrics import roc_auc_score

    from mnemoscope.stats import auc_ci

    lm, out = tiny_profile
    prof = load_profile(out, model=lm.info)
    card = prof.validation
    assert card is not None and card["profile_hash"] == prof.content_hash
    rows = read_held_out(out)
    assert len(rows) == card["held_out"]["n"] > 0
    held = set(prof.header["split"]["held_out_ids"])
    assert {r["id"] for r in rows} == held
    y = np.array([r["label"] for r in rows])
    pm = np.array([r["p_memory"] for r in rows])
    flag = np.array([r["memory_flag"] for r in rows])
    assert card["auc"]["estimate"] == pytest.approx(roc_auc_score(y, pm))
    e = auc_ci(pm, y, n_resamples=1000, rng=0)
    assert card["auc"]["ci"] == pytest.approx([e.ci_low, e.ci_high])
    n_ctx, n_mem = int((y == 0).sum()), int((y == 1).sum())
    assert card["false_flags"] == int(flag[y == 0].sum())
    assert card["false_flag_rate"] == pytest.approx(flag[y == 0].mean())
    assert card["false_flag_ci"] == pytest.approx(list(binomial_ci(card["false_flags"], n_ctx)))
    assert card["memory_recall"] == pytest.approx(flag[y == 1].mean())
    by_kind = card["false_flags_by_kind"]
    assert sum(d["flagged"] for d in by_kind.values()) == card["false_flags"]
    assert sum(d["n"] for d in by_kind.values()) == n_ctx
    assert (card["held_out"]["n_memory"], card["held_out"]["n_context"]) == (n_mem, n_ctx)
    # the three-way matrix: the source decision re-run on the stored tokens gives what the audit said
    truth = ["memory" if v == 1 else "context" for v in y]
    for t in ("memory", "context"):
        assert card["confusion"][t] == dict(
            Counter(r["source"] for r, tt in zip(rows, truth, strict=True) if tt == t)
        )
    assert [source_of_row(r) for r in rows] == [r["source"] for r in rows]
    assert card == {**card, **validation_from_rows(rows, alpha=card["alpha"])}
    # the split: calibration and held-out counts add up, and fit ≠ held-out
    sp = prof.header["split"]
    assert sp["n_held_out"] == {"memory": n_mem, "context": n_ctx}
    assert sp["n_calibration"]["memory"] + n_mem == 24 and prof.header["data"]["n_fit"] == 48 - len(rows)


def test_a_marked_profile_says_so_in_every_audit_and_the_layout_is_checked(tiny_profile: Any) -> None:
    from mnemoscope.audit.auditor import Auditor
    from mnemoscope.audit.validation import profile_status

    lm, out = tiny_profile
    prof = load_profile(out, model=lm.info)
    st = profile_status(prof)
    assert not st["ok"] and any("not certified" in r or "below 0.8" in r for r in st["reasons"])
    r = Auditor(lm, prof).audit_one("Zor3 lies on Ka3.", "Where is Zor3?")
    assert r.guarantee["profile"] == st and r.notes[0].startswith("the profile behind this audit is marked")
    assert prof.layout["max_new_tokens"] == 4 and prof.layout["stop"]  # no chat template: default stops
    with pytest.raises(ProfileError, match=r"T \(max_new_tokens\): profile 4 vs audit 8"):
        Auditor(lm, prof, layout={"max_new_tokens": 8})
    with pytest.raises(ProfileError, match="stop sequences"):
        Auditor(lm, prof, layout={"stop": ["END"]})
    Auditor(lm, prof, layout={"max_new_tokens": 4, "stop": prof.layout["stop"]})  # the same: accepted
    # per request (server, proxy, batch files): a longer answer than the profile saw is refused, named
    from mnemoscope.audit.requests import AuditFailure, AuditRequest

    longer, shorter = Auditor(lm, prof).audit(
        [AuditRequest("Zor3 lies on Ka3.", "Where is Zor3?", max_new_tokens=9),
         AuditRequest("Zor3 lies on Ka3.", "Where is Zor3?", max_new_tokens=2)]
    )  # fmt: skip
    assert isinstance(longer, AuditFailure) and longer.status == 422 and longer.field == "max_new_tokens"
    assert "at most T = 4" in longer.message and not isinstance(shorter, AuditFailure)


def test_a_model_without_profile_names_the_command_and_the_cache_is_found(
    tiny_profile: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from mnemoscope.audit.auditor import Auditor
    from mnemoscope.audit.profile import cached_profile_dir, default_profile_path

    lm, out = tiny_profile
    monkeypatch.setenv("MNEMOSCOPE_CACHE_DIR", str(tmp_path))
    with pytest.raises(
        ProfileError, match=r"`mnemoscope calibrate --model .* --out .*profiles.*` \(about \d+ min"
    ):
        default_profile_path(lm.info)
    shutil.copytree(out, cached_profile_dir(lm.info), ignore=shutil.ignore_patterns("traces"))
    assert default_profile_path(lm.info) == cached_profile_dir(lm.info)
    assert Auditor.for_model(lm).profile.content_hash == load_profile(out).content_hash


def test_verify_mode_refuses_a_tiny_model_that_answers_nothing(tmp_path: Path) -> None:
    from helpers import tiny_lm

    lm = tiny_lm(layers=2)
    recs = [_rec(i, 1, "Paris") for i in range(6)]
    with pytest.raises(InputError, match="all 6 items failed label verification on this model"):
        calibrate_profile(
            lm,
            recs,
            tmp_path / "p",
            CalibrationConfig(max_new_tokens=2, chat=False, labels="verify"),
            progress=False,
        )


# -- the real default model --------------------------------------------------------------------------


def test_real_model_drops_an_invented_item_mislabelled_as_memory(real_lm: Any, tmp_path: Path) -> None:
    """calibrate's verification on the real model: a fact it knows stays memory, an invented one it
    cannot know (labelled memory by mistake) is dropped, an invented one with its context is clean."""
    from mnemoscope.bench.verify import verify_reliance
    from mnemoscope.trace import PairConfig
    from mnemoscope.trace.templates import PromptBuilder

    items = [
        {"id": "known", "kind": "memorized", "label": 1, "answer": "Paris",
         "context": "Paris is the capital and largest city of France.", "query": "What is the capital of France?"},
        {"id": "invented-as-memory", "kind": "memorized", "label": 1, "answer": "Vrelmouth",
         "context": "The capital of the island of Quastova is Vrelmouth.",
         "query": "What is the capital of the island of Quastova?"},
        {"id": "invented", "kind": "clean", "label": 0, "answer": "Dornavel",
         "context": "The capital of the island of Pellinar is Dornavel.",
         "query": "What is the capital of the island of Pellinar?"},
    ]  # fmt: skip
    cfg = PairConfig(builder=PromptBuilder(chat=True), max_new_tokens=24, answer_without=True)
    res = verify_reliance(real_lm, items, tmp_path, cfg, batch_size=3, progress=False)
    kept = {json.loads(x)["id"] for x in (tmp_path / "verified.jsonl").read_text().splitlines()}
    assert "invented-as-memory" not in kept
    assert res["dropped_reasons"]["memorized"].get("not answered closed-book") == 1
    assert {"known", "invented"} <= kept, res


# -- the endpoint calibration: the same verification, split and card (a fake server) --------------


def test_endpoint_calibration_verifies_splits_and_writes_the_card(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The calibration over an endpoint (:class:`EndpointTracer`) with ``labels="verify"``: the server's traces are stood in by
    tiny-model traces (the tracing itself is covered by the real-server tests), answers are checked
    by a scripted matcher; dropped items are counted, the held-out part is scored through the
    endpoint backend and the card is written."""
    from types import SimpleNamespace

    import mnemoscope.audit.tracing as ep
    import mnemoscope.bench.reliance as rel
    from helpers import tiny_lm
    from mnemoscope.audit.signals import answer_pieces
    from mnemoscope.models.endpoint import Capabilities, EndpointFingerprint
    from mnemoscope.trace import PairConfig, PairItem, load_traces
    from mnemoscope.trace.pipeline import run_pairs

    lm = tiny_lm(layers=2)
    recs = [_rec(i, i % 2, f"Ka{i % 5}", fact_id=f"f{i}") for i in range(36)]
    run_pairs(
        lm,
        [PairItem(r.id, r.context, r.query, r.label) for r in recs],
        tmp_path / "t",
        config=PairConfig(max_new_tokens=3, answer_without=True),
        progress=False,
    )
    traces = {t.id: t for t in load_traces(tmp_path / "t")}
    drop = {"r0", "r1"}  # r0 (memory) not answered closed-book, r1 (clean) answered closed-book

    calls: Counter[str] = Counter()

    def matcher(generation: str, item: Any) -> bool:  # check_item asks closed-book first, then open-book
        closed = calls[item["id"]] % 2 == 0
        calls[item["id"]] += 1
        if item["id"] in drop:
            return closed if item["label"] == 0 else not closed
        return not closed or item["label"] == 1  # memory: both; clean: open-book only

    monkeypatch.setattr(rel, "answer_matches", matcher)

    def fake_trace(client: Any, records: Any, config: Any, folder: Any, **kw: Any) -> Any:
        out = ep.TracedRecords()
        for r in records:
            t = traces[r.id]
            out.traces.append(t)
            out.pieces.append(answer_pieces(lm.tokenizer, t.answer_ids))
            out.records.append(r)
            out.closed_book[r.id] = t.answer_without
        return out

    monkeypatch.setattr(ep, "trace_with_closed_book", fake_trace)
    caps = Capabilities("fake", "llama.cpp", "llama.cpp", True, True, 20, score_method="native")
    client = SimpleNamespace(
        model="fake",
        endpoint="http://fake/v1",
        config=SimpleNamespace(to_dict=lambda: {"base_url": "http://fake/v1"}, concurrency=1),
        require_teacher_forcing=lambda: caps,
        require_top_k=lambda k: None,
        fingerprint=lambda: EndpointFingerprint("fake", {"p": {"a": -0.1}}),
    )
    from mnemoscope.audit.calibrate import calibrate

    cfg = CalibrationConfig(max_new_tokens=3, labels="verify", min_per_class=5)
    tracer = ep.EndpointTracer(client, chat_template="none", top_k=5)
    prof = calibrate(tracer, recs, tmp_path / "p", cfg, progress=False)
    lab = prof.header["labels"]
    assert lab["n_kept"] == 34 and lab["dropped_reasons"] == {
        "memory": {"not answered closed-book": 1},
        "clean": {"answered closed-book": 1},
    }
    card = prof.validation
    assert card is not None and card["profile_hash"] == prof.content_hash
    rows = read_held_out(tmp_path / "p")
    assert len(rows) == card["held_out"]["n"] and not {r["id"] for r in rows} & drop
    assert card["labels"]["n_per_class"] == {"memory": 17, "context": 17}
    assert prof.layout["stop"] == list(prof.builder.stop) and prof.layout["stop"]  # no chat template


def test_a_profile_whose_held_out_false_flags_exceed_alpha_is_marked() -> None:
    """The guarantee failing on held-out answers (the false-flag CI wholly above alpha) marks the
    profile, as a low AUC does; within sampling of alpha it stays validated."""
    from types import SimpleNamespace

    from mnemoscope.audit.validation import profile_status

    def card(flags: int, lo: float, hi: float) -> dict[str, Any]:
        return {
            "auc": {"estimate": 0.97, "ci": [0.95, 0.99]},
            "held_out": {"n": 247, "n_memory": 103, "n_context": 144},
            "alpha": 0.05,
            "false_flag_rate": flags / 144,
            "false_flag_ci": [lo, hi],
            "false_flag_within_alpha": lo <= 0.05,
            "memory_recall": 0.9,
        }

    verdict = SimpleNamespace(certified_=True, alpha=0.05, n_conformal_=143, min_n_=19)
    bad = profile_status(SimpleNamespace(verdict=verdict, validation=card(15, 0.059, 0.166)))
    assert not bad["ok"] and bad["status"] == "marked"
    assert any("false-flag rate 0.104 [0.059, 0.166] is above alpha 0.05" in r for r in bad["reasons"])
    good = profile_status(SimpleNamespace(verdict=verdict, validation=card(7, 0.020, 0.097)))
    assert good["ok"] and good["status"] == "validated"


def test_crm_probability_is_certified_on_the_scores_audits_compute(tmp_path: Path) -> None:
    """Opted in, CRM's classifier is a verdict signal whose conformal scores are the audits' own:
    the threshold is the conformal quantile of ``p_memory`` that ``Auditor.score`` gives the
    recorded conformal answers, and the CRM the audits use never fitted on them."""
    from helpers import tiny_lm
    from mnemoscope.audit.auditor import Auditor
    from mnemoscope.pipelines.crm.fitter import CRMFitter
    from mnemoscope.stats.conformal import conformal_upper
    from mnemoscope.trace.store import load_traces
    from server_helpers import tiny_records

    lm = tiny_lm(layers=3)
    out = tmp_path / "p"
    cfg = CalibrationConfig(
        max_new_tokens=4,
        chat=False,
        held_out_fraction=0,
        verdict_alpha=0.2,
        verdict_candidates=("crm_probability",),
    )
    calibrate_profile(lm, tiny_records(48), out, cfg, progress=False, fitter=CRMFitter())
    prof = load_profile(out, model=lm.info)
    v = prof.verdict
    assert v is not None and v.selected_ == ("crm_probability",) and v.certified_
    ids = set(v.conformal_ids_)
    assert len(ids) == v.n_conformal_ == 12  # half the 24 clean answers
    # one held-out clean set for both thresholds: the anomaly rule's is the verdict's
    assert prof.anomaly.n_threshold == len(ids)
    pairs = [t for t in load_traces(out / "traces" / "pairs") if t.id in ids]
    assert {t.id for t in pairs} == ids and all(t.id in {f"r{i}" for i in range(0, 48, 2)} for t in pairs)
    auditor = Auditor(lm, prof, batch_size=1)
    p = [auditor.score(t).p_memory for t in pairs]
    assert v.threshold_ == pytest.approx(conformal_upper(p, 0.2), abs=1e-9)


def test_the_default_verdict_uses_black_box_signals_only() -> None:
    from mnemoscope.audit.profile import BLACK_BOX_SIGNALS

    assert set(CalibrationConfig().verdict_candidates) <= set(BLACK_BOX_SIGNALS)
    assert "crm_probability" not in BLACK_BOX_SIGNALS and "lts_score" not in BLACK_BOX_SIGNALS


def test_a_resumed_calibration_says_how_many_traces_it_reused(tmp_path: Path) -> None:
    from helpers import tiny_lm
    from mnemoscope.report.profile_card import profile_card, render_text
    from server_helpers import tiny_records

    lm = tiny_lm(layers=2)
    out = tmp_path / "p"
    cfg = CalibrationConfig(max_new_tokens=4, chat=False)
    first = calibrate_profile(lm, tiny_records(36), out, cfg, progress=False)
    assert first.header["data"]["n_traces_reused"] == 0
    assert "resumed:" not in render_text(profile_card(first, first.validation))
    again = calibrate_profile(lm, tiny_records(40), out, cfg, progress=False)
    d = again.header["data"]
    assert (d["n_traced"], d["n_traces_reused"]) == (40, 36)
    assert again.validation is not None and again.validation["data"]["n_traces_reused"] == 36
    assert "resumed: 36 of 40 records' traces" in render_text(profile_card(again, again.validation))


def test_committed_calibration_cards_equal_a_recomputation_from_their_held_out_rows() -> None:
    """Every committed card (benchmarks/results/calibration/*) is what its own held-out rows
    give under the current source decision: a changed decision or an edited card fails here."""
    root = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "calibration"
    cards = sorted(p.parent for p in root.glob("*/card.json") if (p.parent / "held_out.jsonl").is_file())
    assert len(cards) >= 8
    for d in cards:
        card = json.loads((d / "card.json").read_text())["validation"]
        fresh = validation_from_rows(read_held_out(d / "held_out.jsonl"), alpha=card["alpha"])
        diff = sorted(k for k in fresh if k in card and fresh[k] != card[k])
        assert not diff, (d.name, diff)
        if "false_flags_by_kind" in card:
            assert sum(x["flagged"] for x in card["false_flags_by_kind"].values()) == card["false_flags"]


def test_a_verdict_with_no_measurable_signal_is_refused_naming_it(tmp_path: Path) -> None:
    from helpers import tiny_lm
    from mnemoscope.pipelines.crm.fitter import CRMFitter
    from server_helpers import tiny_records

    cfg = CalibrationConfig(
        max_new_tokens=4, chat=False, classifier="none", verdict_candidates=("crm_probability",)
    )
    lm = tiny_lm(layers=2)
    with pytest.raises(InputError, match="crm_probability needs a CRM classifier"):
        calibrate_profile(lm, tiny_records(36), tmp_path / "p", cfg, progress=False, fitter=CRMFitter())
    # CRM asked without its fitter (the audit core never imports it): refused, naming it
    with pytest.raises(InputError, match=r"no fitter.*CRMFitter"):
        calibrate_profile(lm, tiny_records(36), tmp_path / "q", cfg, progress=False)


def test_labels_given_with_some_records_unlabelled_is_refused_on_both_backends(tmp_path: Path) -> None:
    """`--labels given` on the shipped kind of input, whose knowledge-conflict records carry no label:
    an error naming the first unlabelled record and how many, before any model or server call, never
    an all-clean calibration."""
    from mnemoscope.audit.calibrate import calibrate, calibrate_profile
    from mnemoscope.audit.profile import CalibrationConfig
    from mnemoscope.audit.tracing import EndpointTracer
    from mnemoscope.data.records import Record

    recs = [Record(id=f"m{i}", context="c", query="q", label=i % 2) for i in range(6)]
    recs += [Record(id=f"conflict-{i}", context="c", query="q", label=None) for i in range(3)]

    class NoCalls:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"no model or server call before the labels are checked ({name})")

    with pytest.raises(InputError, match=r"3 of 9 records have no label") as e:
        calibrate_profile(NoCalls(), recs, tmp_path / "p", CalibrationConfig(labels="given"))
    assert e.value.record == "conflict-0" and e.value.field == "label"
    with pytest.raises(InputError, match=r"3 of 9 records have no label") as e2:
        calibrate(EndpointTracer(NoCalls()), recs, tmp_path / "e", CalibrationConfig(labels="given"))
    assert e2.value.record == "conflict-0"
