"""The verdict model: memory vs context from the audit's signals, with a conformal guarantee.

Signals (one number per audited answer; orientation fixed in :data:`ORIENTATION`):

* ``repcs_z``: RePCS's Z, the summed KL between the with- and no-context next-token
  distributions over the answer (small = the context changed little = memory);
* ``closed_book_logprob``: mean log p(y_t | query) of the answer without the context
  (high = the model already knew it);
* ``context_token_fraction``: share of the answer's non-neutral words that the context
  supports (:mod:`mnemoscope.features.attribution`; low = memory);
* ``lts_score``: CRM's unsupervised LTS anomaly score (secondary, needs hidden states);
* ``crm_probability``: CRM's supervised classifier (needs hidden states; only valid as a
  signal when computed out of fold, see ``benchmarks/verdict_eval.py``).

:class:`VerdictModel` (fitted on labelled calibration records, 1 = answered from memory,
0 = needed the context):

1. holds out a seeded share of the *clean* records as the conformal set (never used to fit);
2. on the rest, measures each candidate's out-of-fold AUC and selects signals greedily: a
   signal is kept only if it raises the cross-validated AUC of the logistic combination by at
   least ``min_gain`` (so what does not add on held-out folds is dropped);
3. fits a standardised, class-balanced logistic regression on the selected signals:
   ``p_memory`` is calibrated for equal priors of the two classes;
4. sets the flag threshold t = the conformal upper quantile of ``p_memory`` on the held-out
   clean records: for a new context-needed answer exchangeable with them,
   ``P(p_memory > t) <= alpha`` (finite-sample, distribution-free). With fewer than
   :func:`~mnemoscope.stats.conformal.min_n_for_alpha` held-out clean records alpha cannot be
   certified: ``certified_`` is False, the flag falls back to ``p_memory > 0.5`` and every
   verdict says that no guarantee holds.

Detectors never call a model: the inputs are numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, clone
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold
from sklearn.utils.validation import check_is_fitted

from mnemoscope.errors import InputError
from mnemoscope.features.facts import FACT_SIGNALS
from mnemoscope.stats.conformal import conformal_upper, min_n_for_alpha
from mnemoscope.stats.metrics import auc_ci, roc_auc

__all__ = [
    "DEFAULT_CANDIDATES",
    "ORIENTATION",
    "SIGNALS",
    "VerdictModel",
    "evaluate_verdict",
    "signal_matrix",
]

SIGNALS = (
    "repcs_z",
    "closed_book_logprob",
    "context_token_fraction",
    "lts_score",
    "crm_probability",
    *FACT_SIGNALS,
    "closed_book_agreement",
)
ORIENTATION: dict[str, float] = {
    "repcs_z": -1.0,
    "closed_book_logprob": 1.0,
    "context_token_fraction": -1.0,
    "lts_score": 1.0,
    "crm_probability": 1.0,
    "fact_cb_logratio": 1.0,
    "fact_cb_rank": -1.0,
    "fact_switched": -1.0,
    "fact_cb_entropy": -1.0,
    "fact_pmi": -1.0,
    "closed_book_agreement": 1.0,
}
#: what the verdict may combine by default (it keeps what adds on held-out folds): the whole-answer
#: signals, those on the answer-bearing words, and the closed-book answer's agreement with them
#: (chosen on held-out evidence on four configurations: docs/calibrate.md, the ablation)
DEFAULT_CANDIDATES = (
    "repcs_z",
    "closed_book_logprob",
    "context_token_fraction",
    *FACT_SIGNALS,
    "closed_book_agreement",
)


def _groups(groups: Sequence[Any] | np.ndarray, n: int) -> np.ndarray:
    g = np.asarray([str(x) for x in groups], dtype=object)
    if len(g) != n:
        raise InputError(f"groups has {len(g)} values, expected {n}", field="groups")
    return g


def signal_matrix(signals: Mapping[str, Sequence[float] | np.ndarray], names: Sequence[str]) -> np.ndarray:
    """Stack the named signals into ``[n, k]`` (float64), refusing a missing or non-finite one."""
    cols = []
    n = None
    for name in names:
        if name not in signals:
            raise InputError(f"signal {name!r} is not available here", field=name)
        a = np.asarray(signals[name], dtype=np.float64).ravel()
        if n is not None and len(a) != n:
            raise InputError(f"signal {name!r} has {len(a)} values, expected {n}", field=name)
        n = len(a)
        if not np.all(np.isfinite(a)):
            bad = int(np.flatnonzero(~np.isfinite(a))[0])
            raise InputError(f"signal {name!r} is not finite at row {bad}", field=name)
        cols.append(a)
    return np.stack(cols, axis=1) if cols else np.zeros((0, 0))


def _check_labels(y: Any, n: int) -> np.ndarray:
    lab = np.asarray(y)
    if lab.shape != (n,):
        raise InputError(f"labels have shape {lab.shape}, expected ({n},)", field="label")
    if not np.isin(lab, (0, 1)).all():
        raise InputError("labels must be 0 (needed the context) or 1 (from memory)", field="label")
    lab = lab.astype(int)
    if len(np.unique(lab)) < 2:
        raise InputError("the verdict model needs calibration records of both labels", field="label")
    return lab


class VerdictModel(BaseEstimator):
    """Selects, combines and thresholds the audit signals (module doc).

    Args:
        candidates: signals the combination may use.
        alpha: target false-flag rate on context-needed answers.
        conformal_fraction: share of the clean records held out for the threshold.
        n_splits: CV folds of the signal selection.
        min_gain: AUC a signal must add on held-out folds to be kept.
        C: inverse L2 strength of the logistic regression.
        seed: the conformal split and the selection folds.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> y = np.r_[np.ones(60, int), np.zeros(60, int)]
        >>> X = {"repcs_z": rng.normal(5 - 3 * y, 1), "closed_book_logprob": rng.normal(-2 + y, 1),
        ...      "context_token_fraction": rng.uniform(size=120)}
        >>> m = VerdictModel(candidates=tuple(X), seed=0).fit(X, y)
        >>> m.selected_[0], m.certified_
        ('repcs_z', True)
    """

    #: ids of the answers that certified the threshold (set by the caller that knows the ids;
    #: recorded in the profile so the certification can be re-checked)
    conformal_ids_: tuple[str, ...] = ()
    #: how the threshold was certified (set by :meth:`fit` / :meth:`from_dict`): over all clean
    #: answers, or per kind with each kind's own threshold and conformal count
    certify_: str = "marginal"
    group_thresholds_: dict[str, float]
    n_conformal_by_group_: dict[str, int]

    def __init__(
        self,
        *,
        candidates: Sequence[str] = DEFAULT_CANDIDATES,
        alpha: float = 0.05,
        conformal_fraction: float = 0.5,
        n_splits: int = 5,
        min_gain: float = 0.005,
        C: float = 1.0,
        seed: int = 42,
    ):
        self.candidates = candidates
        self.alpha = alpha
        self.conformal_fraction = conformal_fraction
        self.n_splits = n_splits
        self.min_gain = min_gain
        self.C = C
        self.seed = seed

    # -- fitting ----------------------------------------------------------------------------------

    def _lr(self) -> LogisticRegression:
        return LogisticRegression(C=self.C, class_weight="balanced", max_iter=1000)

    def _cv_auc(self, X: np.ndarray, y: np.ndarray) -> float:
        folds = min(self.n_splits, int(np.bincount(y).min()))
        if folds < 2:
            return float(roc_auc(X @ np.ones(X.shape[1]), y) or 0.5)
        oof = np.zeros(len(y))
        for tr, te in StratifiedKFold(folds, shuffle=True, random_state=self.seed).split(X, y):
            mu, sd = X[tr].mean(0), X[tr].std(0) + 1e-12
            lr = self._lr().fit((X[tr] - mu) / sd, y[tr])
            oof[te] = lr.decision_function((X[te] - mu) / sd)
        return float(roc_auc(oof, y) or 0.5)

    def conformal_split(self, y: Any, groups: Sequence[Any] | np.ndarray | None = None) -> np.ndarray:
        """The indices of the conformal set :meth:`fit` holds out by default: a seeded share
        (``conformal_fraction``) of the clean (label 0) records, leaving at least 2 to fit on;
        with ``groups``, that share of each group's clean records (stratified, so every kind is
        in the conformal set in proportion).

        A caller that fits a signal itself (CRM's classifier) draws the split first, fits that
        signal without these records and passes the split to :meth:`fit` (``conformal=``).
        """
        if not 0 < self.conformal_fraction < 1:
            raise InputError("conformal_fraction must be in (0, 1)", field="conformal_fraction")
        y = np.asarray(y).astype(int).ravel()
        rng = np.random.default_rng(self.seed)
        clean = np.flatnonzero(y == 0)
        n_conf = min(round(self.conformal_fraction * len(clean)), len(clean) - 2)
        if groups is None:
            return np.sort(rng.permutation(clean)[: max(n_conf, 0)])
        g = _groups(groups, len(y))
        picked: list[int] = []
        for name in sorted(set(g[clean])):
            members = clean[g[clean] == name]
            k = round(self.conformal_fraction * len(members))
            picked += rng.permutation(members)[:k].tolist()
        return np.sort(np.asarray(picked[: max(n_conf, 0)], dtype=int))

    def uncertified_reason(self) -> str | None:
        """Why alpha is not certified (``None`` when it is): too few conformal answers, in all
        or, certified per kind, within the kinds named."""
        check_is_fitted(self, "threshold_")
        if self.certified_:
            return None
        small = [k for k, t in self.group_thresholds_.items() if not math.isfinite(t)]
        if small:
            return (
                "too few held-out clean calibration answers of kind "
                + ", ".join(f"{k} ({self.n_conformal_by_group_.get(k, 0)})" for k in small)
                + f" to certify alpha={self.alpha:g} within each kind (at least {self.min_n_} each)"
            )
        return (
            f"{self.n_conformal_} held-out clean calibration answers cannot certify alpha={self.alpha:g} "
            f"(at least {self.min_n_} are needed)"
        )

    def fit(
        self,
        signals: Mapping[str, Sequence[float] | np.ndarray],
        y: Any,
        *,
        conformal: Sequence[int] | np.ndarray | None = None,
        groups: Sequence[Any] | np.ndarray | None = None,
    ) -> VerdictModel:
        """Select, combine and threshold (module doc).

        ``conformal``: the indices of the clean records that set the threshold (never fitted
        on); default :meth:`conformal_split`. For the guarantee, their signal values must be
        what an audit would compute for them, from functions that never saw them.
        ``groups``: a group per record (e.g. the item kind: invented fact, followed knowledge
        conflict). Given, the threshold is the largest of the groups' own conformal quantiles,
        so the false-flag bound holds within every group of context-needed answers, whatever
        their mix in new requests (Mondrian conformal); a group with too few conformal records
        to certify alpha leaves the model uncertified.
        """
        unknown = [c for c in self.candidates if c not in ORIENTATION]
        if unknown:
            raise InputError(
                f"unknown verdict signal(s) {unknown}; known: {list(SIGNALS)}", field="candidates"
            )
        X_all = signal_matrix(signals, self.candidates)
        y = _check_labels(y, len(X_all))
        if conformal is None:
            conf = self.conformal_split(y, groups)
        else:
            conf = np.unique(np.asarray(conformal, dtype=int).ravel())
            if len(conf) and (conf.min() < 0 or conf.max() >= len(y) or (y[conf] != 0).any()):
                raise InputError(
                    "the conformal set must be indices of clean (label 0) records", field="conformal"
                )
        fit_mask = np.ones(len(y), bool)
        fit_mask[conf] = False
        Xf, yf = X_all[fit_mask], y[fit_mask]
        if len(np.unique(yf)) < 2 or np.bincount(yf).min() < 2:
            raise InputError("too few records of one label left to fit the verdict", field="label")

        self.single_auc_ = {
            name: float(roc_auc(ORIENTATION[name] * Xf[:, j], yf) or 0.5)
            for j, name in enumerate(self.candidates)
        }
        # greedy forward selection on out-of-fold AUC
        selected: list[int] = []
        path: list[dict[str, Any]] = []
        best = 0.5
        remaining = list(range(len(self.candidates)))
        while remaining:
            trial = {j: self._cv_auc(Xf[:, [*selected, j]], yf) for j in remaining}
            j_best = max(trial, key=lambda j: (trial[j], -j))
            gain = trial[j_best] - best
            if selected and gain < self.min_gain:
                break
            selected.append(j_best)
            remaining.remove(j_best)
            best = trial[j_best]
            path.append({"signal": self.candidates[j_best], "cv_auc": best, "gain": gain})
        self.selected_ = tuple(self.candidates[j] for j in selected)
        self.selection_path_ = path
        Xs = Xf[:, selected]
        self.mean_ = Xs.mean(0)
        self.scale_ = Xs.std(0) + 1e-12
        lr = self._lr().fit((Xs - self.mean_) / self.scale_, yf)
        self.coef_ = lr.coef_.ravel().astype(np.float64)
        self.intercept_ = float(lr.intercept_[0])
        self.n_fit_ = len(yf)
        self.n_conformal_ = len(conf)
        self.conformal_index_ = conf
        self.min_n_ = min_n_for_alpha(self.alpha)
        self.group_thresholds_ = {}
        self.n_conformal_by_group_ = {}
        p_conf = self._proba(X_all[conf][:, selected]) if len(conf) else np.zeros(0)
        t = conformal_upper(p_conf, self.alpha) if len(conf) else math.inf
        if groups is not None:
            # every kind of clean record needs its own certified quantile; a kind with no or too
            # few conformal records has none (inf), and the model is then not certified
            g = _groups(groups, len(y))
            gc = g[conf]
            for name in sorted(set(g[y == 0])):
                m = gc == name
                self.n_conformal_by_group_[name] = int(m.sum())
                self.group_thresholds_[name] = (
                    float(conformal_upper(p_conf[m], self.alpha)) if m.any() else math.inf
                )
            t = max(self.group_thresholds_.values(), default=math.inf)
        self.certify_ = "marginal" if groups is None else "per-kind"
        self.certified_ = bool(math.isfinite(t))
        self.threshold_ = float(t) if self.certified_ else 0.5
        return self

    # -- scoring ----------------------------------------------------------------------------------

    def _proba(self, Xs: np.ndarray) -> np.ndarray:
        z = ((Xs - self.mean_) / self.scale_) @ self.coef_ + self.intercept_
        return np.asarray(1.0 / (1.0 + np.exp(-z)), dtype=np.float64)

    def predict_proba(self, signals: Mapping[str, Sequence[float] | np.ndarray]) -> np.ndarray:
        """``p_memory`` per row (equal-prior calibrated)."""
        check_is_fitted(self, "coef_")
        return self._proba(signal_matrix(signals, self.selected_))

    def flag(self, p_memory: np.ndarray | float) -> np.ndarray:
        """True = memory (p_memory above the conformal threshold, or above 0.5 when uncertified)."""
        check_is_fitted(self, "threshold_")
        return np.asarray(p_memory) > self.threshold_

    # -- persistence ------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        check_is_fitted(self, "coef_")
        return {
            "params": {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.get_params().items()},
            "selected": list(self.selected_),
            "selection_path": self.selection_path_,
            "single_auc": self.single_auc_,
            "mean": self.mean_.tolist(),
            "scale": self.scale_.tolist(),
            "coef": self.coef_.tolist(),
            "intercept": self.intercept_,
            "threshold": self.threshold_,
            "certified": self.certified_,
            "n_fit": self.n_fit_,
            "n_conformal": self.n_conformal_,
            "min_n_for_alpha": self.min_n_,
            **({"conformal_ids": list(self.conformal_ids_)} if self.conformal_ids_ else {}),
            **(
                {
                    "certify": "per-kind",
                    "group_thresholds": {  # inf (a group too small to certify) as null
                        k: (v if math.isfinite(v) else None) for k, v in self.group_thresholds_.items()
                    },
                    "n_conformal_by_group": dict(self.n_conformal_by_group_),
                }
                if self.certify_ == "per-kind"
                else {}
            ),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> VerdictModel:
        try:
            params = dict(d["params"])
            params["candidates"] = tuple(params["candidates"])
            m = cls(**params)
            m.selected_ = tuple(d["selected"])
            m.selection_path_ = list(d.get("selection_path", []))
            m.single_auc_ = dict(d.get("single_auc", {}))
            m.mean_ = np.asarray(d["mean"], dtype=np.float64)
            m.scale_ = np.asarray(d["scale"], dtype=np.float64)
            m.coef_ = np.asarray(d["coef"], dtype=np.float64)
            m.intercept_ = float(d["intercept"])
            m.threshold_ = float(d["threshold"])
            m.certified_ = bool(d["certified"])
            m.n_fit_ = int(d["n_fit"])
            m.n_conformal_ = int(d["n_conformal"])
            m.min_n_ = int(d.get("min_n_for_alpha", min_n_for_alpha(m.alpha)))
            if d.get("conformal_ids") is not None:
                m.conformal_ids_ = tuple(str(i) for i in d["conformal_ids"])
            m.certify_ = str(d.get("certify", "marginal"))
            gt = d.get("group_thresholds") or {}
            m.group_thresholds_ = {str(k): (math.inf if v is None else float(v)) for k, v in gt.items()}
            m.n_conformal_by_group_ = {
                str(k): int(v) for k, v in (d.get("n_conformal_by_group") or {}).items()
            }
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"verdict model record is malformed ({e})", field="verdict") from e
        if len(m.coef_) != len(m.selected_) or any(s not in ORIENTATION for s in m.selected_):
            raise InputError("verdict model record is inconsistent", field="verdict")
        return m


def evaluate_verdict(
    signals: Mapping[str, Sequence[float] | np.ndarray],
    y: Any,
    model: VerdictModel | None = None,
    *,
    n_splits: int = 5,
    seed: int = 0,
    n_resamples: int = 1000,
    groups: Sequence[Any] | None = None,
    fold_signals: Callable[[np.ndarray], Mapping[str, Sequence[float] | np.ndarray]] | None = None,
    fit_fold: Callable[[np.ndarray], tuple[VerdictModel, Mapping[str, Sequence[float] | np.ndarray]]]
    | None = None,
) -> dict[str, Any]:
    """Leakage-free evaluation: outer stratified CV, the whole :class:`VerdictModel` refitted
    (selection, combination, conformal threshold) on each training part.

    Returns the combination's out-of-fold AUC with a bootstrap CI, each candidate signal's own
    AUC (oriented, no fitting) with its CI, the realised false-flag rate on held-out clean
    records next to alpha, the recall of memory records, and how often each signal was selected.
    With ``groups`` (e.g. a fact and its paraphrase) a group never spans training and test folds.
    ``fold_signals(train_index)`` recomputes every row's signals with the steps fitted on the
    training rows only (e.g. the token-attribution margin), so nothing from a test fold leaks.
    ``fit_fold(train_index)`` replaces both: it returns the model fitted on the training rows
    (by the caller's own calibration function, e.g. the profile's) and every row's signals
    measured with that fold's fitted steps; the test rows are scored with that model.
    """
    base = model or VerdictModel()
    names = list(base.candidates)
    X = signal_matrix(signals, names)
    lab = _check_labels(y, len(X))
    oof = np.zeros(len(lab))
    flags = np.zeros(len(lab), bool)
    chosen: dict[str, int] = dict.fromkeys(names, 0)
    certified = []
    if groups is None:
        splits = StratifiedKFold(n_splits, shuffle=True, random_state=seed).split(X, lab)
    else:
        splits = StratifiedGroupKFold(n_splits, shuffle=True, random_state=seed).split(X, lab, groups)
    for tr, te in splits:
        if fit_fold is not None:
            m, sig = fit_fold(tr)
            Xf = signal_matrix(sig, names)
        else:
            Xf = X if fold_signals is None else signal_matrix(fold_signals(tr), names)
            m = clone(base).fit({n: Xf[tr, j] for j, n in enumerate(names)}, lab[tr])
        p = m.predict_proba({n: Xf[te, j] for j, n in enumerate(names)})
        oof[te] = p
        flags[te] = m.flag(p)
        certified.append(m.certified_)
        for s in m.selected_:
            chosen[s] += 1

    def est(scores: np.ndarray) -> dict[str, Any]:
        e = auc_ci(scores, lab, n_resamples=n_resamples, rng=seed)
        return {"auc": e.estimate, "ci": [e.ci_low, e.ci_high]}

    clean, mem = lab == 0, lab == 1
    return {
        "n": len(lab),
        "n_memory": int(mem.sum()),
        "n_context": int(clean.sum()),
        "alpha": base.alpha,
        "combination": est(oof),
        "signals": {n: est(ORIENTATION[n] * X[:, j]) for j, n in enumerate(names)},
        "false_flag_rate": float(flags[clean].mean()),
        "false_flags": int(flags[clean].sum()),
        "memory_recall": float(flags[mem].mean()),
        "accuracy": float((flags == mem).mean()),
        "folds_certified": int(sum(certified)),
        "n_splits": n_splits,
        "selected_count": chosen,
        "oof_p_memory": oof.tolist(),
    }
