"""RADAR's classifier (section 2.3), its four continuous scores (Appendix C) and persistence.

:class:`RadarEnsemble` standardises the feature vectors (``StandardScaler``, fitted on the
training data only) and fits four classifiers on them: random forest, gradient boosting, an
SVM with Platt probabilities and logistic regression. With ``M = 4`` models:

* label ``y = 1[(1/M) sum_j y_j > 1/2]`` (majority vote; a 2-2 tie is *reasoning*, 0);
* ``p = (1/M) sum_j p_j`` with ``p_j = P_j(recall | x)``;
* confidence ``conf = p`` if ``y = 1`` else ``1 - p`` (so it can fall below 0.5 when the vote
  and the mean probability disagree, exactly as the paper's rule implies).

Scores (ours: the paper names them but gives no formula). Each is the mean, over a fixed list
of named features with a fixed sign, of ``Phi(s_f * z_f)``, where ``z_f`` is the feature
standardised with the **training** mean and standard deviation and ``Phi`` the standard normal
CDF. A score is 0.5 for a prompt at the training mean, in ``(0, 1)`` always, and higher when
the named features move in the stated direction. Features with zero training variance (the
paper set's constants) and features absent from the model's feature list are left out; a
score with no usable feature is 0.5. Signs follow the paper's stated findings (section 3.2):

* **RDS** (Recall Detection Score): early/max confidence, convergence speed, specialised
  heads and head specialisation up; mean vocabulary and attention entropy down.
* **RCI** (Reasoning Complexity Index): convergence layer, confidence slope, mean entropy,
  attention entropy, circuit complexity, activation-flow and hidden-state variance up.
* **Mechanistic Score**: intervention sensitivity, degradation slope, indirect effect,
  mediation, patching effect, critical components up; ablation robustness down.
* **Circuit Complexity Score**: circuit depth, circuit complexity, causal path length,
  activation-flow variance, working-memory complexity, state-rank evolution up.

Persistence: :func:`save_radar` writes one file with :mod:`joblib` (pickle). Pickle runs code
when loaded: only load RADAR files you produced yourself. :func:`load_radar` refuses a model
whose fingerprint differs from the one the ensemble was fitted on.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from mnemoscope.detectors.base import MembershipData, MembershipMethod, Requirement
from mnemoscope.errors import InputError, ModelMismatchError
from mnemoscope.features.radar import FEATURE_NAMES
from mnemoscope.identity import check_same_model
from mnemoscope.io import atomic_write

__all__ = [
    "FORMAT_VERSION",
    "SCORE_DEFINITIONS",
    "ModelMismatchError",
    "RadarArtifact",
    "RadarEnsemble",
    "RadarMethod",
    "load_radar",
    "save_radar",
]

FORMAT_VERSION = 1

#: Score name -> ((feature, sign), ...). Ours; see the module doc.
SCORE_DEFINITIONS: dict[str, tuple[tuple[str, int], ...]] = {
    "rds": (
        ("early_confidence", 1),
        ("max_confidence", 1),
        ("convergence_speed", 1),
        ("num_specialized_heads", 1),
        ("head_specialization_score", 1),
        ("mean_entropy", -1),
        ("attention_entropy", -1),
    ),
    "rci": (
        ("convergence_layer", 1),
        ("confidence_slope", 1),
        ("mean_entropy", 1),
        ("attention_entropy", 1),
        ("circuit_complexity", 1),
        ("activation_flow_variance", 1),
        ("hidden_state_variance", 1),
    ),
    "mechanistic": (
        ("intervention_sensitivity", 1),
        ("performance_degradation_slope", 1),
        ("indirect_effect_strength", 1),
        ("causal_mediation_score", 1),
        ("activation_patching_effect", 1),
        ("critical_component_count", 1),
        ("ablation_robustness", -1),
    ),
    "circuit_complexity": (
        ("effective_circuit_depth", 1),
        ("circuit_complexity", 1),
        ("causal_path_length", 1),
        ("activation_flow_variance", 1),
        ("working_memory_complexity", 1),
        ("state_rank_evolution", 1),
    ),
}


def _phi(z: np.ndarray) -> np.ndarray:
    from scipy.special import ndtr

    return np.asarray(ndtr(z))


class RadarEnsemble(ClassifierMixin, BaseEstimator):
    """StandardScaler + {RF, GB, SVC(probability), LR}; majority vote, mean probability.

    Args:
        feature_names: names of the columns of ``X`` (default: the 37 of Appendix D); the
            continuous scores use them to find their features.
        n_estimators: trees of the random forest and boosting rounds of gradient boosting.
        C: inverse regularisation of the SVM and of logistic regression.
        random_state: seeds the forest, the boosting and the SVM's Platt scaling.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> y = np.repeat([0, 1], 15)
        >>> X = rng.normal(size=(30, 3)) + 2 * y[:, None]
        >>> ens = RadarEnsemble(feature_names=("a", "b", "c"), n_estimators=20).fit(X, y)
        >>> ens.predict(X[:2]).tolist(), ens.predict_proba(X[:1]).shape
        ([0, 0], (1, 2))
    """

    def __init__(
        self,
        *,
        feature_names: Sequence[str] = FEATURE_NAMES,
        n_estimators: int = 100,
        C: float = 1.0,
        random_state: int = 0,
    ):
        self.feature_names = feature_names
        self.n_estimators = n_estimators
        self.C = C
        self.random_state = random_state

    def _make_models(self, min_class: int) -> list[tuple[str, Any]]:
        from sklearn.calibration import CalibratedClassifierCV
        from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier
        from sklearn.linear_model import LogisticRegression
        from sklearn.model_selection import StratifiedKFold
        from sklearn.svm import SVC

        rs = self.random_state
        # SVC(probability=True) is deprecated (scikit-learn 1.9); this is its documented
        # replacement: Platt scaling fitted on internal cross-validation, one final SVC.
        cv = StratifiedKFold(n_splits=min(5, min_class), shuffle=True, random_state=rs)
        svm = CalibratedClassifierCV(SVC(C=self.C, random_state=rs), method="sigmoid", cv=cv, ensemble=False)
        return [
            ("random_forest", RandomForestClassifier(n_estimators=self.n_estimators, random_state=rs)),
            (
                "gradient_boosting",
                GradientBoostingClassifier(n_estimators=self.n_estimators, random_state=rs),
            ),
            ("svm", svm),
            ("logistic_regression", LogisticRegression(C=self.C, max_iter=5000)),
        ]

    def _check_X(self, X: Any) -> np.ndarray:
        x = np.asarray(X, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != len(self.feature_names):
            raise InputError(
                f"X must be [n, {len(self.feature_names)}] (one column per feature name), got shape {x.shape}"
            )
        if not np.isfinite(x).all():
            raise InputError("X contains NaN or inf")
        return x

    def fit(self, X: Any, y: Any) -> RadarEnsemble:
        from sklearn.preprocessing import StandardScaler

        x = self._check_X(X)
        labels = np.asarray(y)
        if labels.shape != (x.shape[0],) or not np.isin(labels, [0, 1]).all():
            raise InputError("y must be a 1-D array of 0/1 labels (1 = recall) matching X")
        min_class = int(min((labels == 0).sum(), (labels == 1).sum()))
        if min_class < 2:
            raise InputError("RADAR needs at least 2 recall (1) and 2 reasoning (0) examples to fit")
        self.classes_ = np.array([0, 1])
        self.n_features_in_ = x.shape[1]
        self.scaler_ = StandardScaler().fit(x)
        xs = self.scaler_.transform(x)
        self.models_ = [(name, m.fit(xs, labels)) for name, m in self._make_models(min_class)]
        self.mean_ = x.mean(axis=0)
        self.scale_ = x.std(axis=0)
        return self

    def member_outputs(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """``([n M] hard labels, [n M] P(recall))`` of the four base models."""
        check_is_fitted(self, "models_")
        xs = self.scaler_.transform(self._check_X(X))
        labels = np.column_stack([m.predict(xs) for _, m in self.models_]).astype(int)
        probs = np.column_stack([m.predict_proba(xs)[:, list(m.classes_).index(1)] for _, m in self.models_])
        return labels, probs

    def predict(self, X: Any) -> np.ndarray:
        """Majority vote: 1 (recall) iff more than half of the four models say recall."""
        labels, _ = self.member_outputs(X)
        return (labels.mean(axis=1) > 0.5).astype(int)

    def predict_proba(self, X: Any) -> np.ndarray:
        """``[n 2]``: ``[1 - p, p]`` with ``p`` the mean of the four models' P(recall)."""
        _, probs = self.member_outputs(X)
        p = probs.mean(axis=1)
        return np.column_stack([1.0 - p, p])

    def confidence(self, X: Any) -> np.ndarray:
        """``p`` where the vote says recall, ``1 - p`` where it says reasoning (section 2.3)."""
        labels, probs = self.member_outputs(X)
        y = (labels.mean(axis=1) > 0.5).astype(int)
        p = probs.mean(axis=1)
        return np.where(y == 1, p, 1.0 - p)

    def scores(self, X: Any) -> dict[str, np.ndarray]:
        """RDS, RCI, Mechanistic Score and Circuit Complexity Score (our definitions, module doc)."""
        check_is_fitted(self, "models_")
        x = self._check_X(X)
        index = {n: i for i, n in enumerate(self.feature_names)}
        out: dict[str, np.ndarray] = {}
        for score, terms in SCORE_DEFINITIONS.items():
            parts = []
            for name, sign in terms:
                i = index.get(name)
                if i is None or not self.scale_[i] > 0:
                    continue
                parts.append(_phi(sign * (x[:, i] - self.mean_[i]) / self.scale_[i]))
            out[score] = np.mean(parts, axis=0) if parts else np.full(x.shape[0], 0.5)
        return out


# --------------------------------------------------------------------------- persistence


class RadarArtifact:
    """A fitted ensemble with everything needed to use it safely.

    Attributes:
        ensemble: the fitted :class:`RadarEnsemble`.
        feature_names: its columns.
        model: the :class:`~mnemoscope.models.ModelInfo` dict of the model the features came from.
        settings: capture and feature settings (``capture``, ``features``), so a user extracts
            features the same way.
        extra: free provenance (training file, n, CV accuracy, ...).
    """

    def __init__(
        self,
        ensemble: RadarEnsemble,
        model: dict[str, Any],
        settings: dict[str, Any],
        extra: dict[str, Any] | None = None,
    ):
        check_is_fitted(ensemble, "models_")
        self.ensemble = ensemble
        self.feature_names = list(ensemble.feature_names)
        self.model = dict(model)
        self.settings = dict(settings)
        self.extra = dict(extra or {})

    def check_model(self, fingerprint: str, name: str = "this model") -> None:
        """Raise :class:`ModelMismatchError` unless ``fingerprint`` is the training model's."""
        _check_fingerprint(self.model, fingerprint, name)


def _check_fingerprint(model: dict[str, Any], fingerprint: str, name: str) -> None:
    check_same_model(
        model,
        {"name": name, "fingerprint": fingerprint},
        what="this RADAR ensemble",
        remedy="features of another model are not comparable; retrain on this model "
        "(or pass force=True / --force to override)",
    )


def save_radar(artifact: RadarArtifact, path: str | Path) -> Path:
    """Write ``artifact`` to ``path`` (joblib/pickle; a JSON sidecar ``path + '.json'`` describes it)."""
    import joblib
    import sklearn

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "format": "mnemoscope-radar",
        "format_version": FORMAT_VERSION,
        "sklearn": sklearn.__version__,
        "feature_names": artifact.feature_names,
        "model": artifact.model,
        "settings": artifact.settings,
        "extra": artifact.extra,
    }
    buf = io.BytesIO()
    joblib.dump({"meta": meta, "ensemble": artifact.ensemble}, buf)
    atomic_write(path, buf.getvalue())
    atomic_write(str(path) + ".json", json.dumps(meta, indent=1, default=str) + "\n")
    return path


def load_radar(
    path: str | Path, *, fingerprint: str | None = None, name: str = "this model", force: bool = False
) -> RadarArtifact:
    """Load a file written by :func:`save_radar`.

    Pickle executes code on load: only load files you produced yourself. With ``fingerprint``,
    the JSON sidecar (when present) is checked *before* unpickling, and the model identity
    stored inside the file after; a mismatch raises :class:`ModelMismatchError` unless ``force``.
    """
    import joblib

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such RADAR model file")
    sidecar = Path(str(path) + ".json")
    if fingerprint is not None and not force and sidecar.is_file():
        meta = json.loads(sidecar.read_text())
        _check_fingerprint(meta.get("model", {}), fingerprint, name)
    try:
        blob = joblib.load(path)
    except Exception as e:  # a truncated or foreign file: many exception types
        raise InputError(f"{path} is not a RADAR model file ({type(e).__name__}: {e})") from e
    if not isinstance(blob, dict) or blob.get("meta", {}).get("format") != "mnemoscope-radar":
        raise InputError(f"{path} is not a RADAR model file")
    meta = blob["meta"]
    if meta.get("format_version") != FORMAT_VERSION:
        raise InputError(f"{path}: format version {meta.get('format_version')}, expected {FORMAT_VERSION}")
    art = RadarArtifact(blob["ensemble"], meta["model"], meta["settings"], meta.get("extra"))
    if fingerprint is not None and not force:
        art.check_model(fingerprint, name)
    return art


# --------------------------------------------------------------------------- leaderboard method


def _pair_hidden_features(h: np.ndarray) -> list[float]:
    """RADAR's working-memory features computable from last-token states ``[L+1 d]`` alone."""
    x = np.asarray(h, dtype=np.float64)
    v = x.var(axis=1)
    n = np.linalg.norm(x, axis=1)
    var_growth = v[-2] / (v[0] + 1e-8)  # row L is after the final norm: use block L-1
    norm_growth = n[-2] / (n[0] + 1e-8)
    return [
        float(v[:-1].mean()),
        float(norm_growth),
        float(n[:-1].var()),
        float(var_growth * norm_growth),
        float(np.log(var_growth + 1e-12)),
        float(np.log(norm_growth + 1e-12)),
    ]


class RadarMethod(MembershipMethod):
    """RADAR-lite for the membership leaderboard (supervised; needs ``pairs``).

    The leaderboard hands methods token statistics and paired traces, which hold the
    last-token states ``[L+1 d]`` of each path but neither the attentions nor the whole
    residual stream nor the LM head RADAR's 37 features need. This method therefore uses
    the six hidden-state features computable from those states (per path, with and without
    the document as context: 12 columns; hidden-state variance, norm growth,
    activation-flow variance, circuit complexity, log variance growth, log norm growth) and
    the first-step closed-book top-1 log-probability, with RADAR's ensemble. The full
    method runs through ``mnemoscope radar``.
    """

    requires: ClassVar[frozenset[Requirement]] = frozenset({"pairs"})
    supervised: ClassVar[bool] = True

    def __init__(self, *, n_estimators: int = 100, random_state: int = 0):
        self.n_estimators = n_estimators
        self.random_state = random_state

    def features(self, data: MembershipData) -> np.ndarray:
        rows = []
        for t in data.require("pairs"):
            if t.h_with is None or t.h_without is None:
                raise ValueError(f"pair {t.id}: hidden states were not captured")
            first = float(t.topk_logprobs_without[0, 0]) if t.topk_logprobs_without.size else math.log(1e-12)
            rows.append(_pair_hidden_features(t.h_with) + _pair_hidden_features(t.h_without) + [first])
        return np.asarray(rows, dtype=np.float64)

    def make_estimator(self) -> RadarEnsemble:
        names = (*(f"{p}_{i}" for p in ("with", "without") for i in range(6)), "closed_book_top1")
        return RadarEnsemble(
            feature_names=names, n_estimators=self.n_estimators, random_state=self.random_state
        )
