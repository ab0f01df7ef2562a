"""Markdown tables of leaderboard entries."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["leaderboard_markdown"]


def _fmt(x: Any, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _auc(e: dict[str, Any], key: str = "roc_auc", ci_key: str = "roc_auc_ci") -> str:
    if e.get(key) is None:
        return "n/a"
    ci = e.get(ci_key) or [None, None]
    return f"{e[key]:.3f} [{_fmt(ci[0])}, {_fmt(ci[1])}]"


def _model(e: dict[str, Any]) -> str:
    model, sibling = e.get("model"), e.get("sibling", "")
    if not model:
        return str(sibling)
    return str(model) if sibling in ("", "base", model) else f"{model} + {sibling}"


def leaderboard_markdown(entries: Sequence[dict[str, Any]]) -> str:
    """One row per (model, method): AUC [95% CI], the best blind baseline's AUC on the same
    texts (when measured), TPR@1%FPR, TPR@5%FPR, n. Blind baselines are marked "(text only)"."""
    with_blind = any(e.get("blind_roc_auc") is not None for e in entries)
    head = "| model | method | ROC-AUC [95% CI] |" + (" best blind AUC (text only) |" if with_blind else "")
    lines = [
        head + " TPR@1%FPR | TPR@5%FPR | n (pos/neg) |",
        "|---|---|---|" + ("---|" if with_blind else "") + "---|---|---|",
    ]
    for e in entries:
        if e.get("status") == "not measured":
            auc = f"not measured ({e.get('reason')})"
        else:
            auc = _auc(e) + (f" ({e['reason']})" if e.get("reason") else "")
        method = f"{e['method']} (text only)" if e.get("blind") else str(e["method"])
        blind = ""
        if with_blind:
            blind = (
                f" {_auc(e, 'blind_roc_auc', 'blind_roc_auc_ci')} ({e.get('blind_method')}) |"
                if e.get("blind_roc_auc") is not None
                else " |"
            )
        lines.append(
            f"| {_model(e)} | {method} | {auc} |{blind} {_fmt(e.get('tpr_at_1pct_fpr'))} "
            f"| {_fmt(e.get('tpr_at_5pct_fpr'))} | {e.get('n')} ({e.get('n_pos')}/{e.get('n_neg')}) |"
        )
    return "\n".join(lines) + "\n"
