"""Does the drift watch stay quiet on unshifted answers and fire on shifted ones? (issue 36)

The previous test (``ks-bonferroni``: non-overlapping windows of 100, KS per coordinate +
Fisher + Bonferroni, alpha 0.01 per window) and the new one (``permutation``: every 50 answers a
permutation test of the last 200, alpha 0.005 per test; :mod:`mnemoscope.stats.drift`) side by
side, on the same streams.

**Data.** Real signal values only: the committed held-out audits of six calibrations
(``benchmarks/results/calibration/<config>/held_out.jsonl``: SmolLM2-135M, Gemma-3-270M and
Qwen2.5-Coder-0.5B in process, the same Qwen over llama-server, SmolLM2 over llama-server
calibrated on an app prompt with the documents in the system message; and
``benchmarks/results/drift/data/smollm2-135m-instruct-llama-server-pc300``: SmolLM2 over
llama-server on the default template, imported with ``--import-run``; 216-263 answers each) and
the shipped default profile's (``src/mnemoscope/data/profiles/smollm2-135m-instruct``, 104
answers). Each is the reference of its own profile. SmolLM2 over llama-server on the default
template vs on the app prompt is the *prompt-style* shift: the same model and server, the app's
traffic audited by a profile calibrated on another prompt, and the reverse.

**Every stream is scored by the reference's profile**, as the service scores it: another model's
answers (or another prompt's) keep their measured signal values, and their p_memory and flag
are recomputed with the *reference's* verdict (its logistic combination of the selected signals
and its conformal threshold; an answer without an answer-bearing word is never flagged, as the
audit decides). The calibrations' verdict coefficients are not in their committed cards, but
p_memory is exactly the logistic function of the selected signals, so they are recovered from
the rows (least squares on logit(p_memory); the fit is checked to 1e-9 and every stored flag
reproduced). The earlier version of this benchmark kept the other model's own p_memory and flag,
which compares two verdicts rather than two kinds of answers.

**Sampling.** Streams and references are drawn from the rows by a smoothed bootstrap: a row at
random, its continuous signal values moved by Gaussian noise of 2 % of Silverman's bandwidth of
the reference's values (values that repeat, such as exact zeros, and signals with at most 20
distinct values, such as closed_book_agreement, are kept as they are; the same kernel for the
reference's and the stream's rows), p_memory and the flag recomputed. The noise only breaks
exact ties between draws of one row; Silverman's full bandwidth halved the distances between
the configurations (KS of repcs_z between Qwen's and Gemma's rows 0.25, between the smoothed
laws 0.12), at 2 % they stay within 0.01 of the rows' (``shift`` records each scenario's KS
distances on the rows). Each stream has its own
reference sample, drawn the same way (``n`` of the reference's rows), so under the null the
reference and the stream are independent samples of one law, as a profile's held-out answers
and its live answers are. (Resampling a stream from the reference's own rows and comparing it
with those rows, as the earlier version did, makes the stream closer to the reference than new
answers would be and understates the false alarms.)

Measurements, per reference:

* ``window_null``: one window where the null holds exactly, without any resampling: the real
  rows shuffled, 100 as the window, the rest as the reference; both tests (and, for the flag
  count alone, Fisher's exact test vs the binomial test with the reference's rate taken as known).
* ``stream_null``: 2,000-answer unshifted streams: alarms per test and the share of streams
  with any alarm, at the default level and at the horizon-controlled one (any false alarm in
  2,000 answers with probability at most 0.05: 0.05 x step / 2,000).
* ``shift``: 550 unshifted answers, then shifted ones (another model's or prompt's answers, or
  the reference's own in another mix: memory share 0.7 or 0.1, knowledge-conflict items only); the delay is the number of shifted answers until the first alarm, censored at 500
  (tests whose window holds no shifted answer are not run: their alarms are false alarms,
  measured above).
* ``harm``: what the shift does to the guarantee, on the rows themselves: the realised false-flag
  rate on the stream's context-needed answers under the reference's profile and its memory
  recall, next to the reference's own held-out figures.

The permutation test's decision at a level alpha depends only on its first ceil(10 / alpha) - 1
relabellings (:func:`mnemoscope.stats.drift.permutation_check`), so one run with enough
relabellings for the smaller level decides both levels exactly as the monitor would.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_drift.py --streams 100
    python benchmarks/bench_drift.py --render benchmarks/results/drift/bench_drift.json  # the .md only
    python benchmarks/bench_drift.py --import-run /work/runs/tplA-ep/profile smollm2-135m-instruct-llama-server-pc300
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from mnemoscope.stats.drift import (  # noqa: E402
    STOP_AFTER,
    DriftReference,
    binomial_flag_test,
    drift_check,
    flag_rate_test,
    permutation_check,
)

CAL = ROOT / "benchmarks" / "results" / "calibration"
SHIPPED = ROOT / "src" / "mnemoscope" / "data" / "profiles" / "smollm2-135m-instruct"
OUT = ROOT / "benchmarks" / "results" / "drift"
DATA = OUT / "data"  # calibrations imported with --import-run (trimmed held-out rows + card)
CONFIGS = {
    "smollm2": CAL / "smollm2-135m-instruct-pc300",
    "gemma": CAL / "gemma-3-270m-pc300",
    "qwen": CAL / "qwen2.5-coder-0.5b-instruct-pc300",
    "qwen-llama-server": CAL / "qwen2.5-coder-0.5b-instruct-llama-server-pc300",
    "smollm2-llama-server": DATA / "smollm2-135m-instruct-llama-server-pc300",
    "smollm2-app-prompt": CAL / "smollm2-135m-instruct-llama-server-app-prompt",
}
DEFAULT = "default"  # the shipped profile (a reference only: its rows keep no answer-bearing words)
PRE = 550  # unshifted answers before a shift (mid-window for the previous scheme)
POST = 500  # shifted answers watched before a shift counts as missed
HORIZON = 0.05  # any false alarm in a stream of --length answers with probability at most this
JITTER = 0.02  # the smoothed bootstrap's noise, in Silverman bandwidths (module doc)


@dataclass(frozen=True)
class Scheme:
    """When tests run and on which answers: every ``step`` answers from ``first`` on, the last
    ``window`` (as :class:`mnemoscope.stats.drift.DriftMonitor` with the same parameters)."""

    name: str
    method: str
    window: int
    step: int
    first: int
    alpha: float

    def due(self, t: int) -> bool:
        return t >= self.first and (t - self.first) % self.step == 0

    def horizon_alpha(self, length: int) -> float:
        return HORIZON * self.step / length


OLD = Scheme("ks-bonferroni", "ks-bonferroni", 100, 100, 100, 0.01)
NEW = Scheme("permutation", "permutation", 200, 50, 100, 0.005)


class Config:
    """One calibration's held-out rows: signals, truth, its verdict (recovered) and threshold."""

    def __init__(self, name: str, rows: list[dict[str, Any]], selected: list[str], threshold: float):
        self.name = name
        self.n = len(rows)
        self.selected = selected
        self.threshold = threshold
        self.label = np.array([int(r["label"]) for r in rows])
        self.kind = np.array([str(r["kind"]) for r in rows])
        names = sorted({k for r in rows for k in ((r.get("evidence") or {}).get("signals") or {})})
        self.sig = {s: np.array([_num((r["evidence"]["signals"] or {}).get(s)) for r in rows]) for s in names}
        self.p = np.array([float(r["p_memory"]) for r in rows])
        self.flag = np.array([bool(r["memory_flag"]) for r in rows])
        # an answer without an answer-bearing word is never flagged (audit.verdict.decide)
        if all("answer_words" in r for r in rows):
            self.words = np.array([bool((r["answer_words"] or {}).get("words")) for r in rows])
        else:  # the trimmed rows of the shipped profile: inferred from the flag the audit gave
            self.words = ~((self.p > threshold) & ~self.flag)
        self.beta = self._recover()
        self.single = {}
        self.n_distinct = {}
        for s, v in self.sig.items():
            _, inv, cnt = np.unique(v, return_inverse=True, return_counts=True)
            self.single[s] = cnt[inv] == 1  # the continuous part: values seen once
            self.n_distinct[s] = len(cnt)

    def _recover(self) -> np.ndarray:
        """The verdict's intercept and coefficients: least squares on logit(p_memory), checked."""
        x = np.c_[np.ones(self.n), np.stack([self.sig[s] for s in self.selected], axis=1)]
        beta = np.asarray(np.linalg.lstsq(x, np.log(self.p / (1 - self.p)), rcond=None)[0])
        p = 1 / (1 + np.exp(-(x @ beta)))
        self.fit_error = float(np.max(np.abs(p - self.p)))
        if self.fit_error > 1e-9:
            raise SystemExit(f"{self.name}: p_memory is not a logistic function of {self.selected}")
        if not np.array_equal((p > self.threshold) & self.words, self.flag):
            raise SystemExit(f"{self.name}: the recovered verdict does not reproduce the stored flags")
        return beta

    def score(self, sig: dict[str, np.ndarray], words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """p_memory and flag of answers with signals ``sig`` under this configuration's verdict."""
        x = np.c_[np.ones(len(words)), np.stack([sig[s] for s in self.selected], axis=1)]
        p = 1 / (1 + np.exp(-(x @ self.beta)))
        return p, (p > self.threshold) & words


def _num(v: Any) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else math.nan


def load() -> dict[str, Config]:
    out = {}
    for key, folder in CONFIGS.items():
        rows = [json.loads(x) for x in (folder / "held_out.jsonl").read_text().splitlines() if x.strip()]
        v = json.loads((folder / "card.json").read_text())["profile"]["verdict"]
        out[key] = Config(key, rows, list(v["selected"]), float(v["threshold"]))
    rows = [json.loads(x) for x in (SHIPPED / "held_out.jsonl").read_text().splitlines() if x.strip()]
    v = json.loads((SHIPPED / "profile.json").read_text())["verdict"]
    out[DEFAULT] = Config(DEFAULT, rows, list(v["selected"]), float(v["threshold"]))
    return out


class Sampler:
    """The smoothed bootstrap of reference ``a``'s and stream ``b``'s rows, scored by ``a``."""

    def __init__(self, a: Config, b: Config):
        self.a, self.b = a, b
        self.h = {}
        for s in a.selected:
            if max(a.n_distinct[s], b.n_distinct[s]) <= 20:
                self.h[s] = 0.0
                continue
            x = a.sig[s][a.single[s] & np.isfinite(a.sig[s])]
            iqr = np.subtract(*np.percentile(x, [75, 25])) / 1.34
            spread = min(np.std(x), iqr) or np.std(x)
            self.h[s] = JITTER * 0.9 * spread * len(x) ** -0.2

    def draw(self, c: Config, idx: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """p_memory, flag, signals (the reference's selected) of rows ``idx`` of ``c``."""
        sig = {}
        for s in self.a.selected:
            v = c.sig[s][idx].copy()
            if self.h[s] > 0:
                move = c.single[s][idx]
                v[move] += rng.normal(0.0, self.h[s], int(move.sum()))
            sig[s] = v
        p, f = self.a.score(sig, c.words[idx])
        return {"p": p, "f": f.astype(int), **sig}

    def reference(self, rng: np.random.Generator) -> DriftReference:
        d = self.draw(self.a, rng.integers(0, self.a.n, self.a.n), rng)
        return DriftReference(d["p"], d["f"], {s: d[s] for s in self.a.selected})


def import_run(src: Path, name: str) -> Path:
    """Copy a calibration's held-out rows (trimmed to what this benchmark reads) and a card
    (its verdict's selection and threshold, validation figures, command and commit) from a
    ``mnemoscope calibrate`` output folder into ``DATA / name``."""
    import hashlib

    from mnemoscope.provenance import provenance

    raw = (src / "held_out.jsonl").read_bytes()
    keep = (
        "id",
        "kind",
        "label",
        "truth",
        "p_memory",
        "memory_flag",
        "source",
        "identical_prompts",
        "evidence",
    )
    rows = []
    for line in raw.decode("utf-8").splitlines():
        if line.strip():
            r = json.loads(line)
            words = (r.get("answer_words") or {}).get("words")
            rows.append({**{k: r[k] for k in keep}, "answer_words": {"words": words}})
    prof = json.loads((src / "profile.json").read_text())
    val = json.loads((src / "validation.json").read_text())
    v = prof["verdict"]
    card = {
        "what": "a calibration's held-out rows trimmed to what benchmarks/bench_drift.py reads (the texts "
        "and the per-token attribution dropped), with its verdict's selection and threshold",
        "source": str(src),
        "source_held_out_sha256": hashlib.sha256(raw).hexdigest(),
        "command": val["provenance"]["command"],
        "git_commit": val["provenance"]["git_commit"],
        "created": val["provenance"].get("time"),
        "profile": {
            "model": {k: prof["model"].get(k) for k in ("name", "spec", "fingerprint")},
            "prompt": prof.get("prompt"),
            "profile_hash": prof["profile_hash"],
            "verdict": {k: v[k] for k in ("selected", "threshold", "certified", "n_conformal", "n_fit")},
        },
        "validation": {
            k: val[k] for k in ("held_out", "auc", "alpha", "false_flag_rate", "false_flags", "memory_recall")
        },
        "imported_by": provenance(),
    }
    dst = DATA / name
    dst.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(r, ensure_ascii=False, default=float) + "\n" for r in rows)
    (dst / "held_out.jsonl").write_text(lines)
    (dst / "card.json").write_text(json.dumps(card, indent=1) + "\n")
    return dst


def _cat(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _window(stream: dict[str, np.ndarray], lo: int, hi: int, signals: list[str]) -> tuple[Any, ...]:
    return stream["p"][lo:hi], stream["f"][lo:hi], {s: stream[s][lo:hi] for s in signals}


def test_window(
    s: Scheme, ref: DriftReference, w: tuple[Any, ...], alphas: list[float], rng: np.random.Generator
) -> list[bool]:
    """The scheme's test of one window, decided at each level of ``alphas`` (module doc)."""
    if s.method == "ks-bonferroni":
        p = drift_check(ref, *w, alpha=max(alphas)).p_value
    else:
        need = math.ceil(STOP_AFTER / min(alphas)) - 1
        p = permutation_check(ref, *w, alpha=max(alphas), rng=rng, max_permutations=need).p_value
    return [p is not None and p <= a for a in alphas]


def _rate(k: int, n: int) -> dict[str, Any]:
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(0.95, method="exact") if n else None
    return {"k": k, "n": n, "rate": k / n if n else None, "ci95": [ci.low, ci.high] if ci else None}


def window_null(a: Config, trials: int, rng: np.random.Generator) -> dict[str, Any]:
    """Real rows, no resampling: 100 shuffled rows (a third of the shipped profile's 104) as the
    window, the rest as the reference."""
    hits = {OLD.name: 0, NEW.name: 0}
    fisher = binom = 0
    nw = min(100, a.n // 3)
    for _ in range(trials):
        perm = rng.permutation(a.n)
        w, r = perm[:nw], perm[nw:]
        ref = DriftReference(a.p[r], a.flag[r].astype(int), {s: a.sig[s][r] for s in a.selected})
        win = (a.p[w], a.flag[w].astype(int), {s: a.sig[s][w] for s in a.selected})
        for s in (OLD, NEW):
            hits[s.name] += test_window(s, ref, win, [s.alpha], rng)[0]
        k, kr = int(a.flag[w].sum()), int(a.flag[r].sum())
        p_f = flag_rate_test(k, nw, kr, len(r)).p_value
        fisher += int(p_f is not None and p_f <= OLD.alpha)
        binom += int(binomial_flag_test(k, nw, kr / len(r)) <= OLD.alpha)
    return {
        "trials": trials,
        "window_n": nw,
        "reference_n": a.n - nw,
        "alarm": {s.name: {"alpha": s.alpha, **_rate(hits[s.name], trials)} for s in (OLD, NEW)},
        "flag_test_alone_at_0.01": {
            "fisher": _rate(fisher, trials),
            "binomial_known_rate": _rate(binom, trials),
        },
    }


def stream_null(a: Config, streams: int, length: int, rng: np.random.Generator) -> dict[str, Any]:
    smp = Sampler(a, a)
    out = {}
    for s in (OLD, NEW):
        alphas = [s.alpha, s.horizon_alpha(length)]
        tests, alarms, anyalarm = 0, [0, 0], [0, 0]
        per_stream: list[list[int]] = [[], []]
        for _ in range(streams):
            ref = smp.reference(rng)
            st = smp.draw(a, rng.integers(0, a.n, length), rng)
            count = [0, 0]
            for t in range(1, length + 1):
                if s.due(t):
                    tests += 1
                    got = test_window(s, ref, _window(st, max(0, t - s.window), t, a.selected), alphas, rng)
                    for j, g in enumerate(got):
                        count[j] += g
            for j in range(2):
                alarms[j] += count[j]
                anyalarm[j] += count[j] > 0
                per_stream[j].append(count[j])
        out[s.name] = {
            "streams": streams,
            "length": length,
            "tests": tests,
            "levels": [
                {
                    "alpha": al,
                    "alarm_per_test": {
                        **_rate(alarms[j], tests),
                        # the tests of one stream overlap and share its reference: their alarms come
                        # in clusters, so the CI resamples whole streams (not the binomial one)
                        "ci95": _stream_ci(per_stream[j], tests // streams),
                        "ci95_method": "percentile bootstrap over streams, 2,000 resamples",
                    },
                    "alarms_per_stream": dict(sorted(Counter(per_stream[j]).items())),
                    "streams_with_an_alarm": _rate(anyalarm[j], streams),
                }
                for j, al in enumerate(alphas)
            ],
        }
    return out


def _stream_ci(per_stream: list[int], tests_per_stream: int) -> list[float]:
    x = np.asarray(per_stream, dtype=float) / tests_per_stream
    boot = np.random.default_rng(0).choice(x, (2000, len(x))).mean(axis=1)
    return [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))]


def shifted_rows(b: Config, how: dict[str, Any], n: int, rng: np.random.Generator) -> np.ndarray:
    if how.get("any"):
        return rng.integers(0, b.n, n)
    if "memory_share" in how:
        mem, ctx = np.flatnonzero(b.label == 1), np.flatnonzero(b.label == 0)
        pick_mem = rng.random(n) < how["memory_share"]
        return np.where(pick_mem, rng.choice(mem, n), rng.choice(ctx, n))
    return rng.choice(np.flatnonzero(b.kind == how["kind"]), n)


def shift(
    a: Config, b: Config, how: dict[str, Any], streams: int, length: int, rng: np.random.Generator
) -> Any:
    smp = Sampler(a, b)
    out = {}
    for s in (OLD, NEW):
        alphas = [s.alpha, s.horizon_alpha(length)]
        delays: list[list[int | None]] = [[], []]
        for _ in range(streams):
            ref = smp.reference(rng)
            pre = smp.draw(a, rng.integers(0, a.n, PRE), rng)
            post = smp.draw(b, shifted_rows(b, how, POST, rng), rng)
            st = _cat([pre, post])
            first: list[int | None] = [None, None]
            for t in range(PRE + 1, PRE + POST + 1):
                if not s.due(t) or t - s.window >= PRE + POST:
                    continue
                got = test_window(s, ref, _window(st, max(0, t - s.window), t, a.selected), alphas, rng)
                for j, g in enumerate(got):
                    if g and first[j] is None:
                        first[j] = t - PRE
                if all(f is not None for f in first):
                    break
            for j in range(2):
                delays[j].append(first[j])
        out[s.name] = [
            {
                "alpha": al,
                "streams": streams,
                "within_200": _rate(sum(d is not None and d <= 200 for d in delays[j]), streams),
                "detected_by_500": _rate(sum(d is not None for d in delays[j]), streams),
                "delay_median": _median(delays[j]),
            }
            for j, al in enumerate(alphas)
        ]
    return out


def _median(d: list[int | None]) -> float | None:
    """Median delay with misses as +inf (None when more than half are missed)."""
    x = np.sort([math.inf if v is None else v for v in d])
    med = float(np.median(x)) if len(x) else math.inf
    return None if math.isinf(med) else med


def harm(a: Config, b: Config, idx: np.ndarray | None = None, memory_share: float | None = None) -> Any:
    """The guarantee on ``b``'s rows ``idx`` under ``a``'s profile: false flags on its
    context-needed answers, memory recall, the share flagged (of a stream whose memory share is
    ``memory_share``: a mix moves the share flagged, not the two rates)."""
    i = np.arange(b.n) if idx is None else idx
    _, f = a.score({s: b.sig[s][i] for s in a.selected}, b.words[i])
    y = b.label[i]
    ff, rec = (
        _rate(int(f[y == 0].sum()), int((y == 0).sum())),
        _rate(int(f[y == 1].sum()), int((y == 1).sum())),
    )
    q = float(y.mean()) if memory_share is None else memory_share
    return {
        "false_flags": ff,
        "memory_recall": rec,
        "memory_share": q,
        "flag_rate": q * (rec["rate"] or 0.0) + (1 - q) * (ff["rate"] or 0.0),
    }


def shift_size(a: Config, b: Config, idx: np.ndarray | None = None) -> dict[str, float]:
    """Two-sample KS distances between ``a``'s rows and ``b``'s (``idx``), both scored by ``a``."""
    from scipy.stats import ks_2samp

    i = np.arange(b.n) if idx is None else idx
    pa, fa = a.score(a.sig, a.words)
    pb, fb = a.score({s: b.sig[s][i] for s in a.selected}, b.words[i])
    out = {"p_memory": float(ks_2samp(pb, pa).statistic), "flag_rate": float(fb.mean() - fa.mean())}
    for s in a.selected:
        out[s] = float(ks_2samp(b.sig[s][i], a.sig[s]).statistic)
    return out


def harmful(h: dict[str, Any], alpha: float = 0.05) -> str:
    """``yes`` when the false-flag rate's CI lies above alpha, ``maybe`` when only its estimate does."""
    ff = h["false_flags"]
    if ff["rate"] is None:
        return "-"
    return "yes" if ff["ci95"][0] > alpha else ("maybe" if ff["rate"] > alpha else "no")


def scenarios(data: dict[str, Config], a: Config) -> dict[str, tuple[Config, dict[str, Any]]]:
    out: dict[str, tuple[Config, dict[str, Any]]] = {}
    for other, b in data.items():
        if other not in (a.name, DEFAULT):  # the other model's (or prompt's) answers, under a's profile
            out[f"answers of {other}"] = (b, {"any": True})
    for q in (0.7, 0.1):  # (0.9: caught within 200 by both tests in every earlier run)
        out[f"own answers, memory share {q}"] = (a, {"memory_share": q})
    if (a.kind == "conflict").any():
        out["own answers, knowledge conflicts only"] = (a, {"kind": "conflict"})
    return out


def _pct(r: dict[str, Any]) -> str:
    lo, hi = r["ci95"]
    return f"{100 * r['rate']:.1f} % ({r['k']}/{r['n']}; {100 * lo:.1f}-{100 * hi:.1f})"


def _per_test(r: dict[str, Any]) -> str:
    lo, hi = r["ci95"]
    return f"{100 * r['rate']:.2f} % ({r['k']}/{r['n']}; {100 * lo:.2f}-{100 * hi:.2f})"


def render(rec: dict[str, Any]) -> str:
    """The Markdown summary of a result JSON (every figure read from it)."""
    pv, par = rec["provenance"], rec["params"]
    out = [
        "# Drift watch: false alarms and delays, previous and new test, on real held-out audits",
        "",
        f"Command: `{pv['command']}`; git commit {pv['git_commit']} (dirty: {pv['git_dirty']}); "
        f"threads {rec['threads']}; {rec['seconds']} s; load at start `{rec['uptime_start']}`, "
        f"at end `{rec['uptime_end']}`.",
        *(["", f"Note: {rec['provenance_note']}"] if rec.get("provenance_note") else []),
        "",
        f"Previous: `{OLD.name}`, non-overlapping windows of {OLD.window}, alpha {OLD.alpha} per window. "
        f"New: `{NEW.name}`, every {NEW.step} answers a permutation test of the last {NEW.window} "
        f"(the first at {NEW.first}), alpha {NEW.alpha} per test. Each also at the horizon level that "
        f"keeps any false alarm in {par['length']:,} answers at most {HORIZON} likely "
        f"({OLD.horizon_alpha(par['length']):g} and {NEW.horizon_alpha(par['length']):g}). Streams and "
        "references: smoothed bootstrap of the rows, every answer scored by the reference's profile "
        f"(bench_drift.py's doc). Shifts start after {rec['pre_shift_answers']} answers; delays are "
        f"censored at {rec['post_shift_cap']}. Percentages with exact binomial 95 % CIs (alarms per test "
        "in streams: bootstrap over streams).",
        "",
        "## Unshifted",
        "",
        "| reference | n | one window, real rows, exact null: previous | new | "
        f"{par['length']:,}-answer streams: previous, alarms per test | any alarm | new, per test | any alarm | "
        "horizon level: previous, any alarm | new, any alarm |",
        "|---|---:|---|---|---|---|---|---|---|---|",
    ]
    for name, r in rec["results"].items():
        w, sn = r["window_null"], r["stream_null"]
        o, nw = sn[OLD.name]["levels"], sn[NEW.name]["levels"]
        out.append(
            f"| {name} | {r['n_reference']} | {_pct(w['alarm'][OLD.name])} | {_pct(w['alarm'][NEW.name])} | "
            f"{_per_test(o[0]['alarm_per_test'])} | {_pct(o[0]['streams_with_an_alarm'])} | "
            f"{_per_test(nw[0]['alarm_per_test'])} | {_pct(nw[0]['streams_with_an_alarm'])} | "
            f"{_pct(o[1]['streams_with_an_alarm'])} | {_pct(nw[1]['streams_with_an_alarm'])} |"
        )
    out += [
        "",
        "Alarms per test in streams: the CI resamples whole streams (a stream's tests overlap and share "
        "its reference, so its false alarms come in clusters).",
    ]
    out += [
        "",
        "The flag count alone at level 0.01 (one window, real rows): Fisher's exact test vs the binomial "
        "test against the reference's rate taken as known:",
        "",
    ]
    for name, r in rec["results"].items():
        f = r["window_null"]["flag_test_alone_at_0.01"]
        out.append(f"* {name}: Fisher {_pct(f['fisher'])}, binomial {_pct(f['binomial_known_rate'])}")
    out += [
        "",
        "## Shifted: share of streams whose alarm fires within 200 shifted answers",
        "",
        "Harm: the realised false-flag rate on the stream's context-needed answers under the reference's "
        "profile (alpha 0.05), and its memory recall, on the rows themselves; the reference's own held-out "
        "figures first. Harmful: yes when that rate's CI lies above alpha, maybe when only its estimate does. "
        "KS of p_memory: the distance between the stream's and the reference's rows, both scored by the "
        "reference's profile (a mix of the reference's own answers: -).",
        "",
    ]
    for name, r in rec["results"].items():
        own = r["harm_own"]
        out += [
            f"### reference {name} (own held-out: false flags {_pct(own['false_flags'])}, "
            f"recall {100 * own['memory_recall']['rate']:.1f} %, memory share {r['memory_share']:.2f})",
            "",
            "| shift | KS of p_memory on the rows | false flags under the reference's profile | harmful | recall | "
            "previous | new | previous, horizon level | new, horizon level | median delay, previous / new |",
            "|---|---:|---|---|---:|---|---|---|---|---:|",
        ]
        for sc, x in r["shift"].items():
            h = x["harm"]
            o, nw = x[OLD.name], x[NEW.name]
            med = " / ".join(
                "-" if v["delay_median"] is None else f"{v['delay_median']:g}" for v in (o[0], nw[0])
            )
            ks = "-" if x["ks_on_rows"] is None else f"{x['ks_on_rows']['p_memory']:.2f}"
            out.append(
                f"| {sc} | {ks} | {_pct(h['false_flags'])} | {h['harmful']} | {100 * h['memory_recall']['rate']:.1f} % | "
                f"{_pct(o[0]['within_200'])} | {_pct(nw[0]['within_200'])} | {_pct(o[1]['within_200'])} | "
                f"{_pct(nw[1]['within_200'])} | {med} |"
            )
        out.append("")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=500, help="windows per reference (window_null)")
    ap.add_argument("--streams", type=int, default=100, help="streams per reference or scenario")
    ap.add_argument("--null-streams", type=int, default=100, help="unshifted streams per reference")
    ap.add_argument("--length", type=int, default=2000, help="answers per unshifted stream")
    ap.add_argument("--only", nargs="*", help="references to run (default: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=OUT / "bench_drift.json")
    ap.add_argument("--render", type=Path, help="only write the Markdown summary of this result JSON")
    ap.add_argument(
        "--import-run", nargs=2, metavar=("PROFILE_DIR", "NAME"), help="only import a calibration"
    )
    args = ap.parse_args()
    if args.import_run is not None:
        print("wrote", import_run(Path(args.import_run[0]), args.import_run[1]))
        return
    if args.render is not None:
        args.render.with_suffix(".md").write_text(render(json.loads(args.render.read_text())))
        return

    from mnemoscope.provenance import provenance

    prov = provenance()  # at the start: the code that measures, not the tree at the end
    t0 = time.perf_counter()
    uptime_start = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    rng = np.random.default_rng(args.seed)
    data = load()
    results: dict[str, Any] = {}
    say: Callable[..., None] = lambda *x: print(f"[{time.perf_counter() - t0:7.1f}s]", *x, flush=True)  # noqa: E731
    for name, a in data.items():
        if args.only and name not in args.only:
            continue
        res: dict[str, Any] = {
            "n_reference": a.n,
            "signals": a.selected,
            "verdict_fit_max_error": a.fit_error,
            "memory_share": float(a.label.mean()),
            "flag_rate": float(a.flag.mean()),
            "harm_own": harm(a, a),
            "window_null": window_null(a, args.trials, rng),
        }
        say(name, "window_null", json.dumps(res["window_null"]["alarm"]))
        res["stream_null"] = stream_null(a, args.null_streams, args.length, rng)
        say(name, "stream_null", json.dumps({k: v["levels"] for k, v in res["stream_null"].items()}))
        res["shift"] = {}
        for sc, (b, how) in scenarios(data, a).items():
            idx = np.flatnonzero(b.kind == how["kind"]) if how.get("kind") else None
            h = harm(a, b, idx, how.get("memory_share"))
            size = shift_size(a, b, idx) if not how.get("memory_share") else None
            res["shift"][sc] = {
                "harm": {**h, "harmful": harmful(h)},
                "ks_on_rows": size,
                **shift(a, b, how, args.streams, args.length, rng),
            }
            x = res["shift"][sc]
            say(name, sc, {k: [v["within_200"]["rate"] for v in x[k]] for k in (OLD.name, NEW.name)})
        results[name] = res

    rec = {
        "what": "drift watch on real held-out audits: false alarms on unshifted answers, delay on shifted "
        "ones, the previous test and the new one side by side",
        "provenance": prov,
        "threads": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")},
        "uptime_start": uptime_start,
        "uptime_end": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
        "seconds": round(time.perf_counter() - t0, 1),
        "params": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "schemes": {s.name: s.__dict__ for s in (OLD, NEW)},
        "pre_shift_answers": PRE,
        "post_shift_cap": POST,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rec, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(render(rec))
    print("wrote", args.out, "in", rec["seconds"], "s")


if __name__ == "__main__":
    main()
