"""The drift watch: its statistics on known distributions, its windows, the profile's reference
sample, and the service's surfaces (``serve``'s ``/metrics`` and ``/v1/profile``)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

from helpers import prom_series
from mnemoscope.stats.drift import (
    NOT_ENOUGH,
    DriftMonitor,
    DriftReference,
    ad_statistic,
    binomial_flag_test,
    drift_check,
    flag_rate_test,
    ks_test,
    permutation_check,
)

ROOT = Path(__file__).resolve().parents[1]
HELD_OUT = ROOT / "benchmarks" / "results" / "calibration" / "smollm2-135m-instruct-pc300" / "held_out.jsonl"


def _ref(rng: np.random.Generator, n: int = 300, shift: float = 0.0) -> DriftReference:
    return DriftReference(
        rng.normal(shift, 1, n), (rng.random(n) < 0.4).astype(int), {"s": rng.exponential(1, n)}
    )


# -- the statistics ---------------------------------------------------------------------------------


def test_ks_matches_scipy_and_known_extremes() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.normal(0, 1, 150), rng.normal(0.3, 1, 90)
    t = ks_test("x", a, b)
    want = stats.ks_2samp(b, a)
    assert (t.statistic, t.p_value) == pytest.approx((want.statistic, want.pvalue))
    assert (t.n_window, t.n_reference) == (90, 150)
    same = ks_test("x", a, a)
    assert same.statistic == 0 and same.p_value == pytest.approx(1.0)
    apart = ks_test("x", np.arange(50.0), np.arange(50.0) + 100)
    assert apart.statistic == 1 and apart.p_value < 1e-20
    # non-finite values are left out of the test, not counted as values
    with_nan = ks_test("x", a, np.r_[b, [np.nan, np.inf, None]])  # type: ignore[list-item]
    assert with_nan.n_window == 90 and with_nan.p_value == pytest.approx(want.pvalue)


def test_flag_tests_match_scipy() -> None:
    t = flag_rate_test(55, 100, 90, 300)
    assert t.p_value == pytest.approx(stats.fisher_exact([[55, 45], [90, 210]]).pvalue)
    assert (t.expected_rate, t.observed_rate, t.statistic) == pytest.approx((0.3, 0.55, 0.25))
    assert binomial_flag_test(55, 100, 0.3) == pytest.approx(stats.binomtest(55, 100, 0.3).pvalue)


def test_too_few_values_give_no_p_value() -> None:
    t = ks_test("x", np.arange(100.0), [1.0] * 19, min_n=20)
    assert t.p_value is None and t.statistic is None and t.reason and t.reason.startswith(NOT_ENOUGH)
    f = flag_rate_test(3, 10, 30, 100, min_n=20)
    assert f.p_value is None and f.reason and f.reason.startswith(NOT_ENOUGH)


def test_one_window_false_alarm_rate_is_at_most_alpha_and_a_shift_is_seen() -> None:
    """Known distributions: window and reference from the same law fire at most alpha (Bonferroni
    over p_memory, one signal and the flag count); a shift of 0.8 sd in p_memory fires nearly always."""
    rng = np.random.default_rng(7)
    alpha, trials = 0.05, 600
    null = shifted = 0
    for _ in range(trials):
        ref = _ref(rng)
        w = _ref(rng, 100)
        null += drift_check(ref, w.p_memory, w.flags, w.signals, alpha=alpha).drifted
        s = _ref(rng, 100, shift=0.8)
        shifted += drift_check(ref, s.p_memory, s.flags, s.signals, alpha=alpha).drifted
    # the exact 95% upper bound of the observed rate must reach down to alpha (not the point estimate)
    assert stats.binomtest(null, trials).proportion_ci(0.95).low <= alpha
    assert null / trials <= 2 * alpha
    assert shifted / trials > 0.9


def test_bonferroni_counts_every_planned_test() -> None:
    rng = np.random.default_rng(3)
    ref = _ref(rng)
    # the signal is unmeasured in the window: its test cannot run but still counts in m
    c = drift_check(ref, ref.p_memory[:100] + 0.45, ref.flags[:100], {"s": [math.nan] * 100}, alpha=0.05)
    assert c.n_tests == 3
    by = {t.name: t for t in c.tests}
    assert by["s"].p_value is None and by["s"].reason
    p_pm = by["p_memory"].p_value
    assert p_pm is not None and c.p_min == min(p_pm, by["flag_rate"].p_value or 1)
    assert c.p_bonferroni == pytest.approx(min(1.0, 3 * c.p_min))
    assert c.drifted == (c.p_min <= 0.05 / 3)
    assert c.parted == tuple(t.name for t in c.tests if t.p_value is not None and t.p_value <= 0.05 / 3)


def _mixed(
    rng: np.random.Generator, n: int, shift: float = 0.0
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Answers like the real ones: p_memory with an atom near 0 and 1, a signal with ties (a
    third exact zeros), a discrete signal, the flag; ``shift`` moves the continuous signal only."""
    mem = rng.random(n) < 0.45
    p = np.where(mem, rng.beta(5, 1, n), rng.beta(1, 6, n)).round(3)
    s = np.where(rng.random(n) < 0.33, 0.0, rng.normal(shift, 1, n))
    d = rng.choice([0.0, 0.5, 1.0], n, p=[0.5, 0.1, 0.4])
    return p, (p > 0.7).astype(int), {"s": s, "d": d}


def test_permutation_test_false_alarm_rate_is_alpha_on_exchangeable_answers() -> None:
    """Window and reference drawn from one law (with ties, atoms and a discrete signal), many
    seeded draws: the share of p-values at most alpha is alpha, within the exact binomial CI
    (the test is exact, neither anti- nor very conservative), at two levels."""
    rng = np.random.default_rng(11)
    trials, hits = 400, {0.05: 0, 0.2: 0}
    for _ in range(trials):
        rp, rf, rs = _mixed(rng, 80)
        ref = DriftReference(rp, rf, rs)
        wp, wf, ws = _mixed(rng, 40)
        c = permutation_check(ref, wp, wf, ws, alpha=0.05, rng=rng, max_permutations=999)
        assert c.p_value is not None and c.n_tests == 4
        for a in hits:
            hits[a] += c.p_value <= a
    for a, k in hits.items():
        ci = stats.binomtest(k, trials).proportion_ci(0.95)
        assert ci.low <= a <= ci.high, (a, k)


def test_permutation_test_sees_a_shift_of_one_signal_and_says_which() -> None:
    rng = np.random.default_rng(12)
    rp, rf, rs = _mixed(rng, 220)
    ref = DriftReference(rp, rf, rs)
    wp, wf, ws = _mixed(rng, 200, shift=1.0)  # p_memory and the flag unchanged
    c = permutation_check(ref, wp, wf, ws, rng=rng)
    assert c.drifted and c.p_value is not None and c.p_value <= 0.005 and c.parted == ("s",)
    by = {t.name: t for t in c.tests}
    assert by["s"].p_value < 1e-4 < by["p_memory"].p_value
    same = permutation_check(ref, *_mixed(rng, 200), rng=rng)
    assert not same.drifted and same.parted == ()


def test_permutation_decision_depends_only_on_the_first_relabellings() -> None:
    """At level alpha the decision is made by the first ceil(10 / alpha) - 1 relabellings: the
    same with 1,999 as with 9,999 (only the p-value's resolution differs)."""
    for seed in range(6):
        rng = np.random.default_rng(seed)
        ref = DriftReference(*_mixed(rng, 150))
        win = _mixed(rng, 100, shift=0.15 * seed)
        short = permutation_check(ref, *win, alpha=0.005, rng=seed, max_permutations=1999)
        long = permutation_check(ref, *win, alpha=0.005, rng=seed, max_permutations=9999)
        assert short.drifted == long.drifted
        assert short.p_value is not None and long.p_value is not None
        assert (short.p_value <= 0.005) == (long.p_value <= 0.005)


def test_ad_statistic_and_the_flag_test_match_their_definitions() -> None:
    rng = np.random.default_rng(13)
    a, b = rng.normal(0, 1, 90), rng.normal(0.4, 1, 60)
    # Pettitt's two-sample A² without ties: 1/(nm) sum_i (M_i N - n i)^2 / (i (N - i))
    n, m = len(b), len(a)
    big_n = n + m
    in_b = np.isin(np.sort(np.r_[a, b]), b)
    mi = np.cumsum(in_b)[:-1]
    i = np.arange(1, big_n)
    want = float(((mi * big_n - n * i) ** 2 / (i * (big_n - i))).sum() / (n * m))
    assert ad_statistic(a, b) == pytest.approx(want)
    assert ad_statistic(a, a) == 0.0
    c = permutation_check(DriftReference(a, (a > 0).astype(int), {}), b, (b > 0).astype(int), {}, rng=0)
    fl = c.tests[-1]
    assert fl.name == "flag_rate" and fl.p_value == pytest.approx(
        stats.fisher_exact([[fl.k_window, n - fl.k_window], [fl.k_reference, m - fl.k_reference]]).pvalue
    )
    assert c.tests[0].statistic == pytest.approx(ad_statistic(a, b))


def test_a_window_with_too_few_answers_gets_no_p_value() -> None:
    rng = np.random.default_rng(14)
    ref = DriftReference(*_mixed(rng, 100))
    c = permutation_check(ref, *_mixed(rng, 19), min_n=20)
    assert c.p_value is None and not c.drifted and all(t.p_value is None for t in c.tests)
    assert all(t.reason and t.reason.startswith(NOT_ENOUGH) for t in c.tests)
    mon = DriftMonitor(ref, window=10)  # a test every 10 answers on the last 10: never a p-value
    p, f, s = _mixed(rng, 30)
    for i in range(30):
        mon.observe(p[i], bool(f[i]), {k: v[i] for k, v in s.items()})
    st = mon.status()
    assert st["n_windows"] > 0 and st["state"] == NOT_ENOUGH and st["last"]["p_value"] is None
    assert st["n_alarms"] == 0


def test_monitor_tests_non_overlapping_windows_and_says_not_enough_before() -> None:
    """The previous scheme: window == step == first_test, ks-bonferroni."""
    rng = np.random.default_rng(5)
    ref = _ref(rng)
    mon = DriftMonitor(ref, window=40, step=40, first_test=40, alpha=0.01, method="ks-bonferroni")
    w = _ref(rng, 79)
    got = [mon.observe(w.p_memory[i], bool(w.flags[i]), {"s": w.signals["s"][i]}) for i in range(39)]
    assert got == [None] * 39
    st = mon.status()
    assert st["state"] == NOT_ENOUGH and st["last"] is None and st["current"] == {"n": 39, "of": 40}
    assert "p_value" not in json.dumps(st)
    first = mon.observe(w.p_memory[39], bool(w.flags[39]), {"s": w.signals["s"][39]})
    assert first is not None and (first.index, first.first, first.last, first.n) == (1, 1, 40, 40)
    assert first.method == "ks-bonferroni" and first.p_value == first.p_bonferroni
    for i in range(40, 79):
        assert mon.observe(w.p_memory[i], bool(w.flags[i]), {"s": w.signals["s"][i]}) is None
    second = mon.observe(0.0, False, {})  # a record without the signal: nan for it
    assert second is not None and (second.index, second.first, second.last) == (2, 41, 80)
    st = mon.status()
    assert st["n_windows"] == 2 and st["current"] == {"n": 0, "of": 40} and st["last"]["answers"] == [41, 80]
    assert st["state"] in ("drift", "no drift") and st["n_alarms"] == first.drifted + second.drifted


def test_monitor_default_scheme_tests_the_last_window_every_step() -> None:
    """Every 50 answers from the 100th on, the last 200 (all answers so far before 200); "not
    enough answers yet" and no p-value before the first test."""
    rng = np.random.default_rng(8)
    ref = _ref(rng)
    mon = DriftMonitor(ref)
    assert (mon.window, mon.step, mon.first_test, mon.alpha, mon.method) == (
        200,
        50,
        100,
        0.005,
        "permutation",
    )
    w = _ref(rng, 300)
    tested = []
    for i in range(300):
        c = mon.observe(w.p_memory[i], bool(w.flags[i]), {"s": w.signals["s"][i]})
        if i == 98:
            st = mon.status()
            assert st["state"] == NOT_ENOUGH and st["current"] == {"n": 99, "of": 100}
            assert "p_value" not in json.dumps(st)
        if c is not None:
            tested.append((i + 1, c.first, c.last, c.n))
    assert tested == [
        (100, 1, 100, 100),
        (150, 1, 150, 150),
        (200, 1, 200, 200),
        (250, 51, 250, 200),
        (300, 101, 300, 200),
    ]
    st = mon.status()
    assert (
        st["n_windows"] == 5 and st["current"] == {"n": 0, "of": 50} and st["last"]["method"] == "permutation"
    )
    assert 0 < st["last"]["p_value"] <= 1 and st["last"]["n_permutations"] >= 1
    assert [t["name"] for t in st["last"]["tests"]] == ["p_memory", "s", "flag_rate"]


def test_monitor_reads_records_and_skips_those_without_a_verdict() -> None:
    rng = np.random.default_rng(2)
    mon = DriftMonitor(_ref(rng), window=2)
    ok = {"p_memory": 0.3, "memory_flag": False, "evidence": {"signals": {"s": 1.5}}}
    for skip in (
        {"p_memory": None, "memory_flag": False},
        {"p_memory": 0.2},
        {"p_memory": float("nan"), "memory_flag": True},
        {**ok, "identical_prompts": True},  # an empty context: every statistic is 0 by construction
    ):
        assert mon.observe_record(skip) is None
    assert mon.n_seen == 0
    mon.observe_record(ok)
    assert mon.n_seen == 1 and list(mon._buf) == [(0.3, 0, (1.5,))]


def test_reference_from_the_committed_held_out_rows() -> None:
    rows = [json.loads(x) for x in HELD_OUT.read_text().splitlines() if x.strip()]
    ref = DriftReference.from_records(rows, ["fact_pmi", "closed_book_agreement"], source=str(HELD_OUT))
    assert ref.n == len(rows) == 221
    assert ref.flags.sum() == sum(r["memory_flag"] for r in rows)
    assert ref.signals["fact_pmi"][0] == rows[0]["evidence"]["signals"]["fact_pmi"]
    # the rows against themselves: nothing to see
    c = drift_check(ref, ref.p_memory, ref.flags, ref.signals)
    assert not c.drifted and all(t.p_value == pytest.approx(1.0) for t in c.tests)


def test_the_shipped_default_profile_has_a_reference_sample() -> None:
    """The default model's profile carries its held-out third as ``mnemoscope calibrate`` wrote it
    (the recorded run ``benchmarks/results/calibration/<SHIPPED_CARD>/``, byte for byte), tied to
    the profile by validation.json's hash and reproducing that card's figures from its rows;
    ``serve`` and the proxy (both through ``DriftWatch.watch``) watch drift for it instead of
    saying "no reference sample"."""
    import hashlib
    import sys
    from types import SimpleNamespace

    from mnemoscope.audit.profile import load_profile
    from mnemoscope.audit.validation import read_held_out, validation_from_rows
    from mnemoscope.cli.profile_cmd import shipped_default_profile
    from mnemoscope.server.metrics import DriftWatch
    from mnemoscope.server.profile_view import drift_reference
    from mnemoscope.server.proxy import ProxySettings, _drift_metrics

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from profile_validation import CARD_DIR
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    folder = shipped_default_profile()
    prof = load_profile(folder)
    ref = drift_reference(prof)
    rows = read_held_out(folder)
    n = prof.validation["held_out"]["n"]
    assert ref.n == len(rows) == n > 100 and list(ref.signals) == list(prof.verdict.selected_)
    assert all(np.isfinite(v).all() for v in ref.signals.values())
    card = json.loads((CARD_DIR / "card.json").read_text())
    assert card["profile"]["profile_hash"] == prof.content_hash == prof.validation["profile_hash"]
    digest = hashlib.sha256((folder / "held_out.jsonl").read_bytes()).hexdigest()
    assert digest == hashlib.sha256((CARD_DIR / "held_out.jsonl").read_bytes()).hexdigest()
    fresh = validation_from_rows(rows, alpha=prof.validation["alpha"])
    assert not [k for k in fresh if fresh[k] != prof.validation.get(k)]  # the card is its rows' figures

    watch = DriftWatch()
    watch.watch(prof)
    st = watch.status()
    assert st["watched"] and st["state"] == NOT_ENOUGH and st["reference"]["n"] == n
    proxy_watch, _ = _drift_metrics(SimpleNamespace(profile=prof), {}, ProxySettings(upstream="http://x/v1"))
    assert proxy_watch.status()["watched"]
    # the package ships it
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"data/profiles/*/*.jsonl"' in pyproject


# -- the profile's reference sample and the service ----------------------------------------------


@pytest.fixture(scope="module")
def lm() -> Any:
    from helpers import tiny_lm

    return tiny_lm(layers=3)


@pytest.fixture(scope="module")
def held_out_profile(lm: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny profile calibrated with half its facts held out: held_out.jsonl + validation.json."""
    from mnemoscope.audit.calibrate import calibrate_profile
    from mnemoscope.audit.profile import CalibrationConfig
    from server_helpers import tiny_records

    out = tmp_path_factory.mktemp("drift-profile")
    calibrate_profile(
        lm,
        tiny_records(96),
        out,
        CalibrationConfig(max_new_tokens=3, chat=False, held_out_fraction=0.5),
        progress=False,
    )
    return out


def test_reference_of_a_profile_or_why_there_is_none(lm: Any, held_out_profile: Path, tmp_path: Path) -> None:
    from mnemoscope.audit.profile import load_profile
    from mnemoscope.errors import InputError
    from mnemoscope.server.profile_view import NO_REFERENCE, drift_reference

    prof = load_profile(held_out_profile, model=lm.info)
    ref = drift_reference(prof)
    rows = [json.loads(x) for x in (held_out_profile / "held_out.jsonl").read_text().splitlines()]
    assert ref.n == len(rows) >= 20 and list(ref.signals) == list(prof.verdict.selected_)

    bare = tmp_path / "bare"
    shutil.copytree(held_out_profile, bare)
    (bare / "held_out.jsonl").unlink()
    with pytest.raises(InputError, match=r"no held_out\.jsonl") as e:
        drift_reference(load_profile(bare, model=lm.info))
    assert e.value.reason.startswith(NO_REFERENCE)

    orphan = tmp_path / "orphan"  # rows without the validation.json that ties them to the profile
    shutil.copytree(held_out_profile, orphan)
    (orphan / "validation.json").unlink()
    with pytest.raises(InputError, match="not tied to this profile"):
        drift_reference(load_profile(orphan, model=lm.info))


def test_serve_surfaces_window_statistic_and_p_value(lm: Any, held_out_profile: Path, tmp_path: Path) -> None:
    """Real audits through the HTTP API: before the window is full the surfaces say "not enough
    answers yet" and export no p-value; after it they carry the window, statistics and p-values."""
    from fastapi.testclient import TestClient

    from mnemoscope.audit.auditor import Auditor
    from mnemoscope.audit.profile import load_profile
    from mnemoscope.server.app import create_app
    from mnemoscope.server.config import load_settings
    from mnemoscope.server.storage import open_store
    from server_helpers import API_KEY

    auth = {"Authorization": f"Bearer {API_KEY}"}
    settings = load_settings(None, {"max_wait_ms": 5}, env={"MNEMOSCOPE_API_KEYS": API_KEY})
    prof = load_profile(held_out_profile, model=lm.info)
    eng = Auditor(lm, prof, max_context_tokens=300, max_query_tokens=50)
    app = create_app(settings, engine=eng, store=open_store(tmp_path / "drift.db"))
    with TestClient(app) as c:
        watch = app.state.mnemoscope.metrics.drift
        assert watch.status()["watched"]  # the lifespan attached the profile's reference
        watch.watch(prof, window=20, alpha=0.01)  # a window of 20: 20 real audits, one test

        def audit(i: int) -> None:
            body = {
                "context": f"The town of Qel{i} lies on the river Ka{i % 5}.",
                "query": f"Where is Qel{i}?",
            }
            r = c.post("/v1/audit", json=body, headers=auth)
            assert r.status_code == 200, r.text

        for i in range(19):
            audit(i)
        text = c.get("/metrics").text
        assert prom_series(text, "mnemoscope_drift_state")['{state="not enough answers yet"}'] == 1
        assert prom_series(text, "mnemoscope_drift_window_answers")[""] == 19
        assert not prom_series(text, "mnemoscope_drift_p_value")
        card = c.get("/v1/profile", headers=auth).json()["card"]["drift"]
        assert card["state"] == NOT_ENOUGH and card["last"] is None and card["current"] == {"n": 19, "of": 20}

        audit(19)
        text = c.get("/metrics").text
        pv = prom_series(text, "mnemoscope_drift_p_value")
        assert (
            '{test="p_memory"}' in pv and '{test="flag_rate"}' in pv and all(0 <= v <= 1 for v in pv.values())
        )
        assert prom_series(text, "mnemoscope_drift_windows_total")[""] == 1
        assert 0 < prom_series(text, "mnemoscope_drift_window_p_value")[""] <= 1
        assert prom_series(text, "mnemoscope_drift_window_answers")[""] == 0
        card = c.get("/v1/profile", headers=auth).json()["card"]["drift"]
        last = card["last"]
        assert card["state"] in ("drift", "no drift") and last["answers"] == [1, 20] and last["n"] == 20
        by = {t["name"]: t for t in last["tests"]}
        assert by["p_memory"]["p_value"] == pytest.approx(pv['{test="p_memory"}'])
        assert by["p_memory"]["statistic"] == pytest.approx(
            prom_series(text, "mnemoscope_drift_statistic")['{test="p_memory"}']
        )
        assert card["reference"]["n"] == watch.monitor.reference.n


def test_serve_without_a_reference_says_drift_is_not_watched(
    lm: Any, held_out_profile: Path, tmp_path: Path
) -> None:
    from fastapi.testclient import TestClient

    from mnemoscope.audit.auditor import Auditor
    from mnemoscope.audit.profile import load_profile
    from mnemoscope.server.app import create_app
    from mnemoscope.server.config import load_settings
    from mnemoscope.server.profile_view import NO_REFERENCE
    from mnemoscope.server.storage import open_store

    bare = tmp_path / "bare"
    shutil.copytree(held_out_profile, bare)
    (bare / "held_out.jsonl").unlink()
    settings = load_settings(None, {"allow_anonymous": True, "max_wait_ms": 1}, env={})
    eng = Auditor(lm, load_profile(bare, model=lm.info))
    with TestClient(create_app(settings, engine=eng, store=open_store(tmp_path / "bare.db"))) as c:
        assert (
            c.post("/v1/audit", json={"context": "Zor5 lies on Ka0.", "query": "Where?"}).status_code == 200
        )
        text = c.get("/metrics").text
        watched = prom_series(text, "mnemoscope_drift_watched")
        assert list(watched.values()) == [0] and NO_REFERENCE in next(iter(watched))
        assert prom_series(text, "mnemoscope_drift_state")['{state="not watched"}'] == 1
        assert not prom_series(text, "mnemoscope_drift_p_value")
        drift = c.get("/v1/profile").json()["card"]["drift"]
        assert drift["watched"] is False and drift["reason"].startswith(NO_REFERENCE)
