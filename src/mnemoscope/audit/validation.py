"""A profile's validation card: the held-out split, the card's figures, and whether the profile is fit to use.

``mnemoscope calibrate`` splits the verified items by fact (grouped, stratified by the verified
label, seeded; :func:`split_by_fact`): the calibration part fits the profile (the verdict model
certifies its conformal threshold on clean answers it does not fit on), the held-out part is
audited with the finished profile (:class:`~mnemoscope.audit.auditor.Auditor`, no model call:
the calibration traces are scored) and each held-out audit is stored as one row of
``held_out.jsonl`` next to ``profile.json`` (:func:`held_out_row`: the verified truth, p_memory,
the memory flag and the per-token attribution). :func:`validation_from_rows` computes the card
(``validation.json``) from those rows alone, so a test (or a reader) can recompute every figure;
the three-way source is re-decided from the stored tokens by the current source decision
(:func:`source_of_row`), never copied.

:func:`profile_status` is the one decision on whether a profile is fit to back a guarantee:
a profile whose held-out p_memory AUC CI reaches below :data:`AUC_CI_FLOOR`, whose held-out
set has fewer than :data:`MIN_HELD_OUT_PER_CLASS` answers of a class, whose verdict is not
certified at its alpha (too few clean calibration answers), or that has no held-out validation
at all is marked; every audit it backs says so (``Auditor`` adds the status to the
guarantee and a note).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mnemoscope.errors import InputError

__all__ = [
    "AUC_CI_FLOOR",
    "HELD_OUT_FILE",
    "MIN_HELD_OUT_PER_CLASS",
    "binomial_ci",
    "held_out_row",
    "profile_status",
    "read_held_out",
    "source_of_row",
    "split_by_fact",
    "validation_from_rows",
    "write_validation",
]

#: a profile whose held-out AUC CI lower bound is below this is marked
AUC_CI_FLOOR = 0.8
#: ... and one with fewer held-out answers of a class than this (its bootstrap CI says little)
MIN_HELD_OUT_PER_CLASS = 10
HELD_OUT_FILE = "held_out.jsonl"
_SOURCES = ("context", "memory", "mixed", "unsupported", "undetermined")


def split_by_fact(
    labels: Sequence[int | None], groups: Sequence[str], *, seed: int, fraction: float
) -> tuple[np.ndarray, np.ndarray]:
    """Indices ``(calibration, held_out)``: whole facts (``groups``) go to one side, stratified by
    label, seeded (``StratifiedGroupKFold``, the first of ``round(1 / fraction)`` folds held out).

    Returns an empty held-out part when ``fraction`` is 0 or a class has fewer facts than folds.
    """
    from sklearn.model_selection import StratifiedGroupKFold

    y = np.asarray(labels, int)
    g = np.asarray(groups, str)
    idx = np.arange(len(y))
    if fraction <= 0 or len(y) == 0:
        return idx, np.array([], int)
    n_splits = max(2, round(1 / fraction))
    for c in (0, 1):
        if len(set(g[y == c])) < n_splits:
            return idx, np.array([], int)
    tr, te = next(StratifiedGroupKFold(n_splits, shuffle=True, random_state=seed).split(idx, y, g))
    return np.sort(tr), np.sort(te)


def binomial_ci(k: int, n: int, confidence: float = 0.95) -> tuple[float | None, float | None]:
    """Clopper-Pearson interval of a rate ``k / n`` (``(None, None)`` when ``n == 0``).

    Example:
        >>> lo, hi = binomial_ci(1, 33)
        >>> round(lo, 4), round(hi, 4)
        (0.0008, 0.1576)
    """
    from scipy.stats import beta

    if n <= 0:
        return None, None
    a = 1 - confidence
    lo = 0.0 if k == 0 else float(beta.ppf(a / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a / 2, k + 1, n - k))
    return lo, hi


def held_out_row(
    decision: Any,
    audit: Mapping[str, Any],
    *,
    context: str = "",
    query: str = "",
    gold: Sequence[str] = (),
) -> dict[str, Any]:
    """One stored held-out result: the item (context, query, what a right answer states:
    ``gold``), its verified truth and its audit (``AuditResult.to_dict()``)."""
    keep = (
        "p_memory",
        "memory_flag",
        "source",
        "answer",
        "tokens",
        "spans",
        "identical_prompts",
        "n_steps",
    )
    return {
        "id": decision.id,
        "kind": decision.kind,
        "label": decision.label,
        "truth": decision.truth,
        "context": context,
        "query": query,
        "gold": list(gold),
        **{k: audit.get(k) for k in keep},
        "evidence": {
            k: (audit.get("evidence") or {}).get(k)
            for k in ("repcs_z", "closed_book_logprob", "context_token_fraction", "signals")
        },
        # the answer-bearing words the three-way source is decided on (profiles whose source rule
        # is ``facts``; absent for older ones)
        **(
            {"answer_words": (audit.get("evidence") or {}).get("answer_words")}
            if (audit.get("evidence") or {}).get("answer_words") is not None
            else {}
        ),
    }


def answer_is_clear(row: Mapping[str, Any]) -> bool | None:
    """Whether a held-out answer's truth is clear-cut: every content word it writes (a name,
    number or term: :func:`~mnemoscope.features.attribution.content_word`) is said by the context,
    the query or the expected answer (``gold``). An answer that adds other content (an invented
    date, a second fact) mixes in something the label does not describe, so ``mixed`` may be right
    for it. ``None`` when the row does not store ``gold`` (rows written before it was stored).

    Decided from the texts and the expected answer only, never from the attribution being scored.
    """
    import re

    from mnemoscope.features.attribution import content_word, query_terms, supported_by

    gold = row.get("gold")
    if not gold:
        return None
    q = query_terms(str(row.get("query") or ""))
    known = query_terms(
        " ".join([str(row.get("context") or ""), str(row.get("query") or ""), *map(str, gold)])
    )
    for w in re.findall(r"[^\s]+", str(row.get("answer") or "")):
        w = w.strip(".,;:!?()[]{}\"'`")
        if w and content_word(w, q) and not supported_by(w, known):
            return False
    return True


def source_of_row(row: Mapping[str, Any]) -> str:
    """The three-way source of a stored held-out row, decided now by the audit's own source
    decision (:func:`mnemoscope.audit.verdict.decide_source`) from the stored per-token
    attribution (and the query and context, when the decision reads them)."""
    import inspect

    from mnemoscope.audit.verdict import decide_source
    from mnemoscope.features import attribution as attr

    def build(cls: Any, d: Mapping[str, Any]) -> Any:
        names = list(inspect.signature(cls).parameters)
        return cls(**{k: d.get(k, d.get("pmi") if k == "word_pmi" else None) for k in names})

    params = inspect.signature(decide_source).parameters
    kw: dict[str, Any] = {
        "identical_prompts": bool(row.get("identical_prompts")),
        "answer": str(row.get("answer") or ""),
        "memory_flag": bool(row.get("memory_flag")),
        "p_memory": row.get("p_memory"),
        "spans": [build(attr.Span, s) for s in row.get("spans") or []],
        "query": str(row.get("query") or ""),
        "context": str(row.get("context") or ""),
    }
    if "tokens" in params and row.get("tokens") is not None:
        kw["tokens"] = [build(attr.TokenAttribution, t) for t in row["tokens"]]
    if "facts" in params and row.get("answer_words") is not None:
        from mnemoscope.features.facts import AnswerFacts

        kw["facts"] = AnswerFacts.from_dict(row["answer_words"])
    source, _ = decide_source(**{k: v for k, v in kw.items() if k in params})
    return str(source)


def validation_from_rows(
    rows: Sequence[Mapping[str, Any]],
    *,
    alpha: float,
    n_resamples: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """The card's held-out figures from the stored rows alone (module doc).

    * ``auc``: ROC-AUC of p_memory, verified memory (1) vs context (0), with a 95 %
      stratified-bootstrap CI (:func:`mnemoscope.stats.auc_ci`);
    * ``false_flag_rate``: context answers whose memory flag fired, with its Clopper-Pearson CI,
      next to ``alpha``; ``false_flags_by_kind``: the same per item kind (the guarantee is
      marginal over the calibration's mix of kinds); ``memory_recall``: memory answers flagged;
    * ``confusion``: truth -> three-way source -> count (the source re-decided now), overall and
      per item kind; ``accuracy_3way``: the share whose source equals the truth.
    """
    from mnemoscope.stats import auc_ci

    rows = [r for r in rows if r.get("truth") in ("memory", "context")]
    y = np.array([1 if r["truth"] == "memory" else 0 for r in rows], int)
    flag = np.array([bool(r.get("memory_flag")) for r in rows], bool)
    src = [source_of_row(r) for r in rows]
    n_mem, n_ctx = int((y == 1).sum()), int((y == 0).sum())
    pm = [r.get("p_memory") for r in rows]
    auc: dict[str, Any] | str = "not measured"
    if rows and all(p is not None for p in pm) and n_mem and n_ctx:
        e = auc_ci(np.asarray(pm, float), y, n_resamples=n_resamples, rng=seed)
        auc = {
            "score": "p_memory",
            "estimate": e.estimate,
            "ci": [e.ci_low, e.ci_high],
            "method": f"ROC-AUC of p_memory, memory (1) vs context-needed (0); 95% stratified-bootstrap "
            f"percentile CI, {n_resamples} resamples (stats.auc_ci, seed {seed})",
        }
    ff = int(flag[y == 0].sum())
    caught = int(flag[y == 1].sum())
    confusion = {
        truth: dict(Counter(s for s, r in zip(src, rows, strict=True) if r["truth"] == truth))
        for truth in ("memory", "context")
    }
    by_kind: dict[str, dict[str, dict[str, int]]] = {}
    for s, r in zip(src, rows, strict=True):
        k = by_kind.setdefault(str(r.get("kind")), {})
        t = k.setdefault(r["truth"], {})
        t[s] = t.get(s, 0) + 1
    right = sum(s == r["truth"] for s, r in zip(src, rows, strict=True))
    clear = [answer_is_clear(r) for r in rows]
    n_clear = sum(c is True for c in clear)
    right_clear = sum(c is True and s == r["truth"] for c, s, r in zip(clear, src, rows, strict=True))
    lo, hi = binomial_ci(ff, n_ctx)
    # the guarantee is marginal over the calibration's mix of context-needed answers: per kind
    # (invented facts, followed knowledge conflicts) the rates can differ, and an app whose
    # context-needed answers are mostly of one kind sees that kind's rate
    ff_kind: dict[str, dict[str, Any]] = {}
    for kind in sorted({str(r.get("kind")) for r in rows}):
        m = np.array([str(r.get("kind")) == kind and r["truth"] == "context" for r in rows], bool)
        if m.any():
            k_lo, k_hi = binomial_ci(int(flag[m].sum()), int(m.sum()))
            ff_kind[kind] = {
                "flagged": int(flag[m].sum()),
                "n": int(m.sum()),
                "rate": float(flag[m].mean()),
                "ci": [k_lo, k_hi],
            }
    return {
        "held_out": {
            "n": len(rows),
            "n_memory": n_mem,
            "n_context": n_ctx,
            "by_kind": dict(Counter(str(r.get("kind")) for r in rows)),
        },
        "auc": auc,
        "alpha": alpha,
        "false_flag_rate": ff / n_ctx if n_ctx else None,
        "false_flags": ff,
        "false_flag_ci": [lo, hi],
        "false_flag_within_alpha": None if lo is None else bool(lo <= alpha),
        "false_flags_by_kind": ff_kind,
        "memory_recall": caught / n_mem if n_mem else None,
        "memory_caught": caught,
        "accuracy_3way": right / len(rows) if rows else None,
        "accuracy_3way_clear": (right_clear / n_clear) if n_clear else None,
        "n_clear": n_clear if any(c is not None for c in clear) else None,
        "confusion": confusion,
        "confusion_by_kind": by_kind,
    }


def read_held_out(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a profile's ``held_out.jsonl`` (a profile folder or the file).

    Raises:
        InputError: the file is missing or a line is not JSON (naming the line).
    """
    p = Path(path)
    if p.is_dir():
        p = p / HELD_OUT_FILE
    if not p.is_file():
        raise InputError(f"{p} not found: the profile stores no held-out results", field="held_out")
    rows = []
    for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise InputError(f"{p}: line {i} is not JSON ({e.msg})", field="held_out") from e
    return rows


def profile_status(profile: Any) -> dict[str, Any]:
    """Is the profile fit to back a guarantee? The one decision (module doc).

    Returns ``{"ok": bool, "status": "validated" | "marked", "reasons": [...], "summary": str}``
    from the verdict's certification (``profile.verdict``) and the held-out card
    (``profile.validation``: the ``validation.json`` that matches the profile's hash, or ``None``).
    """
    reasons: list[str] = []
    v = getattr(profile, "verdict", None)
    if v is not None and not bool(getattr(v, "certified_", False)):
        reasons.append(f"not certified at alpha={v.alpha:g}: {v.uncertified_reason()}")
    val = getattr(profile, "validation", None)
    auc = (val or {}).get("auc") if isinstance(val, Mapping) else None
    summary = ""
    if not isinstance(val, Mapping) or val.get("status") == "not measured":
        reasons.append("no held-out validation (validation.json) recorded with this profile")
    elif not isinstance(auc, Mapping) or not isinstance(auc.get("estimate"), (int, float)):
        reasons.append("held-out AUC not measured (too few held-out answers of a class)")
    else:
        ci = auc.get("ci") or [None, None]
        low = ci[0]
        summary = f"held-out AUC {auc['estimate']:.3f} [{_f(low)}, {_f(ci[1])}]"
        held = val.get("held_out") or {}
        if isinstance(held, Mapping) and held.get("n") is not None:
            summary += f" on {held.get('n')} answers"
        ffr = val.get("false_flag_rate")
        if isinstance(ffr, (int, float)):
            summary += f", false-flag {ffr:.3f} vs alpha {val.get('alpha')}"
        rec = val.get("memory_recall")
        if isinstance(rec, (int, float)):
            summary += f", memory recall {rec:.2f}"
        if low is None or (isinstance(low, float) and math.isnan(low)) or float(low) < AUC_CI_FLOOR:
            reasons.append(f"held-out AUC CI lower bound {_f(low)} is below {AUC_CI_FLOOR}")
        small = {
            c: held.get(f"n_{c}")
            for c in ("memory", "context")
            if isinstance(held, Mapping)
            and isinstance(held.get(f"n_{c}"), int)
            and held[f"n_{c}"] < MIN_HELD_OUT_PER_CLASS
        }
        if small:
            reasons.append(
                "held-out set too small to validate: "
                + ", ".join(f"{n} {c} answers" for c, n in small.items())
                + f" (at least {MIN_HELD_OUT_PER_CLASS} of each)"
            )
        if val.get("false_flag_within_alpha") is False:
            fci = val.get("false_flag_ci") or [None, None]
            reasons.append(
                f"held-out false-flag rate {_f(ffr)} [{_f(fci[0])}, {_f(fci[1])}] is above alpha "
                f"{val.get('alpha')}: the guarantee did not hold on held-out answers"
            )
    ok = not reasons
    return {
        "ok": ok,
        "status": "validated" if ok else "marked",
        "reasons": reasons,
        "summary": summary or "not validated",
    }


def _f(x: Any) -> str:
    return "n/a" if not isinstance(x, (int, float)) else f"{x:.3f}"


def write_validation(
    out: str | Path,
    profile: Any,
    rows: Sequence[Mapping[str, Any]],
    *,
    labels: Mapping[str, Any],
    split: Mapping[str, Any],
    calibration_seconds: float,
    audit_seconds: float | None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``held_out.jsonl`` and ``validation.json`` next to a fitted profile; return the card.

    ``rows``: :func:`held_out_row` per held-out answer; ``labels``: the label check's summary;
    ``split``: how the items were split; ``audit_seconds``: measured wall seconds per audited
    answer (``None``: not measured).
    """
    from mnemoscope.io import atomic_write
    from mnemoscope.provenance import provenance
    from mnemoscope.report.profile_card import VALIDATION_FORMAT

    outp = Path(out)
    atomic_write(
        outp / HELD_OUT_FILE,
        "".join(json.dumps(r, ensure_ascii=False, default=float) + "\n" for r in rows),
    )
    header = profile.header
    alpha = (
        profile.verdict.alpha
        if profile.verdict is not None
        else float(header["config"].get("verdict_alpha", 0.05))
    )
    figures = (
        validation_from_rows(rows, alpha=alpha)
        if rows
        else {"status": "not measured", "reason": "no held-out part (too few facts per class to split)"}
    )
    prov = provenance()
    card = {
        "format": VALIDATION_FORMAT,
        "profile_hash": profile.content_hash,
        "model": {k: (header.get("model") or {}).get(k) for k in ("name", "spec", "fingerprint")},
        "data": {
            k: (header.get("data") or {}).get(k)
            for k in ("sha256", "n_records", "n_traced", "n_traces_reused", "source")
        },
        "labels": dict(labels),
        "split": dict(split),
        **figures,
        "calibration_seconds": round(calibration_seconds, 1),
        "audit_seconds": None if audit_seconds is None else round(audit_seconds, 3),
        "audit_seconds_note": "wall seconds per answer of Auditor.audit (generation + scoring) on a sample "
        "of held-out items; the held-out figures score the calibration traces (no second generation)",
        **dict(extra or {}),
        "provenance": {
            "command": prov.get("command"),
            "git_commit": prov.get("git_commit"),
            "git_dirty": prov.get("git_dirty"),
            "time": prov.get("created"),
            "machine": prov.get("machine"),
            "threads": _threads(),
            "source": HELD_OUT_FILE,
            "written_by": "mnemoscope calibrate (pipelines.validation.write_validation)",
        },
    }
    card["profile_status"] = profile_status(_WithValidation(profile, card))
    atomic_write(outp / "validation.json", json.dumps(card, indent=1, default=float) + "\n")
    return card


def _threads() -> int | None:
    try:
        import torch

        return int(torch.get_num_threads())
    except ImportError:  # pragma: no cover - torch is a dependency
        return None


class _WithValidation:
    """A profile seen with a validation card that is not on disk yet."""

    def __init__(self, profile: Any, card: Mapping[str, Any]):
        self.verdict = profile.verdict
        self.validation = card
