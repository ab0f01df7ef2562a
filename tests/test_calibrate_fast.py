"""The default calibration computes only what its verdict needs, several records per forward (issue 35).

* batched lockstep tracing (both paths and the closed-book answer in one padded batch, a shared
  prompt prefix prefilled once, finished rows leaving the batch) equals the unbatched
  teacher-forced trace;
* a calibration without CRM traces no hidden states, never fits CRM, writes no ``crm.npz``, and
  its profile loads, hashes and audits (no anomaly rule, no ``crm`` block); CRM stays opt-in;
* the per-class draw reads the answers only;
* ``--with-crm`` is refused over an endpoint.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from helpers import tiny_lm, zor_records
from mnemoscope.audit.calibrate import calibrate_profile
from mnemoscope.audit.profile import CalibrationConfig, ProfileError, load_profile, profile_hash
from mnemoscope.errors import InputError
from mnemoscope.trace import PairConfig, PairItem, Tracer
from mnemoscope.trace.lockstep import MIN_SHARED_PREFIX, trace_lockstep
from mnemoscope.trace.pair import prepare_pair, trace_prepared
from mnemoscope.trace.store import load_answers, load_traces
from mnemoscope.trace.templates import PromptBuilder
from mnemoscope.trace.types import PairTrace
from server_helpers import tiny_records

ITEMS = [
    PairItem("a", "Quenmar lies on the Zorblat river.", "Which river?"),
    PairItem("b", "", "Which river?"),
    PairItem(
        "c", "A much longer context that states several invented facts about Vell the fox.", "Who is Vell?"
    ),
    PairItem("d", "Ka.", "A longer query than the others, to vary the no-context prompt length?"),
    PairItem("e", "Zorblat.", "Where?"),
    PairItem("f", "The sky is green here.", "What colour is the sky?"),
]
STATS = (
    "logprob_answer_with",
    "logprob_answer_without",
    "kl_steps",
    "kl_rev_steps",
    "entropy_with",
    "entropy_without",
    "topk_logprobs_with",
    "topk_logprobs_without",
)


def _ending_token(lm: Any, cfg: PairConfig) -> int:
    """A token the tiny model writes mid-answer, as EOS: rows then end at different steps (a random
    model never writes its real EOS), so early stop and row removal are exercised."""
    tracer = Tracer(lm, batch_size=1)
    ref = trace_prepared(tracer, [prepare_pair(tracer, it, cfg) for it in ITEMS], cfg)
    answers = [a.tolist() for t in ref for a in (t.answer_ids, t.answer_without_ids) if a is not None]
    first = {a[0] for a in answers}  # never the first token: every row decodes at least one step
    seen = Counter(y for a in answers for y in a[1:6] if y not in first)
    return seen.most_common(1)[0][0] if seen else tracer.eos_ids[0]


def _assert_same(a: PairTrace, b: PairTrace) -> None:
    assert a.answer_ids.tolist() == b.answer_ids.tolist() and a.answer_with == b.answer_with
    assert a.answer_without_ids is not None and b.answer_without_ids is not None
    assert a.answer_without_ids.tolist() == b.answer_without_ids.tolist()
    assert a.answer_without == b.answer_without and a.answer_cut == b.answer_cut
    for f in STATS:
        np.testing.assert_allclose(getattr(a, f), getattr(b, f), atol=1e-4, rtol=0, err_msg=f)
    np.testing.assert_array_equal(a.topk_ids_with[:, 0], b.topk_ids_with[:, 0])
    np.testing.assert_array_equal(a.topk_ids_without[:, 0], b.topk_ids_without[:, 0])
    assert (a.h_with is None) == (b.h_with is None)
    if a.h_with is not None:
        np.testing.assert_allclose(a.h_with, b.h_with, atol=1e-4, rtol=1e-5)
        np.testing.assert_allclose(a.h_without, b.h_without, atol=1e-4, rtol=1e-5)
    assert a.identical_prompts == b.identical_prompts and a.stopped_at_eos == b.stopped_at_eos


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2", "gemma3_text"])
def test_batched_lockstep_with_the_closed_book_answer_equals_the_unbatched_trace(
    arch: str, chat: bool, hidden: bool
) -> None:
    """Six records in one batch (up to 18 rows) against each traced alone by the teacher-forced path
    (generate, two full forwards, a second generate): the same answers, closed-book answers and
    per-step statistics; rows leave the batch as their answers end."""
    lm = tiny_lm(arch)
    cfg = PairConfig(builder=PromptBuilder(chat=chat), max_new_tokens=9, top_k=5, hidden=hidden)
    eos = _ending_token(lm, cfg)
    one = Tracer(lm, batch_size=1, eos_token_ids=[eos])
    prepared = [prepare_pair(one, it, cfg) for it in ITEMS]
    ref = trace_prepared(one, prepared, cfg)
    rows: list[tuple[int, int]] = []
    handle = lm.model.register_forward_pre_hook(
        lambda m, a, kw: rows.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    try:
        got = trace_lockstep(
            Tracer(lm, batch_size=6, eos_token_ids=[eos]), prepared, cfg, schedule="lockstep"
        )
    finally:
        handle.remove()
    for a, b in zip(got, ref, strict=True):
        _assert_same(a, b)
    steps = [n for n, width in rows if width == 1]
    # 6 with-context + 6 no-context rows, and a closed-book row per pair from the step where its
    # answer diverges from the with-context one (a fork of its no-context row), finished rows leaving
    assert steps and steps[0] <= 18 and max(steps) <= 18
    lengths = {len(t.answer_ids) for t in ref} | {len(t.answer_without_ids) for t in ref}  # type: ignore[arg-type]
    if len(lengths) > 1:
        assert steps[-1] < 18
    # one forward per decode step for all three paths: at most T steps after the prefill
    assert len(steps) <= cfg.max_new_tokens


def test_the_shared_prompt_prefix_is_prefilled_once(lm: Any) -> None:
    """A chat template's common opening is prefilled once for the batch (one row), then each row's
    own tokens; a model with sliding-window layers shorter than the sequence never shares."""
    cfg = PairConfig(builder=PromptBuilder(chat=True), max_new_tokens=4, top_k=5, hidden=False)
    tracer = Tracer(lm, batch_size=6)
    prepared = [prepare_pair(tracer, it, cfg) for it in ITEMS]
    rows: list[tuple[int, int]] = []
    handle = lm.model.register_forward_pre_hook(
        lambda m, a, kw: rows.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    try:
        trace_lockstep(tracer, prepared, cfg, schedule="lockstep")
    finally:
        handle.remove()
    (n, shared), (r, rest) = rows[0], rows[1]
    assert n == 1 and shared >= MIN_SHARED_PREFIX and r == 12
    longest = max(len(p.ids_with) for p in prepared)
    assert rest == longest - shared
    gemma = tiny_lm("gemma3_text")  # sliding window 8 tokens in the helper's config
    rows.clear()
    handle = gemma.model.register_forward_pre_hook(
        lambda m, a, kw: rows.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    try:
        gt = Tracer(gemma, batch_size=6)
        trace_lockstep(gt, [prepare_pair(gt, it, cfg) for it in ITEMS], cfg, schedule="lockstep")
    finally:
        handle.remove()
    assert rows[0][0] == 12  # the whole prompts, no shared prefill


def test_the_batch_composition_does_not_change_a_trace(lm: Any) -> None:
    cfg = PairConfig(max_new_tokens=6, top_k=5, hidden=False)
    eos = _ending_token(lm, cfg)
    tracer = Tracer(lm, batch_size=4, eos_token_ids=[eos])
    prepared = [prepare_pair(tracer, it, cfg) for it in ITEMS]
    many = trace_lockstep(tracer, prepared, cfg)  # batches of 4 and 2 (lockstep, then fused)
    alone = [trace_lockstep(tracer, [p], cfg)[0] for p in prepared]  # fused, one record each
    for a, b in zip(many, alone, strict=True):
        _assert_same(a, b)


# -- the answers-only reader ------------------------------------------------------------------------


def test_load_answers_reads_what_load_traces_reads(lm: Any, tmp_path: Path) -> None:
    from mnemoscope.trace.pipeline import run_pairs

    cfg = PairConfig(max_new_tokens=3, top_k=5, hidden=False)
    run_pairs(lm, ITEMS[:4], tmp_path / "p", config=cfg, batch_size=2, progress=False, decode="lockstep")
    run_pairs(lm, ITEMS, tmp_path / "p", config=cfg, batch_size=4, progress=False, decode="lockstep")
    full = {t.id: (t.answer_with, t.answer_without) for t in load_traces(tmp_path / "p")}
    assert load_answers(tmp_path / "p") == full and len(full) == len(ITEMS)
    assert load_answers(tmp_path / "p", ["b", "e", "nope"]) == {k: full[k] for k in ("b", "e")}
    from mnemoscope.errors import TraceStoreError

    with pytest.raises(TraceStoreError, match="not a trace folder"):
        load_answers(tmp_path / "none")


# -- a calibration without CRM ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def no_crm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """A default calibration of a tiny llama, CRM's fit made to fail: it must never be entered."""
    import mnemoscope.pipelines.crm.fitter as crm_fitter
    from mnemoscope.pipelines.crm.fitter import CRMFitter

    lm = tiny_lm(layers=3)
    out = tmp_path_factory.mktemp("no-crm") / "profile"

    def refuse(*a: Any, **k: Any) -> Any:
        raise AssertionError("the default calibration fitted CRM")

    mp = pytest.MonkeyPatch()
    mp.setattr(crm_fitter, "fit_crm", refuse)
    try:
        calibrate_profile(
            lm, tiny_records(48), out, CalibrationConfig(max_new_tokens=4, chat=False), progress=False
        )
        with pytest.raises(AssertionError, match="fitted CRM"):  # the patch is where CRM is fitted
            calibrate_profile(
                lm,
                tiny_records(48),
                out.parent / "with-crm",
                CalibrationConfig(max_new_tokens=4, chat=False, with_crm=True),
                progress=False,
                fitter=CRMFitter(),
            )
    finally:
        mp.undo()
    return lm, out


def test_a_default_calibration_traces_no_hidden_states_and_saves_no_crm(no_crm: tuple[Any, Path]) -> None:
    out = no_crm[1]
    assert not (out / "crm.npz").exists()
    header = json.loads((out / "profile.json").read_text())
    assert header["crm"] is None and header["anomaly"] is None and header["config"]["with_crm"] is False
    assert header["profile_hash"] == profile_hash(header)  # profile.json is the whole profile
    traces = list(load_traces(out / "traces" / "pairs"))
    assert len(traces) == 48 and all(t.h_with is None and t.h_without is None for t in traces)
    assert all(t.answer_without_ids is not None for t in traces)  # label verification reads them
    assert not (out / "traces" / "extras").exists()  # no empty extras record per item
    assert json.loads((out / "traces" / "pairs" / "meta.json").read_text())["settings"]["hidden"] is False


def test_a_profile_without_crm_loads_and_audits(no_crm: tuple[Any, Path]) -> None:
    from mnemoscope.audit.auditor import Auditor, AuditRequest
    from mnemoscope.report.profile_card import profile_card, render_text

    lm, out = no_crm
    prof = load_profile(out, model=lm.info)
    assert prof.crm is None and prof.verdict is not None and not prof.needs_level1
    assert prof.pair_config().hidden is False  # audits trace no hidden states either
    assert prof.validation is not None and prof.validation["profile_hash"] == prof.content_hash
    assert render_text(profile_card(prof, prof.validation))  # the card renders without CRM
    auditor = Auditor(lm, prof, max_context_tokens=300)
    res = auditor.audit([AuditRequest("Zor1 lies on Ka1.", "Where is Zor1?"), AuditRequest("", "Where?")])
    for r in res:
        d = r.to_dict()  # type: ignore[union-attr]
        assert d["crm"] is None and d["source"] in (
            "context",
            "memory",
            "mixed",
            "unsupported",
            "undetermined",
        )
        assert d["repcs"]["n_steps"] >= 1
    with pytest.raises(InputError, match=r"crm-anomaly rule reads CRM.*--with-crm"):
        Auditor(lm, prof, rule="crm-anomaly")
    assert Auditor(lm, prof, rule="repcs").audit_one("Zor2 lies on Ka2.", "Where is Zor2?").crm is None
    # altering profile.json is caught without a crm.npz to hash
    p = out / "profile.json"
    text = p.read_text()
    try:
        p.write_text(text.replace('"with_crm": false', '"with_crm": true'))
        with pytest.raises(ProfileError, match="hash mismatch"):
            load_profile(out)
    finally:
        p.write_text(text)


def test_a_profile_without_crm_is_served(no_crm: tuple[Any, Path], tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from mnemoscope.audit.auditor import Auditor
    from mnemoscope.server.app import create_app
    from mnemoscope.server.config import load_settings
    from mnemoscope.server.storage import open_store
    from server_helpers import API_KEY

    lm, out = no_crm
    settings = load_settings(None, {"max_wait_ms": 5}, env={"MNEMOSCOPE_API_KEYS": API_KEY})
    eng = Auditor(lm, load_profile(out), max_context_tokens=300)
    auth = {"Authorization": f"Bearer {API_KEY}"}
    with TestClient(create_app(settings, engine=eng, store=open_store(tmp_path / "l.db"))) as c:
        r = c.post(
            "/v1/audit", json={"context": "Zor1 lies on Ka1.", "query": "Where is Zor1?"}, headers=auth
        )
        assert r.status_code == 200, r.text
        assert r.json()["crm"] is None
        s = c.get("/v1/stats", headers=auth).json()
        assert s["profile"]["layers"] == [] and s["profile"]["classifier"] is None


def test_crm_stays_available_and_older_profiles_load(tmp_path: Path) -> None:
    """``with_crm`` (or a CRM signal) traces the hidden states and saves crm.npz, hashed with the
    header as before; the previous shipped profile (made with crm.npz, kept in
    tests/data/previous_default_profile) loads unchanged; the shipped one carries no CRM."""
    from mnemoscope.audit.profile import DEFAULT_PROFILES

    assert CalibrationConfig(verdict_candidates=("repcs_z", "crm_probability")).with_crm
    assert CalibrationConfig(classifier="xgb").with_crm and not CalibrationConfig().with_crm
    from mnemoscope.pipelines.crm.fitter import CRMFitter

    lm = tiny_lm(layers=2)
    out = tmp_path / "p"
    prof = calibrate_profile(
        lm,
        tiny_records(36),
        out,
        CalibrationConfig(max_new_tokens=4, chat=False, with_crm=True),
        progress=False,
        fitter=CRMFitter(),
    )
    assert prof.crm is not None and (out / "crm.npz").is_file() and prof.pair_config().hidden
    header = json.loads((out / "profile.json").read_text())
    assert header["profile_hash"] == profile_hash(header, (out / "crm.npz").read_bytes())
    assert all(t.h_with is not None for t in load_traces(out / "traces" / "pairs"))
    # resumed without CRM: the folder's hidden states are kept (nothing re-traced), crm.npz goes
    again = calibrate_profile(
        lm, tiny_records(36), out, CalibrationConfig(max_new_tokens=4, chat=False), progress=False
    )
    assert again.crm is None and not (out / "crm.npz").exists()
    assert again.header["data"]["n_traces_reused"] == 36
    # CRM asked on a folder traced without hidden states: refused, naming the way out
    calibrate_profile(
        lm, tiny_records(36), tmp_path / "q", CalibrationConfig(max_new_tokens=4, chat=False), progress=False
    )
    with pytest.raises(InputError, match=r"without hidden states.*--overwrite"):
        calibrate_profile(
            lm,
            tiny_records(36),
            tmp_path / "q",
            CalibrationConfig(max_new_tokens=4, chat=False, with_crm=True),
            progress=False,
            fitter=CRMFitter(),
        )
    from importlib import resources

    previous = Path(__file__).parent / "data" / "previous_default_profile"
    old = load_profile(previous)
    assert old.crm is not None and (previous / "crm.npz").is_file() and old.pair_config().hidden
    assert old.content_hash.startswith("7efd33085a2a")  # shipped up to 8b0a9c3
    # CRM is opt-in: the shipped default profile has none and traces no hidden states
    shipped = Path(str(resources.files(DEFAULT_PROFILES))) / "smollm2-135m-instruct"
    cur = load_profile(shipped)
    assert cur.crm is None and not (shipped / "crm.npz").exists() and not cur.pair_config().hidden


def test_the_per_class_draw_reads_answers_not_whole_traces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mnemoscope.trace.store as store

    reads: list[str] = []
    real = store.load_traces

    def counting(folder: Any) -> Any:
        reads.append(str(folder))
        return real(folder)

    monkeypatch.setattr(store, "load_traces", counting)
    recs = zor_records(80)
    cfg = CalibrationConfig(
        max_new_tokens=3, chat=False, labels="given", per_class=12, held_out_fraction=0.25
    )
    prof = calibrate_profile(tiny_lm(layers=2), recs, tmp_path / "p", cfg, progress=False)
    assert len(prof.header["draw"]["rounds"]) >= 1
    assert reads == [str(tmp_path / "p" / "traces" / "pairs")]  # once, to fit: never per round


# -- the command line ---------------------------------------------------------------------------------


def test_with_crm_is_refused_over_an_endpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mnemoscope.cli.main import main

    rc = main(
        [
            *("--quiet", "calibrate", "--endpoint", "http://127.0.0.1:9/v1", "--with-crm"),
            *("--max-records", "8", "--out", str(tmp_path / "p")),
        ]
    )
    err = capsys.readouterr().err
    assert rc != 0 and "--with-crm" in err and "hidden states" in err and "endpoint" in err


def test_crm_options_ask_for_crm(tiny_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import mnemoscope.audit.calibrate as cal
    from mnemoscope.cli.main import main

    seen: list[CalibrationConfig] = []

    class Stop(Exception):
        pass

    def fake(tracer: Any, records: Any, out: Any, config: CalibrationConfig, **kw: Any) -> Any:
        seen.append(config)
        assert (kw["fitter"] is not None) is config.with_crm  # CRM's fitter only when CRM is asked
        raise Stop

    monkeypatch.setattr(cal, "calibrate", fake)
    base = [
        "--quiet",
        "calibrate",
        "--model",
        str(tiny_folder),
        "--out",
        str(tmp_path / "p"),
        "--max-records",
        "8",
    ]
    for extra, crm in (
        ([], False),
        (["--with-crm"], True),
        (["--k-sigma", "3"], True),
        (["--rule", "paper"], True),
        (["--classifier", "none"], True),
        (["--verdict-signals", "repcs_z,crm_probability"], True),
    ):
        with pytest.raises(Stop):
            main(base + extra)
        assert seen[-1].with_crm is crm, extra
    assert seen[0].batch_size == CalibrationConfig().batch_size == 16
    assert (seen[0].k_sigma, seen[0].rule, seen[0].classifier) == (2.0, "calibrated", "auto")
    assert seen[2].k_sigma == 3.0 and seen[3].rule == "paper"
