"""Drift: do the live answers still look like the answers the profile was calibrated on?

The split-conformal guarantee behind every memory flag assumes the audited answers are
exchangeable with the calibration answers. This module tests that assumption on a stream of
audits, against a *reference sample*: the profile's held-out calibration answers, audited with
the finished profile (their p_memory, memory flag and verdict signals; ``held_out.jsonl``).

**One window, several tests** (:func:`drift_check`). A window of live answers is compared with
the reference by

* a two-sample Kolmogorov-Smirnov test of p_memory, and one per verdict signal
  (:func:`ks_test`; values that are not finite are left out of that test; with ties, as the
  discrete signals have, KS is conservative: its p-values are too large, never too small);
* a test of the share flagged (:func:`flag_rate_test`): the window's flag count against the
  reference's, Fisher's exact test, i.e. the binomial test of the window's count conditioned on
  the flags of window and reference together. It assumes each answer is flagged independently
  with one rate, the rate of the calibration's mix of answers (its share of memory and
  context-needed answers); a plain binomial test against the reference's rate taken as known
  (:func:`binomial_flag_test`) ignores that the rate is itself estimated from the reference's
  few hundred answers and fires more often than alpha (``benchmarks/bench_drift.py``
  measures both).

The ``m`` tests are combined by Bonferroni: the window drifts when its smallest p-value is at
most ``alpha / m`` (``p_bonferroni = min(1, m * p_min) <= alpha``), so one window raises a
false alarm with probability at most ``alpha`` whatever the dependence between the tests.

**A stream** (:class:`DriftMonitor`). Testing a sliding window after every answer gives
strongly dependent tests whose false alarms pile up. The monitor tests *non-overlapping*
windows instead: every ``window`` answers it runs :func:`drift_check` once on those answers
and starts a new window. Each window's false-alarm probability is at most ``alpha``; the
expected number of false alarms over ``N`` unshifted answers is at most ``alpha * N / window``
(the windows share the reference, so the alarms are not independent, but expectations add).
To bound the chance of *any* false alarm over a horizon of ``H`` answers by ``a``, set
``alpha = a * window / H``. A real shift is reported at the end of the first window that holds
enough shifted answers: with ``window = 100``, within 200 answers of its start when one window
of shifted answers has the power to show it.

Until a window is complete there is no p-value: the state is "not enough answers yet".
Pure numpy/scipy: nothing here reads a file or a profile (the server reads the reference,
:func:`mnemoscope.server.profile_view.drift_reference`).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_WINDOW",
    "MIN_PER_TEST",
    "NOT_ENOUGH",
    "DriftCheck",
    "DriftMonitor",
    "DriftReference",
    "FlagRateTest",
    "SignalTest",
    "binomial_flag_test",
    "drift_check",
    "flag_rate_test",
    "ks_test",
]

#: answers per tested window (non-overlapping)
DEFAULT_WINDOW = 100
#: false-alarm probability of one window (all its tests together, Bonferroni)
DEFAULT_ALPHA = 0.01
#: fewest finite values (in the window and in the reference) a single test runs on
MIN_PER_TEST = 20
NOT_ENOUGH = "not enough answers yet"


def _finite(x: Sequence[float | None] | np.ndarray) -> np.ndarray:
    a = np.asarray([np.nan if v is None else v for v in x], dtype=float)
    return a[np.isfinite(a)]


@dataclass(frozen=True)
class DriftReference:
    """The calibration's answers the live ones are compared with.

    ``p_memory`` and ``flags`` (the memory flag, 0/1) have one entry per reference answer;
    ``signals`` maps each verdict signal to its values (``nan`` where not measured). ``source``
    says where the sample comes from (a file, for the surfaces).
    """

    p_memory: np.ndarray
    flags: np.ndarray
    signals: Mapping[str, np.ndarray]
    source: str = ""

    def __post_init__(self) -> None:
        n = len(self.p_memory)
        if len(self.flags) != n or any(len(v) != n for v in self.signals.values()):
            raise ValueError("reference: p_memory, flags and every signal need one value per answer")

    @property
    def n(self) -> int:
        return len(self.p_memory)

    @property
    def flag_rate(self) -> float:
        return float(np.mean(self.flags)) if self.n else math.nan

    @classmethod
    def from_records(
        cls, records: Sequence[Mapping[str, Any]], signals: Sequence[str], *, source: str = ""
    ) -> DriftReference:
        """From audit records (or ``held_out.jsonl`` rows): those with a finite ``p_memory`` and
        a boolean ``memory_flag`` (others carry no verdict to compare), each signal read from
        ``evidence.signals``."""
        kept = [r for r in records if _usable(r)]
        return cls(
            p_memory=np.array([float(r["p_memory"]) for r in kept]),
            flags=np.array([int(bool(r["memory_flag"])) for r in kept]),
            signals={s: np.array([_signal(r, s) for r in kept]) for s in signals},
            source=source,
        )


def _usable(r: Mapping[str, Any]) -> bool:
    p = r.get("p_memory")
    return (
        isinstance(p, int | float)
        and not isinstance(p, bool)
        and math.isfinite(p)
        and isinstance(r.get("memory_flag"), bool)
        and not r.get("identical_prompts")
    )


def _signal(r: Mapping[str, Any], name: str) -> float:
    v = ((r.get("evidence") or {}).get("signals") or {}).get(name)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else math.nan


@dataclass(frozen=True)
class SignalTest:
    """A two-sample test of one value's distribution, window vs reference.

    ``p_value``/``statistic`` are ``None`` when either side has fewer than ``min_n`` finite
    values (``reason`` says so)."""

    name: str
    n_window: int
    n_reference: int
    statistic: float | None
    p_value: float | None
    method: str
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class FlagRateTest:
    """The window's share flagged against the reference's (see the module doc)."""

    k_window: int
    n_window: int
    k_reference: int
    n_reference: int
    expected_rate: float
    observed_rate: float
    statistic: float | None
    p_value: float | None
    method: str
    reason: str | None = None
    name: str = "flag_rate"

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def ks_test(
    name: str,
    reference: Sequence[float] | np.ndarray,
    window: Sequence[float] | np.ndarray,
    *,
    min_n: int = MIN_PER_TEST,
) -> SignalTest:
    """Two-sample Kolmogorov-Smirnov test of ``window`` against ``reference`` (finite values only;
    scipy's exact p-value for small samples, asymptotic otherwise; conservative under ties)."""
    from scipy.stats import ks_2samp

    ref, win = _finite(reference), _finite(window)
    method = "two-sample Kolmogorov-Smirnov (scipy.stats.ks_2samp, two-sided)"
    if len(win) < min_n or len(ref) < min_n:
        return SignalTest(
            name,
            len(win),
            len(ref),
            None,
            None,
            method,
            reason=f"{NOT_ENOUGH}: {len(win)} window and {len(ref)} reference values, {min_n} needed",
        )
    res = ks_2samp(win, ref, alternative="two-sided", method="auto")
    return SignalTest(name, len(win), len(ref), float(res.statistic), float(res.pvalue), method)


def flag_rate_test(k: int, n: int, k_ref: int, n_ref: int, *, min_n: int = MIN_PER_TEST) -> FlagRateTest:
    """``k`` of ``n`` window answers flagged against ``k_ref`` of ``n_ref`` reference answers:
    Fisher's exact test (two-sided), the binomial test of ``k`` conditioned on ``k + k_ref``.
    ``statistic`` is the window's rate minus the reference's."""
    from scipy.stats import fisher_exact

    expected = k_ref / n_ref if n_ref else math.nan
    observed = k / n if n else math.nan
    method = "Fisher's exact test of the flag counts, window vs reference (two-sided)"
    if n < min_n or n_ref < min_n:
        return FlagRateTest(
            k, n, k_ref, n_ref, expected, observed, None, None, method,
            reason=f"{NOT_ENOUGH}: {n} window and {n_ref} reference answers, {min_n} needed",
        )  # fmt: skip
    res = fisher_exact([[k, n - k], [k_ref, n_ref - k_ref]], alternative="two-sided")
    return FlagRateTest(
        k, n, k_ref, n_ref, expected, observed, observed - expected, float(res.pvalue), method
    )


def binomial_flag_test(k: int, n: int, rate: float) -> float:
    """p-value of the exact two-sided binomial test of ``k`` flags in ``n`` answers at a known
    ``rate``. Not used by the monitor: the reference's rate is an estimate, and treating it as
    known inflates the false-alarm rate (kept to measure by how much)."""
    from scipy.stats import binomtest

    return float(binomtest(k, n, min(max(rate, 0.0), 1.0)).pvalue)


@dataclass(frozen=True)
class DriftCheck:
    """One window's verdict: every test, the Bonferroni combination and whether it drifted.

    ``n_tests`` counts every planned test, those that could not run included (Bonferroni over
    the planned tests stays valid); ``p_min``/``p_bonferroni`` are ``None`` when no test ran."""

    index: int
    first: int
    last: int
    n: int
    tests: tuple[SignalTest | FlagRateTest, ...]
    alpha: float
    n_tests: int
    p_min: float | None
    p_bonferroni: float | None
    drifted: bool
    parted: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "answers": [self.first, self.last],
            "n": self.n,
            "alpha": self.alpha,
            "n_tests": self.n_tests,
            "p_min": self.p_min,
            "p_bonferroni": self.p_bonferroni,
            "drifted": self.drifted,
            "parted": list(self.parted),
            "tests": [t.to_dict() for t in self.tests],
        }


def drift_check(
    reference: DriftReference,
    p_memory: Sequence[float] | np.ndarray,
    flags: Sequence[int | bool] | np.ndarray,
    signals: Mapping[str, Sequence[float] | np.ndarray],
    *,
    alpha: float = DEFAULT_ALPHA,
    min_n: int = MIN_PER_TEST,
    index: int = 0,
    first: int = 1,
) -> DriftCheck:
    """Test one window of answers against ``reference`` (module doc): KS on p_memory and on each
    of the reference's signals, Fisher on the flag count, Bonferroni over all of them.

    Examples:
        >>> rng = np.random.default_rng(0)
        >>> ref = DriftReference(rng.uniform(size=300), rng.integers(0, 2, 300), {})
        >>> same = drift_check(ref, rng.uniform(size=100), rng.integers(0, 2, 100), {})
        >>> moved = drift_check(ref, rng.uniform(size=100) ** 3, rng.integers(0, 2, 100), {})
        >>> same.drifted, moved.drifted, moved.n_tests
        (False, True, 2)
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    fl = np.asarray(flags, dtype=int)
    tests: list[SignalTest | FlagRateTest] = [ks_test("p_memory", reference.p_memory, p_memory, min_n=min_n)]
    for name, ref_values in reference.signals.items():
        tests.append(ks_test(name, ref_values, signals.get(name, []), min_n=min_n))
    tests.append(flag_rate_test(int(fl.sum()), len(fl), int(reference.flags.sum()), reference.n, min_n=min_n))
    ps = [t.p_value for t in tests if t.p_value is not None]
    m = len(tests)
    p_min = min(ps) if ps else None
    drifted = p_min is not None and p_min <= alpha / m
    parted = tuple(t.name for t in tests if t.p_value is not None and t.p_value <= alpha / m)
    n = len(p_memory)
    return DriftCheck(
        index=index,
        first=first,
        last=first + n - 1,
        n=n,
        tests=tuple(tests),
        alpha=alpha,
        n_tests=m,
        p_min=p_min,
        p_bonferroni=None if p_min is None else min(1.0, m * p_min),
        drifted=drifted,
        parted=parted,
    )


@dataclass
class DriftMonitor:
    """Non-overlapping windows of live answers, each tested against ``reference`` when full.

    Thread-safe (:meth:`observe` is called from audit worker threads). ``last`` keeps the
    last tested window; ``n_windows``/``n_alarms`` count every tested window and every alarm.
    """

    reference: DriftReference
    window: int = DEFAULT_WINDOW
    alpha: float = DEFAULT_ALPHA
    min_n: int = MIN_PER_TEST
    n_seen: int = 0
    n_windows: int = 0
    n_alarms: int = 0
    last: DriftCheck | None = None
    _p: list[float] = field(default_factory=list, repr=False)
    _f: list[int] = field(default_factory=list, repr=False)
    _s: dict[str, list[float]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"window must be at least 1 answer, got {self.window}")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        self._s = {k: [] for k in self.reference.signals}

    def observe(self, p_memory: float, memory_flag: bool, signals: Mapping[str, Any]) -> DriftCheck | None:
        """Add one answer; return the window's check when this answer completes a window."""
        with self._lock:
            self.n_seen += 1
            self._p.append(float(p_memory))
            self._f.append(int(bool(memory_flag)))
            for k, vals in self._s.items():
                v = signals.get(k)
                vals.append(float(v) if isinstance(v, int | float) and not isinstance(v, bool) else math.nan)
            if len(self._p) < self.window:
                return None
            check = drift_check(
                self.reference,
                self._p,
                self._f,
                self._s,
                alpha=self.alpha,
                min_n=self.min_n,
                index=self.n_windows + 1,
                first=self.n_seen - len(self._p) + 1,
            )
            self._p, self._f = [], []
            self._s = {k: [] for k in self._s}
            self.n_windows += 1
            self.n_alarms += int(check.drifted)
            self.last = check
            return check

    def observe_record(self, record: Mapping[str, Any]) -> DriftCheck | None:
        """Add one audit record (skipped, returning ``None``, when it carries no p_memory and
        memory flag, or audits an empty context)."""
        if not _usable(record):
            return None
        sig = (record.get("evidence") or {}).get("signals") or {}
        return self.observe(float(record["p_memory"]), bool(record["memory_flag"]), sig)

    def status(self) -> dict[str, Any]:
        """JSON-ready state: the scheme, the reference, the window being filled, the last check."""
        with self._lock:
            last = self.last
            state = NOT_ENOUGH if last is None else ("drift" if last.drifted else "no drift")
            return {
                "watched": True,
                "state": state,
                "window": self.window,
                "alpha": self.alpha,
                "scheme": (
                    f"non-overlapping windows of {self.window} answers, each tested once when full: KS on "
                    "p_memory and on each verdict signal, Fisher's exact test on the flag count, Bonferroni "
                    f"over the {2 + len(self.reference.signals)} tests; a window raises a false alarm with "
                    f"probability at most {self.alpha:g}"
                ),
                "reference": {
                    "n": self.reference.n,
                    "flag_rate": self.reference.flag_rate,
                    "signals": list(self.reference.signals),
                    "source": self.reference.source,
                },
                "current": {"n": len(self._p), "of": self.window},
                "n_answers": self.n_seen,
                "n_windows": self.n_windows,
                "n_alarms": self.n_alarms,
                "last": None if last is None else last.to_dict(),
            }
