"""CRM in an audit profile: the :class:`~mnemoscope.audit.calibrate.SignalFitter` that fits CRM's
directions, classifier and anomaly rule during ``mnemoscope calibrate --with-crm``.

The calibration pipeline (:func:`mnemoscope.audit.calibrate.calibrate`) knows nothing of CRM: the
command line passes a :class:`CRMFitter` only when CRM is asked (``--with-crm``,
``--verdict-signals crm_probability``, a CRM option, or a profile for the ``crm-anomaly``
rule). The fitter reads the calibration part's traces (hidden states of both paths: it sets
``needs_hidden``) and returns the profile's ``crm`` and ``anomaly`` blocks, ``crm.npz``'s bytes and,
when ``crm_probability`` is a verdict candidate, CRM's probability per record and the verdict's
conformal set.

**The anomaly rule.** Held-out clean records set the score threshold (a conformal upper
quantile at ``alpha``); the rest fit the directions and the per-layer mean and spread of the
clean LTS. **CRM's probability as a verdict signal.** The verdict's conformal set is drawn first
and the CRM the audits use is fitted without it: its probability on those records is what a new
request gets, so the conformal threshold holds for audits; the verdict fits on out-of-fold
probabilities of the other records (:func:`oof_crm_probability`; docs/calibrate.md).
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from mnemoscope.audit.calibrate import FitInput, FitterResult, verdict_conformal_records
from mnemoscope.audit.profile import AnomalyRule, CalibrationConfig
from mnemoscope.errors import InputError
from mnemoscope.features.crm import crm_data_from_pairs
from mnemoscope.pipelines.crm.eval import CRMEvalConfig
from mnemoscope.pipelines.crm.extract import CRMFolder, run_embeddings
from mnemoscope.pipelines.crm.run import fit_crm
from mnemoscope.stats.conformal import conformal_upper

__all__ = ["CRMFitter", "crm_folder", "oof_crm_probability"]


def crm_folder(data: FitInput, config: CalibrationConfig, *, progress: bool = False) -> CRMFolder:
    """The calibration part as a :class:`~mnemoscope.pipelines.crm.extract.CRMFolder` (CRM's
    features from the traces' hidden states; Level-1 sentence embeddings of both answers,
    computed afresh under ``data.folder/embeddings``, when ``"l1"`` is in ``config.levels``)."""
    embeddings = None
    embedder = config.embedder if "l1" in config.levels else "none"
    if embedder != "none":
        edir = data.folder / "embeddings"
        for old in edir.glob("*.npz"):  # keyed by id only: stale once any pair was traced again
            old.unlink()
        path = run_embeddings(list(data.traces), edir, embedder, progress)
        assert path is not None
        with np.load(path, allow_pickle=False) as z:
            rows = {str(k): i for i, k in enumerate(z["ids"].tolist())}
            sel = [rows[t.id] for t in data.traces]
            embeddings = (z["with"][sel], z["without"][sel])
    crm_data = crm_data_from_pairs(data.traces, embeddings=embeddings, keep_without=False)
    if data.labels is not None:
        crm_data = crm_data.with_labels(data.labels)
    return CRMFolder(
        data=crm_data,
        pairs=list(data.traces),
        token_stats=None,
        meta={"model": data.model, "settings": {**data.settings, "embedder": embedder}},
    )


def _eval_config(c: CalibrationConfig) -> CRMEvalConfig:
    return CRMEvalConfig(direction=c.direction, variance_threshold=c.variance_threshold, seed=c.seed)


def oof_crm_probability(folder: Any, kind: str, c: CalibrationConfig, n_splits: int = 5) -> np.ndarray:
    """CRM's classifier probability for every record of ``folder``, each from a CRM fitted without it.

    The verdict model may only combine a fitted signal measured out of fold: an in-sample
    probability would look better than it is on new requests.
    """
    from sklearn.model_selection import StratifiedKFold

    data = folder.data
    y = np.asarray(data.labels)
    oof = np.zeros(len(y))
    for tr, te in StratifiedKFold(n_splits, shuffle=True, random_state=c.seed).split(np.zeros(len(y)), y):
        m = fit_crm(
            replace(folder, data=data.subset(tr)),
            classifier=kind,
            eval_config=_eval_config(c),
            levels=c.levels,
            cv=False,
        )
        oof[te] = m.predict_proba(data.subset(te))
    return oof


@dataclass(frozen=True)
class CRMFitter:
    """Fits CRM + its anomaly rule for an audit profile (module doc)."""

    needs_hidden: bool = True
    progress: bool = False

    def fit(self, data: FitInput, config: CalibrationConfig) -> FitterResult:
        """The header's ``crm`` and ``anomaly`` blocks, ``crm.npz``, and (with ``crm_probability``
        a verdict candidate) CRM's probability per record and the verdict's conformal set."""
        from mnemoscope.detectors.crm_artifact import save_crm

        c = config
        folder = crm_folder(data, c, progress=self.progress)
        crm_data = folder.data
        n = len(crm_data)
        labels = crm_data.labels
        clean = np.ones(n, bool) if labels is None else labels == 0
        two_classes = labels is not None and len(np.unique(labels)) == 2
        kind = c.classifier
        if kind == "auto":
            kind = "lr" if two_classes else "none"
        if kind != "none" and not two_classes:
            raise InputError(
                f"a {kind} classifier needs records of both labels (0 = clean, 1 = from memory)",
                field="label",
            )
        crm_signal = "crm_probability" in c.verdict_candidates and kind != "none" and labels is not None
        conf_records = (
            verdict_conformal_records(folder.pairs, np.asarray(labels), c, data.kinds) if crm_signal else None
        )
        # held-out clean records set the anomaly threshold; the rest fit directions and mu/sigma
        rng = np.random.default_rng(c.seed)
        clean_idx = np.flatnonzero(clean)
        n_clean = len(clean_idx)
        n_hold = round(c.threshold_fraction * n_clean) if c.rule == "calibrated" else 0
        n_hold = min(n_hold, n_clean - 2)
        hold = np.sort(rng.permutation(clean_idx)[:n_hold]) if n_hold > 0 else np.array([], int)
        if conf_records is not None and c.rule == "calibrated":
            hold = conf_records  # one held-out clean set for both thresholds: the CRM sees neither
        fit_mask = np.ones(n, bool)
        fit_mask[hold] = False
        if conf_records is not None:
            fit_mask[conf_records] = False
        if kind != "none" and len(np.unique(np.asarray(labels)[fit_mask])) < 2:
            raise InputError("after holding out clean records for the threshold only one label is left")
        crm = fit_crm(
            replace(folder, data=crm_data.subset(fit_mask)),
            classifier=kind,
            eval_config=_eval_config(c),
            levels=c.levels,
            cv=False,
        )
        # anomaly reference: the clean fit records
        lts_clean = crm.lts(crm_data.disp[clean & fit_mask])
        crm.lts_mean = lts_clean.mean(0)
        crm.lts_std = lts_clean.std(0, ddof=1) if len(lts_clean) > 1 else np.ones(lts_clean.shape[1])
        threshold: float | None = None
        if c.rule == "calibrated" and len(hold):
            scores = [crm.anomaly(lts, c.k_sigma)[2] for lts in crm.lts(crm_data.disp[hold])]
            threshold = conformal_upper(scores, c.alpha)
        rule = AnomalyRule(
            k_sigma=c.k_sigma,
            rule=c.rule,
            alpha=c.alpha,
            score_threshold=None if threshold is None or math.isinf(threshold) else threshold,
            n_threshold=len(hold),
        )
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "crm.npz"
            save_crm(crm, path)  # sets crm.content_hash
            crm_bytes = path.read_bytes()
        signals: dict[str, np.ndarray] = {}
        if conf_records is not None:
            # the verdict fits on out-of-fold probabilities of the records outside its conformal
            # set (CRMs that never see it) and certifies on the audits' own CRM
            prob = np.zeros(n)
            rest = np.setdiff1d(np.arange(n), conf_records)
            prob[rest] = oof_crm_probability(replace(folder, data=crm_data.subset(rest)), kind, c)
            if len(conf_records):
                prob[conf_records] = crm.predict_proba(crm_data.subset(conf_records))
            signals["crm_probability"] = prob
        header = {
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
        }
        return FitterResult(
            header=header, files={"crm.npz": crm_bytes}, signals=signals, conformal_records=conf_records
        )
