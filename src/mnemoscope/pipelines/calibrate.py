"""Calibrating an audit profile: fit CRM + its anomaly rule, RePCS's tau, the token margin and the
verdict model on labelled records (``mnemoscope calibrate``; the endpoint variant is
:func:`mnemoscope.pipelines.endpoint.calibrate_endpoint_profile`, which calls :func:`fit_verdict`).

:func:`fit_verdict` is the one place the verdict model and the token margin are fitted: the
profile build, the endpoint calibration and ``benchmarks/verdict_eval.py`` (on each training
fold) call it. The anomaly rule and the profile format are described in
:mod:`mnemoscope.pipelines.profile`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from mnemoscope.data.records import Record, RecordError
from mnemoscope.detectors.crm_artifact import save_crm
from mnemoscope.detectors.verdict import VerdictModel
from mnemoscope.errors import InputError
from mnemoscope.io import atomic_write, canonical_json
from mnemoscope.pipelines.profile import (
    PROFILE_FORMAT,
    AnomalyRule,
    AuditProfile,
    CalibrationConfig,
    load_profile,
    profile_hash,
)
from mnemoscope.pipelines.signals import answer_pieces, trace_signals
from mnemoscope.stats.conformal import conformal_upper

__all__ = ["calibrate_profile", "data_hash", "fit_verdict", "oof_crm_probability", "token_margin"]

log = logging.getLogger(__name__)


def data_hash(records: Sequence[Record]) -> str:
    h = hashlib.sha256()
    for r in records:
        h.update(canonical_json({"id": r.id, "context": r.context, "query": r.query, "label": r.label}))
    return h.hexdigest()


def calibrate_profile(
    lm: Any,
    records: Sequence[Record],
    out: str | Path,
    config: CalibrationConfig | None = None,
    *,
    input_errors: Sequence[RecordError] = (),
    progress: bool = True,
    overwrite: bool = False,
    traces_dir: str | Path | None = None,
) -> AuditProfile:
    """Trace ``records`` (resumable, under ``traces_dir`` or ``out/traces``), fit CRM + anomaly rule +
    RePCS + the verdict model, save.

    Raises:
        InputError: too few usable records, a label vector that cannot fit what was asked
            (a classifier needs both labels), or no clean record to calibrate on.
    """
    from mnemoscope.detectors.repcs import RePCS
    from mnemoscope.pipelines.crm.eval import CRMEvalConfig
    from mnemoscope.pipelines.crm.extract import CRMExtractConfig, extract, load_folder
    from mnemoscope.pipelines.crm.run import fit_crm

    c = config or CalibrationConfig()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    use_l1 = "l1" in c.levels
    tdir = Path(traces_dir) if traces_dir is not None else out / "traces"
    ex_cfg = CRMExtractConfig(
        template=c.template,
        task=c.task,  # type: ignore[arg-type]
        chat=c.chat,
        max_new_tokens=c.max_new_tokens,
        batch_size=c.batch_size,
        attention_flow=False,
        static=False,
        logit_lens=False,
        gradient_norm=False,
        embedder=c.embedder if use_l1 else "none",
    ).resolved(lm)
    summary = extract(
        lm, records, tdir, ex_cfg, input_errors=input_errors, overwrite=overwrite, progress=progress
    )
    folder = load_folder(tdir, keep_without=False)
    data, pairs = folder.data, folder.pairs
    n = len(data)
    if n < 4:
        raise InputError(f"calibration needs at least 4 traced records, got {n}")
    labels = data.labels
    clean = np.ones(n, bool) if labels is None else labels == 0
    n_clean = int(clean.sum())
    if n_clean < 2:
        raise InputError(
            f"calibration needs at least 2 clean records (label 0, or unlabelled input); got {n_clean}",
            field="label",
        )
    two_classes = labels is not None and len(np.unique(labels)) == 2
    kind = c.classifier
    if kind == "auto":
        kind = "lr" if two_classes else "none"
    if kind != "none" and not two_classes:
        raise InputError(
            f"a {kind} classifier needs records of both labels (0 = clean, 1 = from memory)", field="label"
        )

    # held-out clean records set the anomaly threshold; the rest fit directions and mu/sigma
    rng = np.random.default_rng(c.seed)
    clean_idx = np.flatnonzero(clean)
    n_hold = round(c.threshold_fraction * n_clean) if c.rule == "calibrated" else 0
    n_hold = min(n_hold, n_clean - 2)
    hold = np.sort(rng.permutation(clean_idx)[:n_hold]) if n_hold > 0 else np.array([], int)
    fit_mask = np.ones(n, bool)
    fit_mask[hold] = False
    if kind != "none" and len(np.unique(np.asarray(data.labels)[fit_mask])) < 2:
        raise InputError("after holding out clean records for the threshold only one label is left")
    crm = fit_crm(
        replace(folder, data=data.subset(fit_mask)),
        classifier=kind,
        eval_config=CRMEvalConfig(
            direction=c.direction, variance_threshold=c.variance_threshold, seed=c.seed
        ),
        levels=c.levels,
        cv=False,
    )
    # anomaly reference: the clean fit records
    fit_clean = clean & fit_mask
    lts_clean = crm.lts(data.disp[fit_clean])
    crm.lts_mean = lts_clean.mean(0)
    crm.lts_std = lts_clean.std(0, ddof=1) if len(lts_clean) > 1 else np.ones(lts_clean.shape[1])
    threshold: float | None = None
    if c.rule == "calibrated" and len(hold):
        scores = [crm.anomaly(lts, c.k_sigma)[2] for lts in crm.lts(data.disp[hold])]
        threshold = conformal_upper(scores, c.alpha)
    rule = AnomalyRule(
        k_sigma=c.k_sigma,
        rule=c.rule,
        alpha=c.alpha,
        score_threshold=None if threshold is None or math.isinf(threshold) else threshold,
        n_threshold=len(hold),
    )
    save_crm(crm, out / "crm.npz")

    repcs = RePCS(alpha=c.repcs_alpha, max_steps=c.max_new_tokens)
    repcs.fit(pairs, None if labels is None else labels)
    rec = repcs.calibration_record()
    crm_oof = None
    if "crm_probability" in c.verdict_candidates and kind != "none":
        crm_oof = oof_crm_probability(folder, kind, c)
    margin, verdict = fit_verdict(lm, pairs, labels, repcs, c, crm_oof)

    header: dict[str, Any] = {
        "format": PROFILE_FORMAT,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "model": lm.info.to_dict(),
        "prompt": ex_cfg.pair_config().builder.to_dict(),
        "max_new_tokens": c.max_new_tokens,
        "config": asdict(c),
        "crm": {
            "file": "crm.npz",
            "content_hash": crm.content_hash,
            "classifier": crm.classifier,
            "levels": list(c.levels),
            "layers": crm.layers.tolist(),
        },
        "anomaly": {
            **asdict(rule),
            "threshold_note": (
                "conformal upper quantile of held-out clean scores"
                if rule.score_threshold is not None
                else (
                    "paper rule: any flagged layer"
                    if c.rule == "paper"
                    else f"too few held-out clean records ({len(hold)}) for alpha={c.alpha}; "
                    "falls back to the paper rule (any flagged layer)"
                )
            ),
        },
        "repcs": rec,
        "token_attribution": {
            "margin": margin,
            "quantile": c.token_margin_quantile,
            "note": "a word is context-supported when log p(word | c, q) - log p(word | q) exceeds the margin",
        },
        "verdict": None if verdict is None else verdict.to_dict(),
        "data": {
            "sha256": data_hash(records),
            "n_records": len(records) + len(input_errors),
            "n_traced": n,
            "n_clean": n_clean,
            "n_memory": None if labels is None else int((labels == 1).sum()),
            "n_errors": summary.get("n_errors", 0),
        },
    }
    header["profile_hash"] = profile_hash(header, (out / "crm.npz").read_bytes())
    atomic_write(out / "profile.json", json.dumps(header, indent=1, default=str))
    return load_profile(out, model=lm.info)


def oof_crm_probability(folder: Any, kind: str, c: CalibrationConfig, n_splits: int = 5) -> np.ndarray:
    """CRM's classifier probability for every calibration record, each from a CRM fitted without it.

    The verdict model may only combine a fitted signal measured out of fold: an in-sample
    probability would look better than it is on new requests.
    """
    from sklearn.model_selection import StratifiedKFold

    from mnemoscope.pipelines.crm.eval import CRMEvalConfig
    from mnemoscope.pipelines.crm.run import fit_crm

    data = folder.data
    y = np.asarray(data.labels)
    oof = np.zeros(len(y))
    for tr, te in StratifiedKFold(n_splits, shuffle=True, random_state=c.seed).split(np.zeros(len(y)), y):
        m = fit_crm(
            replace(folder, data=data.subset(tr)),
            classifier=kind,
            eval_config=CRMEvalConfig(
                direction=c.direction, variance_threshold=c.variance_threshold, seed=c.seed
            ),
            levels=c.levels,
            cv=False,
        )
        oof[te] = m.predict_proba(data.subset(te))
    return oof


def token_margin(
    pairs: Sequence[Any],
    pieces: Sequence[Sequence[str]],
    labels: Sequence[int] | np.ndarray | None,
    quantile: float,
) -> float:
    """The token-attribution margin: the ``quantile`` of content-word PMI on the memorized
    (label 1) answers with a non-empty context (:func:`~mnemoscope.features.attribution.calibrate_margin`)."""
    from mnemoscope.features.attribution import calibrate_margin, content_word_pmis

    mem_pmis = [
        content_word_pmis(
            pc, np.asarray(t.logprob_answer_with) - np.asarray(t.logprob_answer_without), t.query
        )
        for t, pc, lab in zip(
            pairs, pieces, labels if labels is not None else [None] * len(pairs), strict=True
        )
        if lab == 1 and not t.identical_prompts
    ]
    return calibrate_margin(np.concatenate(mem_pmis) if mem_pmis else [], quantile)


def fit_verdict(
    lm: Any,
    pairs: Sequence[Any],
    labels: np.ndarray | None,
    repcs: Any,
    c: CalibrationConfig,
    crm_oof: np.ndarray | None = None,
    pieces: Sequence[Sequence[str]] | None = None,
) -> tuple[float, VerdictModel | None]:
    """The token margin (from memorized answers) and the verdict model (needs both labels).

    ``pieces``: each answer's token texts (default: decoded by ``lm.tokenizer``; the endpoint
    backend passes the server's, with ``lm=None``).
    """
    if pieces is None:
        pieces = [answer_pieces(lm.tokenizer, t.answer_ids) for t in pairs]
    margin = token_margin(pairs, pieces, labels, c.token_margin_quantile)
    if labels is None or len(np.unique(labels)) < 2:
        return margin, None
    keep = [i for i, t in enumerate(pairs) if not t.identical_prompts]
    rows = [trace_signals(pairs[i], pieces[i], margin=margin, repcs=repcs)[0] for i in keep]
    if crm_oof is not None:
        for r, i in zip(rows, keep, strict=True):
            r["crm_probability"] = float(crm_oof[i])
    cands = tuple(k for k in c.verdict_candidates if k in rows[0])
    if len(cands) < len(c.verdict_candidates):
        log.warning(
            "verdict candidates %s are not measured in this calibration (no CRM classifier?); combining %s",
            sorted(set(c.verdict_candidates) - set(cands)),
            list(cands),
        )
    signals = {k: np.array([r[k] for r in rows]) for k in cands}
    verdict = VerdictModel(
        candidates=cands,
        alpha=c.verdict_alpha,
        conformal_fraction=c.conformal_fraction,
        seed=c.seed,
    ).fit(signals, np.asarray(labels)[keep])
    return margin, verdict
