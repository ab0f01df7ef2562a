"""RePCS evaluation (orchestration): trace, calibrate on clean queries, score, report.

Everything here consumes paired traces; the model is only touched through
:func:`mnemoscope.trace.pipeline.run_pairs` (resumable) and, for the SelfCheck-style
baseline, :meth:`mnemoscope.trace.Tracer.sample`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mnemoscope.detectors.base import MembershipData
from mnemoscope.detectors.repcs import RePCS, topk_kl
from mnemoscope.errors import InputError
from mnemoscope.stats import auc_ci, summarize, threshold_metrics
from mnemoscope.trace.types import PairTrace

__all__ = [
    "NOISE_LEVELS",
    "calibration_hash",
    "closed_book_logprob",
    "consistency_scores",
    "evaluate",
    "noise_robustness",
    "split_calibration",
]

NOISE_LEVELS = (0.0, 0.02, 0.05, 0.10)


def calibration_hash(traces: Sequence[PairTrace]) -> str:
    """SHA-256 over the calibration records (id, context, query, answer tokens), order-independent."""
    h = hashlib.sha256()
    for t in sorted(traces, key=lambda t: t.id):
        h.update(json.dumps([t.id, t.context, t.query, t.answer_ids.tolist()]).encode())
    return h.hexdigest()


def closed_book_logprob(traces: Sequence[PairTrace]) -> np.ndarray:
    """Baseline: mean log p(y_t) of the answer on the query-only path (how sure the model is
    of the answer without the context). Higher = memorized."""
    from mnemoscope.detectors.repcs import ClosedBookLogprob

    data = MembershipData(
        ids=[t.id for t in traces],
        texts=[t.context for t in traces],
        labels=np.zeros(len(traces), dtype=int),
        pairs=list(traces),
    )
    return ClosedBookLogprob().score(data)


def consistency_scores(samples: Sequence[Sequence[str]]) -> np.ndarray:
    """SelfCheckGPT-style agreement of n no-context samples per query: mean pairwise Jaccard
    of lower-cased word sets. Higher = more consistent = more likely memorized."""
    out = []
    for group in samples:
        sets = [set(s.lower().split()) for s in group]
        pairs = [(i, j) for i in range(len(sets)) for j in range(i + 1, len(sets))]
        vals = [len(sets[i] & sets[j]) / max(1, len(sets[i] | sets[j])) for i, j in pairs]
        out.append(float(np.mean(vals)) if vals else 0.0)
    return np.array(out)


def noise_robustness(
    traces: Sequence[PairTrace],
    labels: np.ndarray,
    *,
    levels: Sequence[float] = NOISE_LEVELS,
    seed: int = 0,
    n_resamples: int = 1000,
) -> list[dict[str, Any]]:
    """AUC of -Z when Gaussian noise N(0, sigma^2) is added to the output probabilities.

    The noise is applied to what a black-box API returns per step: the top-k probabilities
    of each path (the tail bucket absorbs the rest); probabilities are clipped at 0 and
    renormalised, and Z is the top-k estimator summed over steps.
    """
    rng = np.random.default_rng(seed)
    rows = []
    for sigma in levels:
        z = []
        for t in traces:
            total = 0.0
            for s in range(t.n_steps):
                rag = _noisy(t.topk_ids_with[s], t.topk_logprobs_with[s], sigma, rng)
                para = _noisy(t.topk_ids_without[s], t.topk_logprobs_without[s], sigma, rng)
                total += topk_kl(rag, para)[0]
            z.append(total)
        est = auc_ci(-np.array(z), labels, rng=seed, n_resamples=n_resamples)
        rows.append({"sigma": sigma, "roc_auc": est.estimate, "roc_auc_ci": [est.ci_low, est.ci_high]})
    return rows


def _noisy(ids: np.ndarray, logprobs: np.ndarray, sigma: float, rng: np.random.Generator) -> dict[int, float]:
    p = np.exp(logprobs.astype(np.float64))
    tail = max(0.0, 1.0 - p.sum())
    full = np.append(p, tail)
    if sigma > 0:
        full = np.clip(full + rng.normal(0.0, sigma, size=full.shape), 1e-12, None)
        full = full / full.sum()
    return {int(i): float(np.log(v)) for i, v in zip(ids.tolist(), full[:-1], strict=True)}


def split_calibration(labels: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Indices of the clean records used for calibration (a seeded random ``fraction`` of them)."""
    clean = np.flatnonzero(labels == 0)
    if len(clean) < 2:
        raise InputError(
            f"need at least 2 clean (label 0) records to calibrate and hold out, got {len(clean)}"
        )
    rng = np.random.default_rng(seed)
    n_cal = max(1, min(len(clean) - 1, round(fraction * len(clean))))
    return np.sort(rng.choice(clean, size=n_cal, replace=False))


@dataclass
class EvalResult:
    report: dict[str, Any]
    rows: list[dict[str, Any]]


def evaluate(
    traces: Sequence[PairTrace],
    labels: np.ndarray,
    detector: RePCS,
    *,
    calibration: dict[str, Any] | None = None,
    calibration_fraction: float = 0.5,
    seed: int = 0,
    n_resamples: int = 1000,
    kinds: Sequence[str | None] | None = None,
    samples: Sequence[Sequence[str]] | None = None,
    noise_levels: Sequence[float] = NOISE_LEVELS,
) -> EvalResult:
    """Threshold-free metrics on all records, plus decisions at a calibrated tau on held-out ones.

    With ``calibration`` (a record from ``repcs calibrate``) its tau is used and every record
    is held out; otherwise a seeded ``calibration_fraction`` of the clean records sets tau
    and is excluded from the threshold metrics (realised FPR on the other clean records).
    """
    labels = np.asarray(labels, dtype=int)
    z = detector.z(traces)
    scores = -z
    report: dict[str, Any] = {
        "method": "repcs",
        "params": detector.get_params(),
        **summarize(scores, labels, rng=seed, n_resamples=n_resamples),
    }
    if calibration is not None:
        tau = float(calibration["tau"])
        held = np.arange(len(traces))
        report["threshold"] = {
            "source": "calibration file",
            "tau": tau,
            "alpha": calibration.get("alpha"),
            "n_calibration": calibration.get("n"),
            "bound": calibration.get("bound"),
        }
    else:
        cal = split_calibration(labels, calibration_fraction, seed)
        # tau from the calibration half of the clean records; the memorized ones only estimate Delta
        fit_idx = np.concatenate([cal, np.flatnonzero(labels == 1)])
        cal_det = RePCS(**detector.get_params()).fit([traces[i] for i in fit_idx], labels[fit_idx])
        tau = cal_det.tau_
        held = np.setdiff1d(np.arange(len(traces)), cal)
        report["threshold"] = {
            "source": f"seeded {calibration_fraction:.0%} of the clean records (seed {seed})",
            "tau": tau,
            "alpha": detector.alpha,
            "n_calibration": len(cal),
            "bound": cal_det.calibration_record()["bound"],
            "calibration_hash": calibration_hash([traces[i] for i in cal]),
        }
    flags = z < tau
    held_clean = held[labels[held] == 0]
    cm = threshold_metrics(flags[held].astype(float), labels[held], 0.5)
    report["held_out"] = {
        "n": len(held),
        "confusion": cm.to_dict(),
        "realised_fpr": float(flags[held_clean].mean()) if len(held_clean) else None,
        "target_alpha": detector.alpha,
        "n_clean": len(held_clean),
    }
    report["empty_context_records"] = int(sum(t.identical_prompts for t in traces))
    report["early_eos_records"] = int(sum(t.stopped_at_eos for t in traces))
    topk = RePCS(**{**detector.get_params(), "estimator": "topk"})
    report["topk_estimator"] = {
        "k": int(traces[0].topk_ids_with.shape[1]) if traces else None,
        **_auc(-topk.z(traces), labels, seed, n_resamples),
    }
    base = {"closed_book_logprob": _auc(closed_book_logprob(traces), labels, seed, n_resamples)}
    if samples is not None:
        base["selfcheck_consistency"] = _auc(consistency_scores(samples), labels, seed, n_resamples)
    report["baselines"] = base
    report["noise_robustness"] = noise_robustness(
        traces, labels, levels=noise_levels, seed=seed, n_resamples=n_resamples
    )
    if kinds is not None:
        report["by_kind"] = _by_kind(scores, labels, kinds, seed, n_resamples)
    rows = [
        {
            "id": t.id,
            "score": float(s),
            "label": int(y),
            "kl": float(k),
            "memorized": bool(f),
            "n_steps": t.n_steps,
            "identical_prompts": t.identical_prompts,
            "stopped_at_eos": t.stopped_at_eos,
        }
        for t, s, y, k, f in zip(traces, scores, labels, z, flags, strict=True)
    ]
    return EvalResult(report=report, rows=rows)


def _auc(scores: np.ndarray, labels: np.ndarray, seed: int, n_resamples: int) -> dict[str, Any]:
    est = auc_ci(scores, labels, rng=seed, n_resamples=n_resamples)
    return {"roc_auc": est.estimate, "roc_auc_ci": [est.ci_low, est.ci_high], "reason": est.reason}


def _by_kind(
    scores: np.ndarray, labels: np.ndarray, kinds: Sequence[str | None], seed: int, n_resamples: int
) -> dict[str, Any]:
    kinds_arr = np.array([k or "unknown" for k in kinds])
    out = {}
    clean = kinds_arr[labels == 0]
    for kind in sorted(set(kinds_arr[labels == 1])):
        mask = (kinds_arr == kind) | (labels == 0)
        out[f"{kind} vs clean"] = {
            "n_pos": int((kinds_arr == kind).sum()),
            "n_neg": len(clean),
            **_auc(scores[mask], labels[mask], seed, n_resamples),
        }
    return out
