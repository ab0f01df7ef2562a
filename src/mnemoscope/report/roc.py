"""ROC curves of several methods, one panel per model/sibling."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["roc_figure"]


def roc_figure(panels: Mapping[str, Mapping[str, tuple[np.ndarray, np.ndarray]]], *, title: str = "") -> Any:
    """Draw ROC curves.

    Args:
        panels: ``{panel title: {method: (scores, labels)}}``; scores oriented higher = positive.
        title: figure title.

    Returns:
        a matplotlib Figure (not saved, not shown).
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from sklearn.metrics import roc_auc_score, roc_curve

    n = max(1, len(panels))
    fig, axes = plt.subplots(1, n, figsize=(4.6 * n, 4.4), squeeze=False)
    for ax, (panel, methods) in zip(axes[0], panels.items(), strict=False):
        for method, (scores, labels) in methods.items():
            labels = np.asarray(labels)
            if len(np.unique(labels)) < 2:
                continue
            fpr, tpr, _ = roc_curve(labels, scores)
            ax.plot(fpr, tpr, lw=1.4, label=f"{method} ({roc_auc_score(labels, scores):.3f})")
        ax.plot([0, 1], [0, 1], ls=":", color="grey", lw=1)
        ax.set_xscale("linear")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("false positive rate")
        ax.set_ylabel("true positive rate")
        ax.set_title(panel, fontsize=10)
        ax.legend(fontsize=7, loc="lower right")
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig
