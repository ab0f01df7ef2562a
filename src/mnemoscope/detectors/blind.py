"""Blind baselines: membership "detectors" that never see the model, and the shift rule.

A membership AUC means something only if the labels cannot be predicted from the text alone.
On WikiMIA (members: events before 2017, non-members: after 2023) and BookMIA (publication
dates) they can: classifiers on the text reach 0.98-0.99 and above 0.9 AUC (Das, Zhang and
Tramèr 2024, "Blind Baselines Beat Membership Inference Attacks for Foundation Models";
Duan et al. 2024, "Do Membership Inference Attacks Work on Large Language Models?"). These
methods put that number next to every model-based one:

* ``blind_tfidf``: word 1-2-gram TF-IDF + logistic regression;
* ``blind_date``: the years the text mentions (count, min, max, mean, share >= each
  decade) + gradient-boosted trees (a date cut-off is a threshold, which a linear model misses);
* ``blind_embedding``: the text's own sentence embedding (the offline MiniLM encoder, supplied
  by the pipeline as ``MembershipData.text_embeddings``) + logistic regression.

All three are supervised: the pipeline fits them inside the same cross-validation folds as
every other method (the TF-IDF vocabulary and IDF weights too), and they never call a model.

:func:`shift_diagnostic` is the one place the decision "labels are predictable from the text
alone" is taken; the leaderboard, ``crm eval`` and the CLI all call it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from mnemoscope.detectors.base import MembershipData, MembershipMethod, Requirement

__all__ = [
    "BLIND_METHODS",
    "SHIFT_THRESHOLD",
    "BlindDate",
    "BlindEmbedding",
    "BlindTfidf",
    "shift_diagnostic",
    "year_features",
]

BLIND_METHODS = ("blind_tfidf", "blind_date", "blind_embedding")

#: The shift rule: the best blind baseline's AUC confidence interval lies above this.
SHIFT_THRESHOLD = 0.60

# four-digit years 1000-2199 not glued to other digits ("in 1998", "(2031)", "1990s")
_YEAR = re.compile(r"(?<!\d)(?<!\d[.,])(1\d{3}|20\d{2}|21\d{2})(?!\d|[.,]\d)")
_DECADES = tuple(range(1900, 2040, 10))


def year_features(texts: Iterable[str]) -> np.ndarray:
    """``[n, 4 + len(decades)]`` features of the years each text mentions.

    Columns: number of years, min, max, mean, then for each decade start D in 1900..2030 the
    share of mentioned years >= D; a text without a year has count 0 and -1 everywhere else
    (a value no year takes, which the trees split off; NaN would break histogram binning when
    a whole training fold has no year). A pure function of the text: nothing is fitted here.

    Example:
        >>> f = year_features(["Founded in 1998, closed in 2021.", "No dates here."])
        >>> f[0, :4].tolist(), f[1, :4].tolist()
        ([2.0, 1998.0, 2021.0, 2009.5], [0.0, -1.0, -1.0, -1.0])
    """
    rows = []
    for text in texts:
        years = np.array([int(y) for y in _YEAR.findall(text)], dtype=float)
        if years.size:
            head = [years.size, years.min(), years.max(), years.mean()]
            shares = [float((years >= d).mean()) for d in _DECADES]
        else:
            head = [0.0, -1.0, -1.0, -1.0]
            shares = [-1.0] * len(_DECADES)
        rows.append([*head, *shares])
    return np.asarray(rows, dtype=float).reshape(len(rows), 4 + len(_DECADES))


class _Blind(MembershipMethod):
    """Base of the blind baselines: supervised, fitted in CV folds, never touch a model."""

    supervised: ClassVar[bool] = True
    requires: ClassVar[frozenset[Requirement]] = frozenset()
    blind: ClassVar[bool] = True

    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed


class BlindTfidf(_Blind):
    """Word n-gram TF-IDF + logistic regression on the text (vocabulary fitted in-fold).

    Args:
        ngram_max: longest word n-gram.
        min_df: minimum document frequency of a term (in the training folds).
        max_features: vocabulary cap (most frequent terms of the training folds).
        C: inverse L2 strength of the logistic regression.
    """

    def __init__(
        self,
        ngram_max: int = 2,
        min_df: int = 1,
        max_features: int = 50_000,
        C: float = 1.0,
        seed: int | None = None,
    ) -> None:
        super().__init__(seed)
        self.ngram_max = ngram_max
        self.min_df = min_df
        self.max_features = max_features
        self.C = C

    def features(self, data: MembershipData) -> np.ndarray:
        return np.asarray(list(data.texts), dtype=object)

    def make_estimator(self) -> Any:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline

        return make_pipeline(
            TfidfVectorizer(
                ngram_range=(1, self.ngram_max),
                min_df=self.min_df,
                max_features=self.max_features,
                sublinear_tf=True,
                lowercase=True,
            ),
            LogisticRegression(C=self.C, max_iter=2000, random_state=self.seed),
        )


class BlindDate(_Blind):
    """The years a text mentions (:func:`year_features`) + gradient-boosted trees."""

    def __init__(self, max_depth: int = 3, max_iter: int = 100, seed: int | None = None) -> None:
        super().__init__(seed)
        self.max_depth = max_depth
        self.max_iter = max_iter

    def features(self, data: MembershipData) -> np.ndarray:
        return year_features(data.texts)

    def make_estimator(self) -> Any:
        from sklearn.ensemble import HistGradientBoostingClassifier

        return HistGradientBoostingClassifier(
            max_depth=self.max_depth,
            max_iter=self.max_iter,
            min_samples_leaf=5,
            early_stopping=False,
            random_state=self.seed,
        )


class BlindEmbedding(_Blind):
    """The text's own sentence embedding (supplied by the pipeline) + logistic regression."""

    requires: ClassVar[frozenset[Requirement]] = frozenset({"text_embeddings"})

    def __init__(self, C: float = 1.0, seed: int | None = None) -> None:
        super().__init__(seed)
        self.C = C

    def features(self, data: MembershipData) -> np.ndarray:
        emb = np.asarray(data.require("text_embeddings"), dtype=np.float64)
        if emb.ndim != 2 or emb.shape[0] != len(data.texts):
            raise ValueError(f"text_embeddings must be [n_texts, dim], got shape {emb.shape}")
        return emb

    def make_estimator(self) -> Any:
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        return make_pipeline(
            StandardScaler(), LogisticRegression(C=self.C, max_iter=2000, random_state=self.seed)
        )


def _fmt_ci(ci: Sequence[float] | None) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "[n/a]"


def shift_diagnostic(
    entries: Iterable[Mapping[str, Any]],
    *,
    threshold: float = SHIFT_THRESHOLD,
    not_run: str | None = None,
) -> dict[str, Any]:
    """Are the labels predictable from the text alone? The one shift rule of mnemoscope.

    Fires when the best blind baseline's (highest AUC) bootstrap CI lies entirely above
    ``threshold``: then a model-based AUC on the same data cannot be read as membership.

    Args:
        entries: leaderboard-style rows; those whose ``method`` is a blind baseline and that
            carry ``roc_auc`` and ``roc_auc_ci`` are used, the others ignored.
        threshold: the AUC the CI's lower end must exceed.
        not_run: why the caller did not run the blind baselines at all (e.g. ``--no-blind``);
            it becomes the "not measured" reason when no measured row is given.

    Returns:
        ``{"shift_warning": bool, "shift_reason": str, "shift_measured": bool,
        "best_blind": name | None, "best_blind_auc": float | None,
        "best_blind_auc_ci": [lo, hi] | None, "threshold": float}``. Without a measured
        blind baseline ``shift_warning`` is False and ``shift_measured`` False, and the
        reason says so (absence of evidence, not evidence of no shift).

    Example:
        >>> d = shift_diagnostic([{"method": "blind_tfidf", "roc_auc": 0.97, "roc_auc_ci": [0.95, 0.99]}])
        >>> d["shift_warning"], d["best_blind"]
        (True, 'blind_tfidf')
    """
    measured = [
        e
        for e in entries
        if e.get("method") in BLIND_METHODS and e.get("roc_auc") is not None and e.get("roc_auc_ci")
    ]
    out: dict[str, Any] = {
        "shift_warning": False,
        "shift_measured": bool(measured),
        "best_blind": None,
        "best_blind_auc": None,
        "best_blind_auc_ci": None,
        "threshold": threshold,
    }
    if not measured:
        out["shift_reason"] = "not measured: " + (
            not_run
            or "no blind baseline could be evaluated on this data, so whether the labels "
            "are predictable from the text alone is unknown"
        )
        return out
    best = max(measured, key=lambda e: float(e["roc_auc"]))
    ci = [float(best["roc_auc_ci"][0]), float(best["roc_auc_ci"][1])]
    out.update(best_blind=best["method"], best_blind_auc=float(best["roc_auc"]), best_blind_auc_ci=ci)
    said = f"{best['method']} reaches AUC {float(best['roc_auc']):.3f} {_fmt_ci(ci)} without the model"
    if ci[0] > threshold:
        out["shift_warning"] = True
        out["shift_reason"] = (
            f"labels are predictable from the text alone ({said}; CI above {threshold:.2f}); "
            "model-based AUCs on this data do not measure membership"
        )
    else:
        out["shift_reason"] = (
            f"no blind baseline's AUC CI lies above {threshold:.2f} (best: {said}); "
            "the text alone does not predict the labels"
        )
    return out
