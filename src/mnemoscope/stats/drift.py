"""Drift: do the live answers still look like the answers the profile was calibrated on?

The split-conformal guarantee behind every memory flag assumes the audited answers are
exchangeable with the calibration answers. This module tests that assumption on a stream of
audits, against a *reference sample*: the profile's held-out calibration answers, audited with
the finished profile (their p_memory, memory flag and verdict signals; ``held_out.jsonl``).

**The test of a window** (:func:`permutation_check`, the monitor's default). A window of live
answers and the reference are compared on every *coordinate*: p_memory, each signal the
verdict combines, and the memory flag. Per coordinate a statistic measures how far apart the
two samples are: the two-sample Anderson-Darling distance (:func:`ad_statistic`; ties and
non-finite values, kept as one value above all others, are handled on the pooled sample) turned
into its asymptotic tail probability, and, for the flag, Fisher's exact p-value of the two flag
counts. The window's statistic is the most extreme coordinate (the smallest of those tail
probabilities). Its p-value is a **permutation p-value**: the window's and the reference's
answers are pooled and relabelled at random (a window of the same size drawn from the pool),
and the p-value is the share of relabellings at least as extreme. Under the null (live answers
exchangeable with the reference) this p-value is exactly valid, ``P(p <= u) <= u``, whatever
the distributions, the ties, the dependence between the coordinates or the asymptotic
approximations used inside the statistic, and it accounts for the reference being a finite
sample (200-260 answers, 104 for the shipped profile): a test against the reference taken as
the true distribution does not. The relabellings are drawn sequentially and stop after 10 at
least as extreme (Besag and Clifford's sequential p-value, exactly valid too) or 9,999 in all.
The monitor draws them from a generator seeded with fresh entropy, recorded in its status: the
p-values are valid over the draws, and a run can be replayed with the recorded seed. The per-coordinate tail probabilities are reported
for each window but are not corrected for the several coordinates: the decision is the
permutation p-value.

**The scheme** (:class:`DriftMonitor`). A test runs every ``step`` answers (50) on the last
``window`` answers (200; the first tests at 100 and 150 answers on all answers so far) and fires
when its p-value is at most ``alpha`` (0.005). Each test raises a false alarm with probability
at most ``alpha``, so the expected number of false alarms over ``N`` unshifted answers is at most
``alpha * N / step`` (0.2 per 2,000 answers; the tests overlap and share the reference, so
their alarms are not independent, but expectations add). To bound the chance of *any* false
alarm over a horizon of ``H`` answers by ``a``, set ``alpha = a * step / H`` (0.00125 for
a = 0.05 over 2,000 answers). A shift is tested 50 answers after it starts, and within 200
answers of its start four tests have seen it, the last on 200 shifted answers.

**The previous test** (:func:`drift_check`, ``method="ks-bonferroni"``: non-overlapping
windows of 100 answers, each tested once at alpha 0.01): Kolmogorov-Smirnov per coordinate
(:func:`ks_test`), Fisher's exact test of the flag counts (:func:`flag_rate_test`), Bonferroni
over them. Also valid, conservative under ties, less powerful; ``benchmarks/bench_drift.py``
measures both side by side. A plain binomial test against the reference's flag rate taken as
known (:func:`binomial_flag_test`) ignores that the rate is estimated and fires more often than
alpha (kept to measure by how much).

**Measured** (``benchmarks/bench_drift.py``, real held-out audits of seven profiles, every
stream scored by the reference's profile; docs/server.md#drift has the figures): both tests stay
within their alpha on unshifted answers; within 200 answers of a shift the new one catches a
change in the mix of questions, knowledge-conflict traffic and the one model swap that clearly
breaks the guarantee (Gemma's answers behind Qwen's profile: 19 % false flags) in 77-100 % of the
streams, and model or prompt swaps that barely move the signals rarely (43 % on average over 36
pairs, 32 % for the previous test); none of those missed is shown to break the guarantee.

Until the first test there is no p-value: the state is "not enough answers yet".
Pure numpy/scipy: nothing here reads a file or a profile (the server reads the reference,
:func:`mnemoscope.server.profile_view.drift_reference`).
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_FIRST_TEST",
    "DEFAULT_STEP",
    "DEFAULT_WINDOW",
    "MAX_PERMUTATIONS",
    "METHODS",
    "MIN_PER_TEST",
    "NOT_ENOUGH",
    "STOP_AFTER",
    "DriftCheck",
    "DriftMonitor",
    "DriftReference",
    "FlagRateTest",
    "SignalTest",
    "ad_statistic",
    "binomial_flag_test",
    "drift_check",
    "flag_rate_test",
    "ks_test",
    "permutation_check",
]

#: the most recent answers one test compares with the reference
DEFAULT_WINDOW = 200
#: answers between two tests
DEFAULT_STEP = 50
#: answers before the first test ("not enough answers yet" until then)
DEFAULT_FIRST_TEST = 100
#: false-alarm probability of one test (tests every DEFAULT_STEP answers: at most 0.01 false
#: alarms expected per 100 unshifted answers, as the previous scheme's one window of 100 at 0.01)
DEFAULT_ALPHA = 0.005
#: relabellings of the permutation test at most (its smallest p-value: 1 / (MAX_PERMUTATIONS + 1))
MAX_PERMUTATIONS = 9999
#: relabellings at least as extreme as the window after which the sequential p-value stops
STOP_AFTER = 10
#: the window tests (module doc)
METHODS = ("permutation", "ks-bonferroni")
#: fewest finite values (in the window and in the reference) a single test of the previous
#: method runs on; also the fewest reference answers the service compares with
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
    """One test of a window: its per-coordinate tests, its p-value and whether it drifted.

    ``method``: ``permutation`` (:func:`permutation_check`: ``p_value`` is the permutation
    p-value, ``statistic`` the window's statistic, ``n_permutations`` the relabellings drawn) or
    ``ks-bonferroni`` (:func:`drift_check`: ``p_value`` = ``p_bonferroni`` = ``min(1, m * p_min)``
    over the ``n_tests`` planned tests, those that could not run included). ``p_min`` is the
    smallest per-coordinate p-value; ``parted`` names the coordinates that made the window drift.
    ``p_value`` is ``None`` when no test could run."""

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
    method: str = "ks-bonferroni"
    p_value: float | None = None
    statistic: float | None = None
    n_permutations: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "answers": [self.first, self.last],
            "n": self.n,
            "method": self.method,
            "alpha": self.alpha,
            "p_value": self.p_value,
            "drifted": self.drifted,
            "parted": list(self.parted),
            "n_tests": self.n_tests,
            "p_min": self.p_min,
            **(
                {"statistic": self.statistic, "n_permutations": self.n_permutations}
                if self.method == "permutation"
                else {"p_bonferroni": self.p_bonferroni}
            ),
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
    """Test one window of answers against ``reference`` with the previous method (module doc): KS
    on p_memory and on each of the reference's signals, Fisher on the flag count, Bonferroni over
    all of them.

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
        method="ks-bonferroni",
        p_value=None if p_min is None else min(1.0, m * p_min),
    )


# -- the permutation test ---------------------------------------------------------------------------


def _ad_logsf(z: np.ndarray) -> np.ndarray:
    """``-log P(A > z)`` for the limiting Anderson-Darling distribution ``A`` (Marsaglia and
    Marsaglia 2004, ``adinf``; increasing in ``z``). Accurate to a few 1e-6 in the CDF; far in the
    tail (z above ~10) only the ordering is meaningful, which is all the permutation test uses."""
    z = np.asarray(z, dtype=float)
    out = np.zeros_like(z)
    lo = (z > 0) & (z < 2)
    zl = z[lo]
    cdf = (
        np.exp(-1.2337141 / zl)
        / np.sqrt(zl)
        * (
            2.00012
            + (0.247105 - (0.0649821 - (0.0347962 - (0.011672 - 0.00168691 * zl) * zl) * zl) * zl) * zl
        )
    )
    out[lo] = -np.log1p(-np.minimum(cdf, 1.0 - 1e-16))
    hi = z >= 2
    zh = np.minimum(z[hi], 1e3)
    poly = 1.0776 - (2.30695 - (0.43424 - (0.082433 - (0.008056 - 0.0003146 * zh) * zh) * zh) * zh) * zh
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        tail = -np.log(-np.expm1(-np.exp(poly)))
    out[hi] = np.where(poly < -30, -poly, tail)
    return out


def _pooled(window: Sequence[float] | np.ndarray, reference: Sequence[float] | np.ndarray) -> np.ndarray:
    """Window then reference, non-finite values as one value above every finite one."""
    x = np.r_[np.asarray(window, dtype=float), np.asarray(reference, dtype=float)]
    return np.where(np.isfinite(x), x, np.inf)


@dataclass(frozen=True)
class _ADCoordinate:
    """The pooled sample of one coordinate, sorted once: what the A² of any labelling needs."""

    order: np.ndarray  # pooled indices in increasing value
    ends: np.ndarray  # position (in sorted order) of the last value of each distinct value but the top
    t: np.ndarray  # pooled values up to each of those ends
    weight: np.ndarray  # dH / (H (1 - H)) at each end (H: pooled share up to the end)

    @classmethod
    def of(cls, pooled: np.ndarray) -> _ADCoordinate:
        order = np.argsort(pooled, kind="stable")
        xs = pooled[order]
        ends = np.flatnonzero(xs[1:] != xs[:-1])  # every distinct value but the largest
        t = ends + 1
        big_n = len(pooled)
        h = t / big_n
        dh = np.diff(np.r_[0, t]) / big_n
        return cls(order, ends, t, dh / (h * (1 - h)))

    def statistic(self, member: np.ndarray, n: int) -> np.ndarray:
        """A² of each labelling: ``member`` is ``[N, b]``, column j True for the ``n`` answers
        relabelled as the window by labelling j."""
        big_n, b = member.shape
        m = big_n - n
        if not len(self.ends):
            return np.zeros(b)
        x = member[self.order[: self.ends[-1] + 1]].astype(np.int16)
        for j in range(1, len(x)):  # window counts up to each sorted position, all labellings at once
            x[j] += x[j - 1]
        # (nm/N) sum_k w_k (c_k/n - (t_k - c_k)/m)^2 = sum_k w_k (N c_k - n t_k)^2 / (n m N)
        d = big_n * x[self.ends].astype(np.float64) - (n * self.t)[:, None]
        return np.asarray(self.weight @ (d * d) / (n * m * big_n))


def _relabellings(gen: np.random.Generator, n: int, big_n: int, b: int) -> np.ndarray:
    """``[N, b]``: ``b`` uniformly random windows of ``n`` of the ``N`` pooled answers (each the
    ``n`` smallest of ``N`` uniform keys; a draw with a tie at the cut is drawn again)."""
    keys = gen.random((b, big_n), dtype=np.float32)
    member = keys <= np.partition(keys, n - 1, axis=1)[:, n - 1 : n]
    bad = np.flatnonzero(member.sum(axis=1) != n)
    while len(bad):
        k = gen.random((len(bad), big_n), dtype=np.float32)
        member[bad] = k <= np.partition(k, n - 1, axis=1)[:, n - 1 : n]
        bad = bad[member[bad].sum(axis=1) != n]
    return np.ascontiguousarray(member.T)


def ad_statistic(reference: Sequence[float] | np.ndarray, window: Sequence[float] | np.ndarray) -> float:
    """The two-sample Anderson-Darling statistic (Pettitt's A², on the pooled ECDF; with ties,
    summed over the distinct values; non-finite values as one value above all others).

    Example:
        >>> a = np.arange(10.0)
        >>> ad_statistic(a, a), round(ad_statistic(a, a + 100), 2) > 5
        (0.0, True)
    """
    pooled = _pooled(window, reference)
    n = len(np.asarray(window))
    member = np.zeros((len(pooled), 1), dtype=bool)
    member[:n] = True
    return float(_ADCoordinate.of(pooled).statistic(member, n)[0])


def _fisher_table(k_total: int, n: int, big_n: int) -> np.ndarray:
    """``-log`` of Fisher's exact two-sided p-value for every window flag count 0..n (the pooled
    count ``k_total`` fixed): the counts no more likely than it, summed."""
    from scipy.stats import hypergeom

    k = np.arange(n + 1)
    pmf = hypergeom(big_n, k_total, n).pmf(k)
    p = (pmf[None, :] * (pmf[None, :] <= pmf[:, None] * (1 + 1e-7))).sum(axis=1)
    with np.errstate(divide="ignore"):
        return np.asarray(-np.log(np.clip(p, 1e-300, 1.0)))


def permutation_check(
    reference: DriftReference,
    p_memory: Sequence[float] | np.ndarray,
    flags: Sequence[int | bool] | np.ndarray,
    signals: Mapping[str, Sequence[float] | np.ndarray],
    *,
    alpha: float = DEFAULT_ALPHA,
    rng: np.random.Generator | int | None = None,
    max_permutations: int = MAX_PERMUTATIONS,
    stop_after: int = STOP_AFTER,
    min_n: int = MIN_PER_TEST,
    index: int = 0,
    first: int = 1,
) -> DriftCheck:
    """Test one window of answers against ``reference`` with the permutation test (module doc).

    The window's statistic is the largest over the coordinates (p_memory, each of the
    reference's signals, the flag) of ``-log`` of that coordinate's tail probability; its
    p-value is Besag and Clifford's sequential Monte Carlo permutation p-value: relabellings
    (a window of the same size drawn from the pooled answers, uniformly, with ``rng``: a
    generator, a seed, or ``None`` for fresh entropy) are drawn
    until ``stop_after`` are at least as extreme (p = stop_after / drawn) or ``max_permutations``
    are drawn (p = (1 + at least as extreme) / (max_permutations + 1)). Exactly valid when the
    window and the reference are exchangeable. A window or a reference of fewer than ``min_n``
    answers gets no p-value ("not enough answers yet").

    The decision at a level ``alpha >= stop_after / (max_permutations + 1)`` depends only on the
    first ``ceil(stop_after / alpha) - 1`` relabellings (it fires iff fewer than ``stop_after`` of
    them are at least as extreme), so it is the same for any larger ``max_permutations``: a larger
    one only resolves smaller p-values (``benchmarks/bench_drift.py`` relies on this to decide two
    levels from one run).

    Examples:
        >>> rng = np.random.default_rng(0)
        >>> ref = DriftReference(rng.uniform(size=300), rng.integers(0, 2, 300), {})
        >>> same = permutation_check(ref, rng.uniform(size=100), rng.integers(0, 2, 100), {}, rng=1)
        >>> moved = permutation_check(ref, rng.uniform(size=100) ** 3, rng.integers(0, 2, 100), {}, rng=1)
        >>> same.drifted, moved.drifted, moved.n_tests, moved.p_value < 0.001
        (False, True, 2, True)
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if max_permutations < 1 or stop_after < 1:
        raise ValueError("max_permutations and stop_after must be at least 1")
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    pm = np.asarray(p_memory, dtype=float)
    fl = np.asarray(flags, dtype=int)
    n, m = len(pm), reference.n
    if len(fl) != n:
        raise ValueError("p_memory and flags need one value per answer")
    names = ["p_memory", *reference.signals]
    if n < min_n or m < min_n:
        why = f"{NOT_ENOUGH}: {n} window and {m} reference answers, {min_n} needed"
        return DriftCheck(
            index=index, first=first, last=first + n - 1, n=n,
            tests=tuple(SignalTest(nm, n, m, None, None, "permutation", reason=why) for nm in [*names, "flag_rate"]),
            alpha=alpha, n_tests=len(names) + 1, p_min=None, p_bonferroni=None, drifted=False,
            method="permutation",
        )  # fmt: skip
    coords = [_ADCoordinate.of(_pooled(pm, reference.p_memory))]
    for name, ref_values in reference.signals.items():
        win = np.asarray(signals.get(name, [math.nan] * n), dtype=float)
        coords.append(_ADCoordinate.of(_pooled(win if len(win) == n else np.full(n, math.nan), ref_values)))
    big_n = n + m
    pooled_flags = np.r_[fl, reference.flags].astype(bool)
    fisher = _fisher_table(int(pooled_flags.sum()), n, big_n)

    def scores(member: np.ndarray) -> np.ndarray:  # [N, b] -> [b, coordinates]
        cols = [_ad_logsf(c.statistic(member, n)) for c in coords]
        cols.append(fisher[member[pooled_flags].sum(axis=0)])
        return np.stack(cols, axis=1)

    observed_member = np.zeros((big_n, 1), dtype=bool)
    observed_member[:n] = True
    observed = scores(observed_member)[0]
    t0 = float(observed.max())
    tol = 1e-9 * max(1.0, abs(t0))
    drawn = extreme = 0
    p_value: float | None = None
    batch = 64  # doubling: most windows of unshifted answers stop within the first relabellings
    while drawn < max_permutations:
        b = min(batch, max_permutations - drawn)
        batch = min(2 * batch, 2048)
        hits = np.cumsum(scores(_relabellings(gen, n, big_n, b)).max(axis=1) >= t0 - tol)
        if extreme + hits[-1] >= stop_after:
            at = int(np.searchsorted(hits, stop_after - extreme))  # the stop_after-th extreme one
            drawn += at + 1
            extreme = stop_after
            p_value = stop_after / drawn
            break
        drawn += b
        extreme += int(hits[-1])
    if p_value is None:
        p_value = (extreme + 1) / (max_permutations + 1)
    ad_method = (
        "two-sample Anderson-Darling A² (pooled ties; non-finite as one top value); p: its asymptotic "
        "tail probability, this coordinate alone"
    )
    tests: list[SignalTest | FlagRateTest] = []
    for i, (name, c) in enumerate(zip(names, coords, strict=True)):
        ref_vals = reference.p_memory if name == "p_memory" else reference.signals[name]
        win_vals = pm if name == "p_memory" else np.asarray(signals.get(name, []), dtype=float)
        stat = float(c.statistic(observed_member, n)[0])
        tests.append(
            SignalTest(
                name,
                len(_finite(win_vals)),
                len(_finite(ref_vals)),
                stat,
                float(np.exp(-observed[i])),
                ad_method,
            )
        )
    k, k_ref = int(fl.sum()), int(reference.flags.sum())
    tests.append(
        FlagRateTest(
            k, n, k_ref, m, k_ref / m if m else math.nan, k / n if n else math.nan,
            k / n - k_ref / m if n and m else None, float(np.exp(-observed[-1])),
            "Fisher's exact test of the flag counts, window vs reference (two-sided), this coordinate alone",
        )
    )  # fmt: skip
    drifted = p_value <= alpha
    parted = (
        tuple(nm for nm, v in zip([*names, "flag_rate"], observed, strict=True) if v >= t0 - tol)
        if drifted
        else ()
    )
    return DriftCheck(
        index=index,
        first=first,
        last=first + n - 1,
        n=n,
        tests=tuple(tests),
        alpha=alpha,
        n_tests=len(tests),
        p_min=min(t.p_value for t in tests if t.p_value is not None),
        p_bonferroni=None,
        drifted=drifted,
        parted=parted,
        method="permutation",
        p_value=p_value,
        statistic=t0,
        n_permutations=drawn,
    )


@dataclass
class DriftMonitor:
    """Live answers tested against ``reference``: every ``step`` answers (from the ``first_test``-th
    on) a test of the last ``window`` answers at level ``alpha`` (module doc).

    ``method``: ``permutation`` (:func:`permutation_check`, its relabellings drawn from one
    generator seeded with ``seed``; ``None``: fresh entropy, the seed kept in ``seed`` and in
    :meth:`status`, so a run can be replayed) or ``ks-bonferroni`` (:func:`drift_check`; with
    ``window == step == first_test`` the previous scheme's non-overlapping windows). ``step`` and
    ``first_test`` default to :data:`DEFAULT_STEP` and :data:`DEFAULT_FIRST_TEST`, at most
    ``window`` (a window of 20: a test every 20 answers on the last 20).

    Thread-safe (:meth:`observe` is called from audit worker threads; a test runs under the
    lock). ``last`` keeps the last test; ``n_windows``/``n_alarms`` count every test and alarm.
    """

    reference: DriftReference
    window: int = DEFAULT_WINDOW
    alpha: float = DEFAULT_ALPHA
    step: int | None = None
    first_test: int | None = None
    method: str = "permutation"
    seed: int | None = None
    max_permutations: int = MAX_PERMUTATIONS
    min_n: int = MIN_PER_TEST
    n_seen: int = 0
    n_windows: int = 0
    n_alarms: int = 0
    last: DriftCheck | None = None
    _buf: deque[tuple[float, int, tuple[float, ...]]] = field(default_factory=deque, repr=False)
    _rng: np.random.Generator = field(default_factory=np.random.default_rng, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"window must be at least 1 answer, got {self.window}")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        self.step = min(DEFAULT_STEP, self.window) if self.step is None else self.step
        self.first_test = min(DEFAULT_FIRST_TEST, self.window) if self.first_test is None else self.first_test
        if self.step < 1 or not 1 <= self.first_test <= self.window:
            raise ValueError(
                f"step must be at least 1 and first_test between 1 and window ({self.window}), "
                f"got {self.step} and {self.first_test}"
            )
        self._buf = deque(maxlen=self.window)
        if self.seed is None:
            self.seed = int(np.random.SeedSequence().entropy) % 2**63  # type: ignore[arg-type]
        self._rng = np.random.default_rng(self.seed)

    @property
    def _signals(self) -> list[str]:
        return list(self.reference.signals)

    def observe(self, p_memory: float, memory_flag: bool, signals: Mapping[str, Any]) -> DriftCheck | None:
        """Add one answer; return the test when this answer is due for one."""
        vals = tuple(
            float(v) if isinstance(v, int | float) and not isinstance(v, bool) else math.nan
            for v in (signals.get(k) for k in self._signals)
        )
        with self._lock:
            self.n_seen += 1
            self._buf.append((float(p_memory), int(bool(memory_flag)), vals))
            assert self.first_test is not None and self.step is not None
            if self.n_seen < self.first_test or (self.n_seen - self.first_test) % self.step:
                return None
            rows = list(self._buf)
            p = np.array([r[0] for r in rows])
            f = np.array([r[1] for r in rows])
            sig = {k: np.array([r[2][j] for r in rows]) for j, k in enumerate(self._signals)}
            where = {"index": self.n_windows + 1, "first": self.n_seen - len(rows) + 1}
            if self.method == "permutation":
                check = permutation_check(
                    self.reference, p, f, sig, alpha=self.alpha, rng=self._rng,
                    max_permutations=self.max_permutations, min_n=self.min_n, **where,
                )  # fmt: skip
            else:
                check = drift_check(self.reference, p, f, sig, alpha=self.alpha, min_n=self.min_n, **where)
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

    def scheme(self) -> str:
        """The scheme in words (the surfaces show it)."""
        m = 2 + len(self.reference.signals)
        if self.method == "permutation":
            test = (
                "a permutation test of the window against the reference (the most extreme of the "
                f"{m} coordinates: Anderson-Darling on p_memory and on each verdict signal, Fisher on the "
                "flag count; exact p-value by relabelling the pooled answers)"
            )
        else:
            test = (
                f"KS on p_memory and on each verdict signal, Fisher's exact test on the flag count, "
                f"Bonferroni over the {m} tests"
            )
        return (
            f"every {self.step} answers from the {self.first_test}th on, a test of the last {self.window} "
            f"answers: {test}; each test raises a false alarm with probability at most {self.alpha:g}"
        )

    def status(self) -> dict[str, Any]:
        """JSON-ready state: the scheme, the reference, the answers until the next test, the last test."""
        with self._lock:
            last = self.last
            state = (
                NOT_ENOUGH
                if last is None or last.p_value is None
                else ("drift" if last.drifted else "no drift")
            )
            assert self.first_test is not None and self.step is not None
            since = self.n_seen if last is None else self.n_seen - last.last
            return {
                "watched": True,
                "state": state,
                "method": self.method,
                "window": self.window,
                "step": self.step,
                "first_test": self.first_test,
                "alpha": self.alpha,
                "seed": self.seed,
                "scheme": self.scheme(),
                "reference": {
                    "n": self.reference.n,
                    "flag_rate": self.reference.flag_rate,
                    "signals": list(self.reference.signals),
                    "source": self.reference.source,
                },
                "current": {"n": since, "of": self.first_test if last is None else self.step},
                "n_answers": self.n_seen,
                "n_windows": self.n_windows,
                "n_alarms": self.n_alarms,
                "last": None if last is None else last.to_dict(),
            }
