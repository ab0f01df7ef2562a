"""RADAR orchestration: prompts -> features (resumable) -> ensemble -> report.

Prompt records are JSONL ``{id, prompt, label?, category?}`` with label 1 = recall,
0 = reasoning (strings ``"recall"``/``"reasoning"`` are accepted). Features are appended to a
JSONL file one prompt at a time, so an interrupted run resumes where it stopped; a features
file written with another model or other settings is refused rather than mixed.

Every fitted step (scaler, models, thresholds of the baselines, the scores' standardisation)
sees training data only: the training file for train/test evaluation, the training folds in
cross-validation and in permutation importance.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from tqdm.auto import tqdm

from mnemoscope.data.records import parse_label
from mnemoscope.detectors.radar import RadarEnsemble
from mnemoscope.errors import InputError
from mnemoscope.features.radar import (
    FEATURE_NAMES,
    SURFACE_FEATURES,
    FeatureSet,
    RadarFeatureConfig,
    radar_features,
)
from mnemoscope.models.loader import LoadedModel
from mnemoscope.stats import auc_ci, bootstrap_ci, roc_auc
from mnemoscope.trace.interventions import RadarCaptureConfig, capture_radar

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "SHIPPED",
    "FeatureRow",
    "RadarPrompt",
    "contamination_auc",
    "cv_accuracy",
    "evaluate",
    "extract_features",
    "feature_matrix",
    "permutation_importance_cv",
    "rds_rci_figure",
    "read_prompts",
    "settings_dict",
    "shipped_path",
]

log = logging.getLogger(__name__)

SHIPPED = {"train": "radar_train.jsonl", "test": "radar_test.jsonl", "large": "radar_large.jsonl"}


@dataclass(frozen=True)
class RadarPrompt:
    id: str
    prompt: str
    label: int | None = None
    category: str | None = None
    line: int | None = None


@dataclass(frozen=True)
class FeatureRow:
    """Features of one prompt: ``values[set][name]`` for each computed feature set."""

    id: str
    prompt: str
    label: int | None
    category: str | None
    n_tokens: int
    final_confidence: float
    values: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_json(self, stamp: dict[str, Any]) -> str:
        d = {
            "id": self.id,
            "prompt": self.prompt,
            "label": self.label,
            "category": self.category,
            "n_tokens": self.n_tokens,
            "final_confidence": self.final_confidence,
            "features": self.values,
            **stamp,
        }
        return json.dumps(d)


def shipped_path(name: Literal["train", "test", "large"]) -> Path:
    """Path of a shipped prompt set."""
    if name not in SHIPPED:
        raise InputError(f"unknown shipped RADAR set {name!r}; choose one of {sorted(SHIPPED)}")
    return Path(str(resources.files("mnemoscope.bench") / "data" / SHIPPED[name]))


def read_prompts(path: str | Path, *, require_label: bool = False) -> list[RadarPrompt]:
    """Read and validate a prompts JSONL file (raises :class:`InputError` naming the line)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    out: list[RadarPrompt] = []
    seen: set[str] = set()
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}: not JSON ({e.msg})", record=f"line {n}") from None
        if not isinstance(obj, dict):
            raise InputError(f"{path}: a record must be a JSON object", record=f"line {n}")
        rid = obj.get("id", f"line-{n}")
        if not isinstance(rid, (str, int)) or isinstance(rid, bool):
            raise InputError(f"{path}: id must be a string or integer", record=f"line {n}", field="id")
        rid = str(rid)
        if rid in seen:
            raise InputError(f"{path}: duplicate id", record=rid, field="id")
        seen.add(rid)
        prompt = obj.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise InputError(f"{path}: prompt must be a non-empty string", record=rid, field="prompt")
        label = obj.get("label")
        if label is not None:
            label = parse_label(label, record=rid)
        elif require_label:
            raise InputError(
                f"{path}: label is required (1/recall or 0/reasoning)", record=rid, field="label"
            )
        cat = obj.get("category")
        out.append(RadarPrompt(rid, prompt, label, None if cat is None else str(cat), n))
    if not out:
        raise InputError(f"{path}: no records")
    return out


def settings_dict(capture: RadarCaptureConfig, features: RadarFeatureConfig) -> dict[str, Any]:
    f = features.to_dict()
    f.pop("feature_set")
    return {"capture": capture.to_dict(), "features": f}


def _stamp(lm: LoadedModel, settings: dict[str, Any]) -> dict[str, Any]:
    blob = json.dumps(settings, sort_keys=True).encode()
    return {"model_fingerprint": lm.info.fingerprint, "settings_hash": hashlib.sha256(blob).hexdigest()[:16]}


def _row_from_json(d: dict[str, Any]) -> FeatureRow:
    return FeatureRow(
        id=str(d["id"]),
        prompt=d["prompt"],
        label=d.get("label"),
        category=d.get("category"),
        n_tokens=int(d["n_tokens"]),
        final_confidence=float(d["final_confidence"]),
        values=d["features"],
    )


def extract_features(
    lm: LoadedModel,
    prompts: Sequence[RadarPrompt],
    out: str | Path | None = None,
    *,
    capture: RadarCaptureConfig | None = None,
    features: RadarFeatureConfig | None = None,
    batch_size: int = 8,
    on_error: Literal["skip", "raise"] = "raise",
    progress: bool = True,
) -> tuple[list[FeatureRow], list[dict[str, Any]]]:
    """Features of ``prompts`` (the paper set, and the measured set when ``capture.measured``).

    With ``out``, rows are appended to that JSONL file as they are computed and prompts whose
    id is already there are not recomputed (resume). Rows are returned in ``prompts`` order.

    Returns:
        ``(rows, errors)``; errors (``{"id", "message"}``) only with ``on_error="skip"``.
    """
    from mnemoscope.trace.tracer import Tracer

    capture = capture or RadarCaptureConfig()
    fcfg = features or RadarFeatureConfig()
    settings = settings_dict(capture, fcfg)
    stamp = _stamp(lm, settings)
    done: dict[str, FeatureRow] = {}
    path = Path(out) if out is not None else None
    if path is not None and path.is_file():
        for n, raw in enumerate(path.read_text().splitlines(), start=1):
            try:
                d = json.loads(raw)
            except json.JSONDecodeError:
                log.warning("%s line %d is torn (interrupted write); that prompt is redone", path, n)
                continue
            if (
                d.get("model_fingerprint") != stamp["model_fingerprint"]
                or d.get("settings_hash") != stamp["settings_hash"]
            ):
                raise InputError(
                    f"{path} holds features of another model or other settings; use another output file"
                )
            done[str(d["id"])] = _row_from_json(d)
    tracer = Tracer(lm, batch_size=batch_size)
    todo: list[RadarPrompt] = []
    errors: list[dict[str, Any]] = []
    for p in prompts:
        if p.id in done:
            continue
        try:
            if not p.prompt.strip():
                raise InputError("prompt is empty", record=p.id, field="prompt")
            tracer.check_length(len(tracer.encode(p.prompt)), record=p.id)
        except InputError as e:
            if on_error == "raise":
                raise
            errors.append({"id": p.id, "message": str(e)})
            continue
        todo.append(p)
    sets: list[FeatureSet] = ["paper", "measured"] if capture.measured else ["paper"]
    cfgs = {s: RadarFeatureConfig(**{**fcfg.to_dict(), "feature_set": s}) for s in sets}  # type: ignore[arg-type]
    fresh: dict[str, FeatureRow] = {}
    bar = tqdm(total=len(todo), desc=f"radar features ({lm.info.name})", unit="prompt", disable=not progress)
    fh = path.open("a") if path is not None else None
    try:
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        for start in range(0, len(todo), batch_size):
            chunk = todo[start : start + batch_size]
            traces = capture_radar(lm, [p.prompt for p in chunk], capture, batch_size=batch_size)
            for p, t in zip(chunk, traces, strict=True):
                row = FeatureRow(
                    id=p.id,
                    prompt=p.prompt,
                    label=p.label,
                    category=p.category,
                    n_tokens=t.n_tokens,
                    final_confidence=t.final_confidence,
                    values={s: radar_features(t, c) for s, c in cfgs.items()},
                )
                fresh[p.id] = row
                if fh is not None:
                    fh.write(row.to_json(stamp) + "\n")
                    fh.flush()
            bar.update(len(chunk))
    finally:
        bar.close()
        if fh is not None:
            fh.close()
    rows = []
    for p in prompts:
        found = fresh.get(p.id) or done.get(p.id)
        if found is None:
            continue
        row = found
        # labels and categories come from the prompt file, not from a stale features file
        rows.append(
            FeatureRow(
                row.id, row.prompt, p.label, p.category, row.n_tokens, row.final_confidence, row.values
            )
        )
    return rows, errors


def feature_matrix(
    rows: Sequence[FeatureRow], feature_set: FeatureSet = "paper", names: Sequence[str] = FEATURE_NAMES
) -> tuple[np.ndarray, np.ndarray]:
    """``(X [n, len(names)], y [n])``; ``y`` is -1 where a row has no label."""
    missing = [r.id for r in rows if feature_set not in r.values]
    if missing:
        raise InputError(
            f"{len(missing)} row(s) lack the '{feature_set}' feature set (first: {missing[0]}); "
            "re-extract with measured interventions"
        )
    X = np.array([[r.values[feature_set][n] for n in names] for r in rows], dtype=np.float64)
    y = np.array([-1 if r.label is None else r.label for r in rows], dtype=int)
    return X, y


# --------------------------------------------------------------------------- statistics


def _folds(y: np.ndarray, n_splits: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    from sklearn.model_selection import StratifiedKFold

    if min(int((y == 0).sum()), int((y == 1).sum())) < n_splits:
        raise InputError(f"cross-validation with {n_splits} folds needs >= {n_splits} prompts of each label")
    skf = StratifiedKFold(n_splits=n_splits, shuffle=True, random_state=seed)
    return list(skf.split(np.zeros(y.size), y))


def _ci(values: np.ndarray, seed: int, n_resamples: int) -> dict[str, Any]:
    e = bootstrap_ci(values.astype(float), n_resamples=n_resamples, rng=seed)
    return {"estimate": e.estimate, "ci_low": e.ci_low, "ci_high": e.ci_high, "method": e.method, "n": e.n}


def cv_accuracy(
    X: np.ndarray,
    y: np.ndarray,
    *,
    estimator: RadarEnsemble | None = None,
    n_splits: int = 5,
    seed: int = 0,
    n_resamples: int = 1000,
) -> dict[str, Any]:
    """Stratified k-fold accuracy of the majority vote, with a bootstrap CI over prompts.

    The CI resamples the out-of-fold correctness of each prompt (percentile bootstrap); the
    fold accuracies are reported too. Also the pooled out-of-fold ROC-AUC of ``p``.
    """
    from sklearn.base import clone

    est = estimator or RadarEnsemble(feature_names=FEATURE_NAMES[: X.shape[1]], random_state=seed)
    pred = np.full(y.size, -1)
    prob = np.full(y.size, np.nan)
    fold_acc = []
    for train, test in _folds(y, n_splits, seed):
        m = clone(est).fit(X[train], y[train])
        pred[test] = m.predict(X[test])
        prob[test] = m.predict_proba(X[test])[:, 1]
        fold_acc.append(float((pred[test] == y[test]).mean()))
    correct = pred == y
    auc = auc_ci(prob, y, n_resamples=n_resamples, rng=seed)
    return {
        **_ci(correct, seed, n_resamples),
        "fold_accuracies": fold_acc,
        "n_splits": n_splits,
        "oof_roc_auc": auc.estimate,
        "oof_roc_auc_ci": [auc.ci_low, auc.ci_high],
        "oof_predictions": pred.tolist(),
        "oof_p_recall": prob.tolist(),
    }


def permutation_importance_cv(
    X: np.ndarray,
    y: np.ndarray,
    names: Sequence[str],
    *,
    n_splits: int = 5,
    n_repeats: int = 5,
    seed: int = 0,
    estimator: RadarEnsemble | None = None,
) -> list[dict[str, Any]]:
    """Permutation importance (drop in held-out ROC-AUC of ``p``) averaged over CV test folds.

    Each fold's ensemble is fitted on the training folds; features are permuted on the test
    fold only. Sorted by mean importance, highest first.
    """
    from sklearn.base import clone
    from sklearn.inspection import permutation_importance

    est = estimator or RadarEnsemble(feature_names=tuple(names), random_state=seed)
    per_fold = []
    for k, (train, test) in enumerate(_folds(y, n_splits, seed)):
        m = clone(est).fit(X[train], y[train])
        r = permutation_importance(
            m, X[test], y[test], scoring="roc_auc", n_repeats=n_repeats, random_state=seed + k
        )
        per_fold.append(r.importances_mean)
    imp = np.array(per_fold)
    order = np.argsort(-imp.mean(axis=0), kind="stable")
    return [
        {"feature": names[i], "importance": float(imp[:, i].mean()), "fold_std": float(imp[:, i].std())}
        for i in order
    ]


def _threshold_fit(score: np.ndarray, y: np.ndarray) -> float:
    """The threshold on ``score`` (predict recall when >=) with the best training accuracy."""
    cands = np.unique(score)
    mids = np.concatenate([[cands[0] - 1.0], (cands[:-1] + cands[1:]) / 2.0, [cands[-1] + 1.0]])
    acc = [((score >= t).astype(int) == y).mean() for t in mids]
    return float(mids[int(np.argmax(acc))])


def _by_category(
    rows: Sequence[FeatureRow], correct: np.ndarray
) -> tuple[dict[str, float], dict[str, list[int]]]:
    acc: dict[str, float] = {}
    counts: dict[str, list[int]] = {}
    for cat in sorted({r.category or "uncategorised" for r in rows}):
        m = np.array([(r.category or "uncategorised") == cat for r in rows])
        acc[cat] = float(correct[m].mean())
        counts[cat] = [int(correct[m].sum()), int(m.sum())]
    return acc, counts


def evaluate(
    train: Sequence[FeatureRow],
    test: Sequence[FeatureRow],
    *,
    feature_set: FeatureSet = "paper",
    n_splits: int = 5,
    seed: int = 0,
    n_resamples: int = 1000,
    importance: bool = True,
) -> tuple[dict[str, Any], RadarEnsemble, list[dict[str, Any]]]:
    """Fit on ``train``, evaluate on ``test``; CV on ``train``; baselines; importance.

    Returns:
        ``(report, fitted ensemble, per-prompt predictions)``. The report holds
        ``accuracy``, ``accuracy_by_category``, ``roc_auc``, ``cv_accuracy``, ``n_train``,
        ``n_test`` and the details (CIs, baselines, scores by label, importance).
    """
    Xtr, ytr = feature_matrix(train, feature_set)
    Xte, yte = feature_matrix(test, feature_set)
    if (ytr < 0).any() or (yte < 0).any():
        raise InputError("every training and test prompt needs a label for evaluation")
    ens = RadarEnsemble(random_state=seed).fit(Xtr, ytr)
    pred = ens.predict(Xte)
    p = ens.predict_proba(Xte)[:, 1]
    conf = ens.confidence(Xte)
    scores = ens.scores(Xte)
    correct = pred == yte
    acc_cat, counts = _by_category(test, correct)
    auc = auc_ci(p, yte, n_resamples=n_resamples, rng=seed)
    cv = cv_accuracy(Xtr, ytr, n_splits=n_splits, seed=seed, n_resamples=n_resamples)

    # baselines, fitted on the training set only
    idx = [FEATURE_NAMES.index(n) for n in SURFACE_FEATURES]
    surf = RadarEnsemble(feature_names=SURFACE_FEATURES, random_state=seed).fit(Xtr[:, idx], ytr)
    s_pred = surf.predict(Xte[:, idx])
    s_auc = auc_ci(surf.predict_proba(Xte[:, idx])[:, 1], yte, n_resamples=n_resamples, rng=seed)
    ctr = np.array([r.final_confidence for r in train])
    cte = np.array([r.final_confidence for r in test])
    thr = _threshold_fit(ctr, ytr)
    c_pred = (cte >= thr).astype(int)
    c_auc = auc_ci(cte, yte, n_resamples=n_resamples, rng=seed)
    c_acc_cat, _ = _by_category(test, c_pred == yte)
    s_acc_cat, _ = _by_category(test, s_pred == yte)

    report: dict[str, Any] = {
        "feature_set": feature_set,
        "n_train": len(train),
        "n_test": len(test),
        "accuracy": float(correct.mean()),
        "accuracy_ci": _ci(correct, seed, n_resamples),
        "accuracy_by_category": acc_cat,
        "correct_by_category": counts,
        "accuracy_recall_prompts": float(correct[yte == 1].mean()) if (yte == 1).any() else None,
        "accuracy_reasoning_prompts": float(correct[yte == 0].mean()) if (yte == 0).any() else None,
        "roc_auc": auc.estimate,
        "roc_auc_ci": [auc.ci_low, auc.ci_high],
        "cv_accuracy": cv["estimate"],
        "cv_accuracy_ci": [cv["ci_low"], cv["ci_high"]],
        "cv": {k: v for k, v in cv.items() if not k.startswith("oof_p") and k != "oof_predictions"},
        "baselines": {
            "surface_only": {
                "accuracy": float((s_pred == yte).mean()),
                "accuracy_by_category": s_acc_cat,
                "roc_auc": s_auc.estimate,
                "roc_auc_ci": [s_auc.ci_low, s_auc.ci_high],
            },
            "final_confidence": {
                "threshold": thr,
                "accuracy": float((c_pred == yte).mean()),
                "accuracy_by_category": c_acc_cat,
                "roc_auc": c_auc.estimate,
                "roc_auc_ci": [c_auc.ci_low, c_auc.ci_high],
            },
        },
        "scores_mean_by_label": {
            name: {
                "recall": float(v[yte == 1].mean()) if (yte == 1).any() else None,
                "reasoning": float(v[yte == 0].mean()) if (yte == 0).any() else None,
            }
            for name, v in scores.items()
        },
        "score_auc": {name: roc_auc(v, yte) for name, v in scores.items()},
        "seed": seed,
    }
    if importance:
        report["permutation_importance"] = permutation_importance_cv(
            Xtr, ytr, FEATURE_NAMES, n_splits=n_splits, seed=seed
        )
    preds = [
        {
            "id": r.id,
            "label": int(yte[i]),
            "category": r.category,
            "prediction": int(pred[i]),
            "p_recall": float(p[i]),
            "confidence": float(conf[i]),
            **{name: float(v[i]) for name, v in scores.items()},
        }
        for i, r in enumerate(test)
    ]
    return report, ens, preds


def contamination_auc(
    p_recall: np.ndarray, injected: np.ndarray, *, seed: int = 0, n_resamples: int = 1000
) -> dict[str, Any]:
    """AUC of RADAR's recall probability for injected (1) vs fresh (0) items, with a CI."""
    e = auc_ci(p_recall, injected, n_resamples=n_resamples, rng=seed)
    return {
        "roc_auc": e.estimate,
        "roc_auc_ci": [e.ci_low, e.ci_high],
        "n_injected": int(injected.sum()),
        "n_fresh": int((injected == 0).sum()),
        "mean_p_injected": float(p_recall[injected == 1].mean()) if injected.any() else None,
        "mean_p_fresh": float(p_recall[injected == 0].mean()),
        "reason": e.reason,
    }


# --------------------------------------------------------------------------- figure


def rds_rci_figure(
    rds: np.ndarray,
    rci: np.ndarray,
    labels: np.ndarray,
    categories: Sequence[str | None] | None = None,
    *,
    title: str = "",
) -> Figure:
    """Scatter of the Recall Detection Score against the Reasoning Complexity Index."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.0, 5.0))
    ax = fig.add_subplot(1, 1, 1)
    cats = list(categories) if categories is not None else [None] * len(labels)
    markers = ["o", "s", "^", "D", "v", "P", "X"]
    kinds = sorted({c or "" for c in cats})
    for lab, color, name in ((1, "tab:blue", "recall"), (0, "tab:orange", "reasoning")):
        for k, kind in enumerate(kinds):
            m = (labels == lab) & np.array([(c or "") == kind for c in cats])
            if m.any():
                ax.scatter(
                    rds[m],
                    rci[m],
                    c=color,
                    marker=markers[k % len(markers)],
                    alpha=0.7,
                    s=28,
                    label=f"{name}" + (f" / {kind}" if kind else ""),
                )
    ax.set_xlabel("Recall Detection Score (RDS)")
    ax.set_ylabel("Reasoning Complexity Index (RCI)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_title(title or "RADAR: RDS vs RCI")
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig
