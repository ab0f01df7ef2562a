"""Does the drift watch stay quiet on unshifted answers and fire on shifted ones? (issue 36)

Real signal values only: the committed held-out audits of four model configurations
(``benchmarks/results/calibration/<config>/held_out.jsonl``: SmolLM2-135M, Gemma-3-270M and
Qwen2.5-Coder-0.5B in process, the same Qwen over llama-server; 221-263 answers each, audited
with their own profile). For a configuration A the watch compares p_memory, the memory flag
and the two signals A's verdict combines (``card.json``: ``verdict.selected``) with A's rows,
as :class:`mnemoscope.stats.drift.DriftMonitor` does in the service (non-overlapping windows,
KS + Fisher + Bonferroni).

Three measurements, per configuration:

* ``window_null``: the false-alarm rate of one window where the null holds exactly: the rows
  are shuffled, the first ``window`` are the window, the rest the reference (window and
  reference exchangeable, as live answers drawn like the calibration's would be). Also, for
  the flag count alone at level alpha, Fisher's exact test vs the plain binomial test against
  the reference's rate taken as known (the reason the monitor uses Fisher).
* ``stream_null``: 2,000-answer streams resampled (with replacement) from A's rows, watched
  against all of A's rows (the profile's reference as shipped): alarms per tested window and
  the share of streams with at least one alarm, at ``--alpha`` per window and at the
  horizon-controlled ``alpha = 0.05 * window / 2000``.
* ``shift``: streams of 550 answers resampled from A, then shifted answers, watched against A's
  rows; the delay is the number of shifted answers until the first alarm (the end of the
  window that fires), censored at 1,000. Shifts: another configuration's answers (their signal
  values are what any profile measures on that model's answers; their p_memory and flag come
  from that configuration's own profile, since A's verdict coefficients are not committed with
  the results), and A's own answers in another mix: memory share 0.9, 0.7 and 0.1 (A's is
  0.40-0.48), and knowledge-conflict items only (contexts that contradict what the model knows).

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_drift.py --streams 200
    python benchmarks/bench_drift.py --render benchmarks/results/drift/bench_drift.json  # the .md only
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from mnemoscope.stats.drift import (  # noqa: E402
    DriftMonitor,
    DriftReference,
    binomial_flag_test,
    drift_check,
    flag_rate_test,
)

CAL = ROOT / "benchmarks" / "results" / "calibration"
OUT = ROOT / "benchmarks" / "results" / "drift"
CONFIGS = {
    "smollm2": "smollm2-135m-instruct-pc300",
    "gemma": "gemma-3-270m-pc300",
    "qwen": "qwen2.5-coder-0.5b-instruct-pc300",
    "qwen-llama-server": "qwen2.5-coder-0.5b-instruct-llama-server-pc300",
}
PRE = 550  # unshifted answers before a shift (mid-window: the first window after it is mixed)
POST = 1000  # shifted answers watched before a shift counts as missed


class Rows:
    """One configuration's held-out audits as arrays (the signals of ``signals``)."""

    def __init__(self, rows: list[dict[str, Any]], signals: list[str]):
        ref = DriftReference.from_records(rows, signals)
        assert ref.n == len(rows), "every committed held-out row carries p_memory and a flag"
        self.p, self.f, self.s = ref.p_memory, ref.flags, dict(ref.signals)
        self.label = np.array([int(r["label"]) for r in rows])
        self.kind = np.array([str(r["kind"]) for r in rows])
        self.n = len(rows)

    def reference(self, idx: np.ndarray | None = None, signals: list[str] | None = None) -> DriftReference:
        i = np.arange(self.n) if idx is None else idx
        names = list(self.s) if signals is None else signals
        return DriftReference(self.p[i], self.f[i], {k: self.s[k][i] for k in names})

    def feed(self, mon: DriftMonitor, idx: np.ndarray) -> list[tuple[int, bool]]:
        """Each answer of ``idx`` into ``mon``; (last answer, drifted) per tested window."""
        out = []
        for i in idx:
            c = mon.observe(self.p[i], bool(self.f[i]), {k: v[i] for k, v in self.s.items()})
            if c is not None:
                out.append((c.last, c.drifted))
        return out


def load(name: str) -> tuple[list[dict[str, Any]], list[str]]:
    rows = [json.loads(x) for x in (CAL / name / "held_out.jsonl").read_text().splitlines() if x.strip()]
    card = json.loads((CAL / name / "card.json").read_text())
    return rows, list(card["profile"]["verdict"]["selected"])


def _rate(k: int, n: int) -> dict[str, Any]:
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(0.95, method="exact") if n else None
    return {"k": k, "n": n, "rate": k / n if n else None, "ci95": [ci.low, ci.high] if ci else None}


def window_null(a: Rows, window: int, alpha: float, trials: int, rng: np.random.Generator) -> dict[str, Any]:
    alarms = fisher = binom = 0
    for _ in range(trials):
        perm = rng.permutation(a.n)
        w, r = perm[:window], perm[window:]
        ref = a.reference(r)
        c = drift_check(ref, a.p[w], a.f[w], {k: v[w] for k, v in a.s.items()}, alpha=alpha)
        alarms += int(c.drifted)
        k, kr = int(a.f[w].sum()), int(a.f[r].sum())
        p_f = flag_rate_test(k, window, kr, len(r)).p_value
        fisher += int(p_f is not None and p_f <= alpha)
        binom += int(binomial_flag_test(k, window, kr / len(r)) <= alpha)
    return {
        "trials": trials,
        "reference_n": a.n - window,
        "alarm": _rate(alarms, trials),
        "flag_test_alone_at_alpha": {
            "fisher": _rate(fisher, trials),
            "binomial_known_rate": _rate(binom, trials),
        },
    }


def stream_null(
    a: Rows, window: int, alpha: float, streams: int, length: int, rng: np.random.Generator
) -> dict[str, Any]:
    n_win = n_alarm = any_alarm = 0
    for _ in range(streams):
        mon = DriftMonitor(a.reference(), window=window, alpha=alpha)
        got = a.feed(mon, rng.integers(0, a.n, length))
        n_win += len(got)
        k = sum(d for _, d in got)
        n_alarm += k
        any_alarm += int(k > 0)
    return {
        "alpha": alpha,
        "streams": streams,
        "length": length,
        "windows": n_win,
        "alarm_per_window": _rate(n_alarm, n_win),
        "streams_with_an_alarm": _rate(any_alarm, streams),
    }


def shifted_indices(a: Rows, how: dict[str, Any], n: int, rng: np.random.Generator) -> np.ndarray:
    if how.get("any"):
        return rng.integers(0, a.n, n)
    if "memory_share" in how:
        mem, ctx = np.flatnonzero(a.label == 1), np.flatnonzero(a.label == 0)
        pick_mem = rng.random(n) < how["memory_share"]
        return np.where(pick_mem, rng.choice(mem, n), rng.choice(ctx, n))
    return rng.choice(np.flatnonzero(a.kind == how["kind"]), n)


def shift(
    a: Rows, b: Rows, how: dict[str, Any], window: int, alpha: float, streams: int, rng: np.random.Generator
) -> dict[str, Any]:
    delays: list[int | None] = []
    pre_alarms = pre_windows = 0
    for _ in range(streams):
        mon = DriftMonitor(a.reference(), window=window, alpha=alpha)
        pre = a.feed(mon, rng.integers(0, a.n, PRE))
        pre_windows += len(pre)
        pre_alarms += sum(d for _, d in pre)
        delay = None
        post = shifted_indices(b, how, POST, rng)
        for start in range(0, POST, window):  # stop at the first alarm after the shift
            got = b.feed(mon, post[start : start + window])
            hit = [last for last, d in got if d and last > PRE]
            if hit:
                delay = hit[0] - PRE
                break
        delays.append(delay)
    found = np.array([d for d in delays if d is not None])
    return {
        "streams": streams,
        "detected": _rate(len(found), streams),
        "within_200": _rate(int(np.sum(found <= 200)), streams),
        "delay_median": float(np.median(found)) if len(found) else None,
        "delay_p90": float(np.percentile(found, 90)) if len(found) else None,
        "pre_shift_alarm_per_window": _rate(pre_alarms, pre_windows),
    }


def _pct(r: dict[str, Any]) -> str:
    lo, hi = r["ci95"]
    return f"{100 * r['rate']:.2f} % ({r['k']}/{r['n']}; CI {100 * lo:.2f}-{100 * hi:.2f} %)"


def render(rec: dict[str, Any]) -> str:
    """The Markdown summary of a result JSON (every figure read from it)."""
    pv, par = rec["provenance"], rec["params"]
    out = [
        "# Drift watch: false alarms and delays on real held-out audits",
        "",
        f"Command: `{pv['command']}`; git commit {pv['git_commit']} (dirty: {pv['git_dirty']}); "
        f"threads {rec['threads']}; {rec['seconds']} s; load at start `{rec['uptime_start']}`, "
        f"at end `{rec['uptime_end']}`.",
        *(["", f"Note: {rec['provenance_note']}"] if rec.get("provenance_note") else []),
        "",
        f"Window {par['window']} answers; alpha {par['alpha']} per window, and the horizon-controlled "
        f"{par['horizon_alpha']:g} (= 0.05 x window / {par['length']}). Shifts start after "
        f"{rec['pre_shift_answers']} unshifted answers (mid-window); delay = shifted answers until the "
        f"end of the window that fires, censored at {rec['post_shift_cap']}.",
        "",
        "## Unshifted",
        "",
        "| reference (A) | n | one window, exact null: alarm rate | flag count alone at alpha: Fisher | "
        "plain binomial, rate taken as known | 2,000-answer streams: alarms per window | "
        "streams with any alarm | same at horizon alpha: per window | any alarm |",
        "|---|---:|---|---|---|---|---|---|---|",
    ]
    for name, r in rec["results"].items():
        w, (s1, s2) = r["window_null"], r["stream_null"]
        f = w["flag_test_alone_at_alpha"]
        out.append(
            f"| {name} | {r['n_reference']} | {_pct(w['alarm'])} | {_pct(f['fisher'])} | "
            f"{_pct(f['binomial_known_rate'])} | {_pct(s1['alarm_per_window'])} | "
            f"{_pct(s1['streams_with_an_alarm'])} | {_pct(s2['alarm_per_window'])} | "
            f"{_pct(s2['streams_with_an_alarm'])} |"
        )
    out += [
        "",
        "## Shifted: share of streams whose alarm fires within 200 shifted answers (median delay)",
        "",
    ]
    alphas = [par["alpha"], par["horizon_alpha"]]
    for name, r in rec["results"].items():
        out += [f"### reference {name}", "", "| shift | " + " | ".join(f"alpha {a:g}" for a in alphas) + " |"]
        out.append("|---|" + "---|" * len(alphas))
        scen = sorted({k.rsplit("@", 1)[0] for k in r["shift"]})
        for sc in scen:
            cells = []
            for a in alphas:
                x = r["shift"][f"{sc}@alpha={a:g}"]
                med = "-" if x["delay_median"] is None else f"{x['delay_median']:g}"
                cells.append(
                    f"{_pct(x['within_200'])}; detected by 1,000: {100 * x['detected']['rate']:.1f} %; median {med}"
                )
            out.append(f"| {sc} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--window", type=int, default=100)
    ap.add_argument("--alpha", type=float, default=0.01)
    ap.add_argument("--trials", type=int, default=2000, help="windows per configuration (window_null)")
    ap.add_argument("--streams", type=int, default=200, help="streams per configuration or scenario")
    ap.add_argument("--length", type=int, default=2000, help="answers per unshifted stream")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=OUT / "bench_drift.json")
    ap.add_argument("--render", type=Path, help="only write the Markdown summary of this result JSON")
    args = ap.parse_args()
    if args.render is not None:
        args.render.with_suffix(".md").write_text(render(json.loads(args.render.read_text())))
        return

    from mnemoscope.provenance import provenance

    prov = provenance()  # at the start: the code that measures, not the tree at the end
    t0 = time.perf_counter()
    uptime_start = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    rng = np.random.default_rng(args.seed)
    data = {k: load(v) for k, v in CONFIGS.items()}
    horizon_alpha = 0.05 * args.window / args.length
    results: dict[str, Any] = {}
    for name, (rows, signals) in data.items():
        a = Rows(rows, signals)
        res: dict[str, Any] = {
            "config": CONFIGS[name],
            "n_reference": a.n,
            "signals": signals,
            "memory_share": float(a.label.mean()),
            "flag_rate": float(a.f.mean()),
            "window_null": window_null(a, args.window, args.alpha, args.trials, rng),
            "stream_null": [
                stream_null(a, args.window, al, args.streams, args.length, rng)
                for al in (args.alpha, horizon_alpha)
            ],
            "shift": {},
        }
        scenarios: dict[str, tuple[Rows, dict[str, Any]]] = {}
        for other, (orows, _) in data.items():
            if other != name:  # the other model's answers, measured on A's signals
                scenarios[f"model:{other}"] = (Rows(orows, signals), {"any": True})
        for q in (0.9, 0.7, 0.1):
            scenarios[f"mix:memory_share={q}"] = (a, {"memory_share": q})
        scenarios["mix:conflicts_only"] = (a, {"kind": "conflict"})
        for sname, (b, how) in scenarios.items():
            for al in (args.alpha, horizon_alpha):
                key = f"{sname}@alpha={al:g}"
                res["shift"][key] = shift(a, b, how, args.window, al, args.streams, rng)
                print(name, key, json.dumps(res["shift"][key]), flush=True)
        results[name] = res
        print(name, "window_null", json.dumps(res["window_null"]), flush=True)
        print(name, "stream_null", json.dumps(res["stream_null"]), flush=True)

    rec = {
        "what": "drift watch on real held-out audits: false alarms on unshifted answers, delay on shifted ones",
        "provenance": prov,
        "threads": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")},
        "uptime_start": uptime_start,
        "uptime_end": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
        "seconds": round(time.perf_counter() - t0, 1),
        "params": {**{k: v for k, v in vars(args).items() if k != "out"}, "horizon_alpha": horizon_alpha},
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
