"""Statistics for detector evaluation: metrics, resampling inference, cross-validation.

Pure numpy/scipy/scikit-learn; every function that draws random numbers takes
``rng: np.random.Generator | int | None`` (or ``seed`` for CV) and results are frozen
dataclasses. Label 1 is the flagged condition; higher scores mean more likely 1.

Metrics that need both classes (ROC-AUC, operating points) return ``None`` (or an
:class:`Estimate` with ``estimate=None`` and a ``reason``) for a single class, or raise
:class:`~mnemoscope.errors.InputError` with ``strict=True``. Invalid input always raises
:class:`~mnemoscope.errors.InputError`.
"""

from __future__ import annotations

from mnemoscope.stats.cv import (
    PROTOCOL_LEAKAGE_FREE,
    PROTOCOL_PAPER,
    CVResult,
    calibration_split,
    cross_val_scores,
    paper_protocol_cv,
)
from mnemoscope.stats.metrics import (
    Estimate,
    ThresholdMetrics,
    auc_ci,
    fpr_at_tpr,
    precision_at_k,
    roc_auc,
    roc_curve,
    summarize,
    threshold_metrics,
    tpr_at_fpr,
    undefined_reason,
)
from mnemoscope.stats.resampling import (
    PermutationResult,
    bh_adjust,
    bh_reject,
    bootstrap_ci,
    permutation_pvalues,
    permutation_test_auc,
)

__all__ = [
    "PROTOCOL_LEAKAGE_FREE",
    "PROTOCOL_PAPER",
    "CVResult",
    "Estimate",
    "PermutationResult",
    "ThresholdMetrics",
    "auc_ci",
    "bh_adjust",
    "bh_reject",
    "bootstrap_ci",
    "calibration_split",
    "cross_val_scores",
    "fpr_at_tpr",
    "paper_protocol_cv",
    "permutation_pvalues",
    "permutation_test_auc",
    "precision_at_k",
    "roc_auc",
    "roc_curve",
    "summarize",
    "threshold_metrics",
    "tpr_at_fpr",
    "undefined_reason",
]
