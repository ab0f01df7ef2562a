"""Markdown tables of leaderboard entries."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["leaderboard_markdown"]


def _fmt(x: Any, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def leaderboard_markdown(entries: Sequence[dict[str, Any]]) -> str:
    """One row per (sibling, method): AUC [95% CI], TPR@1%FPR, TPR@5%FPR, n."""
    lines = [
        "| model | method | ROC-AUC [95% CI] | TPR@1%FPR | TPR@5%FPR | n (pos/neg) |",
        "|---|---|---|---|---|---|",
    ]
    for e in entries:
        ci = e.get("roc_auc_ci") or [None, None]
        auc = "n/a" if e.get("roc_auc") is None else f"{e['roc_auc']:.3f} [{_fmt(ci[0])}, {_fmt(ci[1])}]"
        note = f" ({e['reason']})" if e.get("reason") else ""
        lines.append(
            f"| {e.get('sibling', '')} | {e['method']} | {auc}{note} | {_fmt(e.get('tpr_at_1pct_fpr'))} "
            f"| {_fmt(e.get('tpr_at_5pct_fpr'))} | {e.get('n')} ({e.get('n_pos')}/{e.get('n_neg')}) |"
        )
    return "\n".join(lines) + "\n"
