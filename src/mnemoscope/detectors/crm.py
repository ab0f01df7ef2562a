"""CRM as scikit-learn estimators over :class:`~mnemoscope.features.crm.CRMData`.

The Latent Trajectory Shift (paper eq. 1) of layer ``l`` is ``LTS_l = <h_l^c - h_l^0, v_l>``.
:class:`LTSProjector` fits the directions ``v_l`` and the target layers; everything that
is fitted (layer selection, directions, scalers, classifiers) sits inside the estimator,
so :func:`mnemoscope.stats.cross_val_scores` fits it on training folds only (our default,
"leakage-free"). The paper instead fits directions once on a fixed 100-sample calibration
subset and then cross-validates over all samples, calibration samples included (its
"paper" protocol, :func:`mnemoscope.stats.paper_protocol_cv`); both are available.

Directions (``direction``):

* ``"pc"``: principal component number ``pc_rank`` (1 = PC1, the paper's default) of the
  *centred* displacement vectors of the layer (SVD of the centred matrix; "PC" implies
  centring). The sign of a PC is arbitrary; we orient it so that the mean training
  projection is >= 0, which makes trajectories comparable across runs.
* ``"mean_diff"``: the supervised mean-difference direction of paper eq. 2,
  ``(E[d|member] - E[d|non-member]) / ||.||``.

Target layers (``layers="auto"``, paper section 2 / appendix P.3: "layers with explained
variance ratio > 0.01"). Our reading, ``selection="variance_share"``: a layer's share of
the total displacement variance summed over layers, ``tr Cov(d_l) / sum_k tr Cov(d_k)``,
must exceed ``variance_threshold``. This filters near-zero-variance layers (the
embedding row, whose displacement at the same last token is exactly 0) and keeps 9-22 of
32-48 layers in the paper's models, as the paper reports. ``"pc1_ratio"`` (PC1's
explained-variance ratio within the layer) is the other possible reading; ``"all"``
keeps every layer with non-zero variance.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.decomposition import PCA
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import FeatureUnion, Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.validation import check_is_fitted

from mnemoscope.detectors.base import MembershipData, MembershipMethod, Requirement
from mnemoscope.errors import InputError
from mnemoscope.features.crm import KL_FEATURES, CRMData, crm_data_from_pairs
from mnemoscope.stats.metrics import roc_auc

__all__ = [
    "CRMFeaturizer",
    "CRMMethod",
    "ConcatPCA",
    "DisplacementNorms",
    "ExtraFeatures",
    "LTSProjector",
    "LTSSummary",
    "RawProbe",
    "crm_pipeline",
    "make_classifier",
    "select_layers",
]

Direction = Literal["pc", "mean_diff"]
Selection = Literal["variance_share", "pc1_ratio", "all"]
ClassifierKind = Literal["lr", "xgb"]
Level = Literal["l1", "l2", "l3"]
_ZERO = 1e-12


def _check_data(X: Any) -> CRMData:
    if not isinstance(X, CRMData):
        raise InputError(f"CRM estimators take CRMData, got {type(X).__name__}")
    return X


def _check_layers(layers: Sequence[int], n_layers: int) -> np.ndarray:
    arr = np.asarray(list(layers), dtype=np.int64)
    if arr.size == 0:
        raise InputError("no layers requested", field="layers")
    bad = [int(v) for v in arr if not 0 <= v < n_layers]
    if bad:
        raise InputError(
            f"layer(s) {bad} requested, but the model has hidden-state layers 0..{n_layers - 1} "
            "(0 = embeddings, the last = after the final norm)",
            field="layers",
        )
    return arr


def layer_variance(disp: np.ndarray) -> np.ndarray:
    """``[layer]`` total variance ``tr Cov(d_l)`` of the displacement at each layer (float64)."""
    return disp.var(axis=0, dtype=np.float64).sum(axis=-1)  # type: ignore[no-any-return]


def select_layers(
    disp: np.ndarray, selection: Selection = "variance_share", threshold: float = 0.01
) -> np.ndarray:
    """Target layers by the explained-variance criterion (see the module doc).

    Raises:
        InputError: zero-variance displacement at every layer (identical paths, e.g. empty
            contexts), or no layer passing the threshold (the message gives the largest value).

    Example:
        >>> rng = np.random.default_rng(0)
        >>> d = rng.normal(size=(20, 4, 3)) * np.array([0.0, 0.01, 1.0, 1.0])[None, :, None]
        >>> select_layers(d).tolist()
        [2, 3]
    """
    var = layer_variance(disp)
    total = float(var.sum())
    if not np.isfinite(total) or total <= _ZERO:
        raise InputError(
            "zero-variance displacement: h_with - h_without is the same for every sample at every layer "
            "(identical with- and without-context paths, e.g. empty contexts?)",
            field="disp",
        )
    nonzero = var > _ZERO * max(total, 1.0)
    if selection == "all":
        return np.flatnonzero(nonzero)
    if selection == "variance_share":
        score = var / total
    elif selection == "pc1_ratio":
        score = np.zeros(var.size)
        for layer in np.flatnonzero(nonzero):
            x = disp[:, layer].astype(np.float64)
            s = np.linalg.svd(x - x.mean(0), compute_uv=False)
            score[layer] = s[0] ** 2 / max(float((s**2).sum()), _ZERO)
    else:
        raise InputError(f"unknown layer selection '{selection}' (variance_share, pc1_ratio, all)")
    chosen = np.flatnonzero((score > threshold) & nonzero)
    if chosen.size == 0:
        raise InputError(
            f"no layer passes {selection} > {threshold} (largest: {score.max():.4g}); lower --variance-threshold",
            field="variance_threshold",
        )
    return chosen


def _fit_direction(
    d: np.ndarray, y: np.ndarray | None, direction: Direction, pc_rank: int, center: bool
) -> np.ndarray:
    x = d.astype(np.float64)
    if direction == "mean_diff":
        if y is None or np.unique(y).size < 2:
            raise InputError("the mean-difference direction needs labels of both classes", field="y")
        v = x[y == 1].mean(0) - x[y == 0].mean(0)
    elif direction == "pc":
        xc = x - x.mean(0) if center else x
        _, s, vt = np.linalg.svd(xc, full_matrices=False)
        if pc_rank > vt.shape[0] or s[pc_rank - 1] <= _ZERO:
            return np.zeros(x.shape[1])
        v = vt[pc_rank - 1]
    else:
        raise InputError(f"unknown direction '{direction}' (pc, mean_diff)")
    norm = float(np.linalg.norm(v))
    if norm <= _ZERO:
        return np.zeros(x.shape[1])
    v = v / norm
    if direction == "pc" and float((x @ v).mean()) < 0:  # orient: mean training projection >= 0
        v = -v
    return v


class LTSProjector(TransformerMixin, BaseEstimator):
    """Per-layer directions and the LTS projection ``[n, |layers|]``.

    Args:
        direction: ``"pc"`` or ``"mean_diff"`` (module doc).
        pc_rank: which PC with ``direction="pc"`` (1..; the paper's PC rank ablation uses 1..7).
        layers: ``"auto"`` (selection below) or explicit hidden-state layer indices.
        selection, variance_threshold: the target-layer criterion with ``layers="auto"``.
        center: centre the displacements before the SVD (``"pc"`` only).
        exclude: layers removed after selection (leave-one-layer-out).

    Fitted attributes:
        layers_: selected layer indices; directions_: ``[len(layers_), d]`` unit vectors
        (a zero row where a layer has no such component); lts_mean_, lts_std_: training
        mean/std of each LTS (the audit's anomaly rule); variance_share_: ``[layer]``.
    """

    def __init__(
        self,
        *,
        direction: Direction = "pc",
        pc_rank: int = 1,
        layers: str | Sequence[int] = "auto",
        selection: Selection = "variance_share",
        variance_threshold: float = 0.01,
        center: bool = True,
        exclude: Sequence[int] = (),
    ):
        self.direction = direction
        self.pc_rank = pc_rank
        self.layers = layers
        self.selection = selection
        self.variance_threshold = variance_threshold
        self.center = center
        self.exclude = exclude

    def fit(self, X: CRMData, y: Any = None) -> LTSProjector:
        data = _check_data(X)
        if len(data) < 2:
            raise InputError(f"LTS directions need at least 2 samples, got {len(data)}")
        if int(self.pc_rank) < 1:
            raise InputError(f"pc_rank must be >= 1, got {self.pc_rank}", field="pc_rank")
        var = layer_variance(data.disp)
        total = float(var.sum())
        if total <= _ZERO:
            select_layers(data.disp)  # raises the zero-variance error
        self.variance_share_ = var / total
        if isinstance(self.layers, str):
            if self.layers != "auto":
                raise InputError(
                    f"layers must be 'auto' or a list of indices, got '{self.layers}'", field="layers"
                )
            self.layers_ = select_layers(data.disp, self.selection, self.variance_threshold)
        else:
            self.layers_ = _check_layers(self.layers, data.n_layers)
        if len(self.exclude):
            self.layers_ = np.array(
                [v for v in self.layers_ if int(v) not in set(self.exclude)], dtype=np.int64
            )
            if self.layers_.size == 0:
                raise InputError("every target layer is excluded", field="exclude")
        yy = None if y is None else np.asarray(y)
        self.directions_ = np.stack(
            [
                _fit_direction(data.disp[:, layer], yy, self.direction, int(self.pc_rank), self.center)
                for layer in self.layers_
            ]
        )
        lts = self._project(data)
        self.lts_mean_ = lts.mean(0)
        self.lts_std_ = lts.std(0)
        self.n_features_in_ = int(self.layers_.size)
        return self

    def _project(self, data: CRMData) -> np.ndarray:
        d = data.disp[:, self.layers_].astype(np.float64)
        return np.einsum("nld,ld->nl", d, self.directions_)

    def transform(self, X: CRMData) -> np.ndarray:
        check_is_fitted(self, "directions_")
        data = _check_data(X)
        if data.n_layers <= int(self.layers_.max()) or data.d_model != self.directions_.shape[1]:
            raise InputError(
                f"data has {data.n_layers} layers x d={data.d_model}; the projector was fitted on "
                f"d={self.directions_.shape[1]} with layers up to {int(self.layers_.max())} (another model?)"
            )
        return self._project(data)

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        check_is_fitted(self, "layers_")
        return np.array([f"lts_L{int(v)}" for v in self.layers_], dtype=object)


class CRMFeaturizer(TransformerMixin, BaseEstimator):
    """The CRM feature vector ``[L1, L2, L3]`` (any subset via ``levels``).

    L1 = ``l1_embed_dist``; L2 = the KL aggregates of :data:`KL_FEATURES`; L3 = the LTS of
    an inner :class:`LTSProjector` built from the remaining parameters. ``levels="available"``
    takes L1 when the data has it, and L2 + L3 always.
    """

    def __init__(
        self,
        *,
        levels: Sequence[Level] | Literal["available"] = ("l1", "l2", "l3"),
        direction: Direction = "pc",
        pc_rank: int = 1,
        layers: str | Sequence[int] = "auto",
        selection: Selection = "variance_share",
        variance_threshold: float = 0.01,
        exclude: Sequence[int] = (),
    ):
        self.levels = levels
        self.direction = direction
        self.pc_rank = pc_rank
        self.layers = layers
        self.selection = selection
        self.variance_threshold = variance_threshold
        self.exclude = exclude

    def _surface_names(self, data: CRMData) -> list[str]:
        names: list[str] = []
        if isinstance(self.levels, str) and self.levels == "available":
            levels = {"l2", "l3"} | ({"l1"} if "l1_embed_dist" in data.surface_names else set())
        else:
            levels = set(self.levels)
        self.levels_ = levels
        unknown = levels - {"l1", "l2", "l3"}
        if unknown or not levels:
            raise InputError(f"levels must be a non-empty subset of l1, l2, l3, got {list(self.levels)}")
        if "l1" in levels:
            if "l1_embed_dist" not in data.surface_names:
                raise InputError(
                    "Level 1 needs the no-context generation and an embedder; these traces have none "
                    "(trace with answer_without=True, or use levels l2, l3)"
                )
            names.append("l1_embed_dist")
        if "l2" in levels:
            names.extend(KL_FEATURES)
        return names

    def fit(self, X: CRMData, y: Any = None) -> CRMFeaturizer:
        data = _check_data(X)
        self.surface_names_ = self._surface_names(data)
        self.projector_: LTSProjector | None = None
        if "l3" in self.levels_:
            self.projector_ = LTSProjector(
                direction=self.direction,
                pc_rank=self.pc_rank,
                layers=self.layers,
                selection=self.selection,
                variance_threshold=self.variance_threshold,
                exclude=self.exclude,
            ).fit(data, y)
        return self

    def transform(self, X: CRMData) -> np.ndarray:
        check_is_fitted(self, "surface_names_")
        data = _check_data(X)
        parts = [data.surface_columns(self.surface_names_)] if self.surface_names_ else []
        if self.projector_ is not None:
            parts.append(self.projector_.transform(data))
        return np.column_stack(parts).astype(np.float64)

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        check_is_fitted(self, "surface_names_")
        names = list(self.surface_names_)
        if self.projector_ is not None:
            names.extend(self.projector_.get_feature_names_out())
        return np.array(names, dtype=object)


def _best_columns(F: np.ndarray, y: Any, k: int) -> np.ndarray:
    """Indices of the ``k`` columns with the largest |AUC - 0.5| on the training data."""
    if y is None:
        raise InputError("choosing the best layers needs labels", field="y")
    yy = np.asarray(y)
    score = np.array([abs((roc_auc(F[:, j], yy) or 0.5) - 0.5) for j in range(F.shape[1])])
    return np.sort(np.argsort(-score, kind="stable")[:k])


class LTSSummary(TransformerMixin, BaseEstimator):
    """Access-matched baselines from the same LTS (paper Q.2).

    ``mode``: ``"single"`` (the LTS of ``layer`` only), ``"best"`` (the one target layer with
    the largest training-fold |AUC - 0.5|), ``"mean"`` (mean LTS over the target layers, 1-d), ``"pca2"`` (2 PCs of the LTS vector), ``"top3"`` (the 3 target layers with
    the largest training-fold |AUC - 0.5|). Every choice is fitted on the training fold.
    """

    def __init__(
        self,
        *,
        mode: Literal["single", "best", "mean", "pca2", "top3"] = "mean",
        layer: int | None = None,
        direction: Direction = "pc",
        variance_threshold: float = 0.01,
    ):
        self.mode = mode
        self.layer = layer
        self.direction = direction
        self.variance_threshold = variance_threshold

    def fit(self, X: CRMData, y: Any = None) -> LTSSummary:
        data = _check_data(X)
        if self.mode == "single":
            if self.layer is None:
                raise InputError("mode='single' needs a layer", field="layer")
            layers: str | list[int] = [int(self.layer)]
        else:
            layers = "auto"
        self.projector_ = LTSProjector(
            direction=self.direction, layers=layers, variance_threshold=self.variance_threshold
        ).fit(data, y)
        F = self.projector_.transform(data)
        if self.mode == "pca2":
            self.pca_ = PCA(n_components=min(2, F.shape[1], len(data) - 1)).fit(F)
        elif self.mode in ("top3", "best"):
            self.columns_ = _best_columns(F, y, 3 if self.mode == "top3" else 1)
        elif self.mode not in ("single", "mean"):
            raise InputError(f"unknown LTS summary mode '{self.mode}'")
        return self

    def transform(self, X: CRMData) -> np.ndarray:
        check_is_fitted(self, "projector_")
        F = self.projector_.transform(_check_data(X))
        if self.mode == "mean":
            return F.mean(1, keepdims=True)  # type: ignore[no-any-return]
        if self.mode == "pca2":
            return self.pca_.transform(F)  # type: ignore[no-any-return]
        if self.mode in ("top3", "best"):
            return F[:, self.columns_]
        return F


class DisplacementNorms(TransformerMixin, BaseEstimator):
    """The L2-norm baseline (paper appendix E): ``||h_l^c - h_l^0||`` per target layer.

    ``mode``: ``"multilayer"`` (the vector), ``"mean"`` (its mean, 1-d), ``"best"`` (the one
    layer with the largest training-fold |AUC - 0.5|), ``"pca2"`` (2 PCs of the standardised
    vector). Target layers: those with non-zero displacement variance.
    """

    def __init__(self, *, mode: Literal["multilayer", "mean", "best", "pca2"] = "multilayer"):
        self.mode = mode

    def fit(self, X: CRMData, y: Any = None) -> DisplacementNorms:
        data = _check_data(X)
        self.layers_ = select_layers(data.disp, "all")
        N = self._norms(data)
        if self.mode == "best":
            self.columns_ = _best_columns(N, y, 1)
        elif self.mode == "pca2":
            self.scaler_ = StandardScaler().fit(N)
            self.pca_ = PCA(n_components=min(2, N.shape[1], len(data) - 1)).fit(self.scaler_.transform(N))
        elif self.mode not in ("multilayer", "mean"):
            raise InputError(f"unknown norm mode '{self.mode}'")
        return self

    def _norms(self, data: CRMData) -> np.ndarray:
        return np.linalg.norm(data.disp[:, self.layers_].astype(np.float64), axis=-1)  # type: ignore[no-any-return]

    def transform(self, X: CRMData) -> np.ndarray:
        check_is_fitted(self, "layers_")
        N = self._norms(_check_data(X))
        if self.mode == "mean":
            return N.mean(1, keepdims=True)  # type: ignore[no-any-return]
        if self.mode == "best":
            return N[:, self.columns_]
        if self.mode == "pca2":
            return self.pca_.transform(self.scaler_.transform(N))  # type: ignore[no-any-return]
        return N


class RawProbe(TransformerMixin, BaseEstimator):
    """Raw hidden-state difference probes (paper P.4 / R), an upper-bound diagnostic.

    ``kind``: ``"final"`` (the last layer's displacement, d-dim), ``"mean"`` (the mean
    displacement over layers), ``"pca8"`` (per layer, the first ``n_components`` PCs of the
    displacement fitted on the training fold, concatenated over the non-zero layers).
    """

    def __init__(self, *, kind: Literal["final", "mean", "pca8"] = "final", n_components: int = 8):
        self.kind = kind
        self.n_components = n_components

    def fit(self, X: CRMData, y: Any = None) -> RawProbe:
        data = _check_data(X)
        if self.kind == "pca8":
            self.layers_ = select_layers(data.disp, "all")
            k = min(int(self.n_components), len(data) - 1, data.d_model)
            self.pcas_ = [
                PCA(n_components=k).fit(data.disp[:, layer].astype(np.float64)) for layer in self.layers_
            ]
        elif self.kind not in ("final", "mean"):
            raise InputError(f"unknown raw probe '{self.kind}'")
        self.fitted_ = True
        return self

    def transform(self, X: CRMData) -> np.ndarray:
        check_is_fitted(self, "fitted_")
        data = _check_data(X)
        if self.kind == "final":
            return data.disp[:, -1].astype(np.float64)
        if self.kind == "mean":
            return data.disp.mean(1).astype(np.float64)  # type: ignore[no-any-return]
        return np.column_stack(
            [
                p.transform(data.disp[:, layer].astype(np.float64))
                for p, layer in zip(self.pcas_, self.layers_, strict=True)
            ]
        )


class ConcatPCA(TransformerMixin, BaseEstimator):
    """PCA-K of the concatenated displacement over the target layers (paper appendix I).

    The paper fits this PCA "on no-context training-fold states"; we fit it on the
    training-fold displacements that are projected (the only reading that is defined for
    the displacement vector), inside the fold.
    """

    def __init__(self, *, n_components: int = 4, variance_threshold: float = 0.01):
        self.n_components = n_components
        self.variance_threshold = variance_threshold

    def fit(self, X: CRMData, y: Any = None) -> ConcatPCA:
        data = _check_data(X)
        self.layers_ = select_layers(data.disp, "variance_share", self.variance_threshold)
        Z = self._flat(data)
        self.scaler_ = StandardScaler().fit(Z)
        k = min(int(self.n_components), len(data) - 1, Z.shape[1])
        self.pca_ = PCA(n_components=k).fit(self.scaler_.transform(Z))
        return self

    def _flat(self, data: CRMData) -> np.ndarray:
        return data.disp[:, self.layers_].reshape(len(data), -1).astype(np.float64)

    def transform(self, X: CRMData) -> np.ndarray:
        check_is_fitted(self, "pca_")
        return self.pca_.transform(self.scaler_.transform(self._flat(_check_data(X))))  # type: ignore[no-any-return]


class ExtraFeatures(TransformerMixin, BaseEstimator):
    """An extracted per-sample array as features (logit-lens KL, attention flow, gradient
    norm, the static document state), flattened to ``[n, k]``; constant columns are dropped
    on the training fold."""

    def __init__(self, *, key: str = "logit_lens_kl"):
        self.key = key

    def fit(self, X: CRMData, y: Any = None) -> ExtraFeatures:
        F = self._get(_check_data(X))
        self.keep_ = np.flatnonzero(F.std(0) > _ZERO)
        if self.keep_.size == 0:
            raise InputError(f"'{self.key}' is constant over the training samples", field=self.key)
        return self

    def _get(self, data: CRMData) -> np.ndarray:
        return data.extra(self.key).reshape(len(data), -1).astype(np.float64)

    def transform(self, X: CRMData) -> np.ndarray:
        check_is_fitted(self, "keep_")
        return self._get(_check_data(X))[:, self.keep_]


def make_classifier(kind: ClassifierKind = "lr", *, random_state: int | None = None) -> Any:
    """The final classifier. ``"lr"``: logistic regression (L2, C=1, lbfgs); ``"xgb"``:
    XGBoost with 200 depth-3 trees, learning rate 0.05, row/column subsampling 0.8,
    one thread (the paper gives no hyperparameters; these are conservative for n ~ 250)."""
    if kind == "lr":
        return LogisticRegression(C=1.0, max_iter=5000, random_state=random_state)
    if kind == "xgb":
        try:
            from xgboost import XGBClassifier
        except ImportError as e:
            raise InputError("CRM-XGB needs xgboost (pip install xgboost-cpu, or xgboost)") from e
        return XGBClassifier(
            n_estimators=200,
            max_depth=3,
            learning_rate=0.05,
            subsample=0.8,
            colsample_bytree=0.8,
            n_jobs=1,
            random_state=random_state,
            eval_metric="logloss",
        )
    raise InputError(f"unknown classifier '{kind}' (lr, xgb)")


def crm_pipeline(
    featurizer: Any = None, classifier: ClassifierKind = "lr", **featurizer_params: Any
) -> Pipeline:
    """``featurizer -> StandardScaler -> classifier`` (the scaler is a no-op for XGBoost's
    trees but keeps the two pipelines identical up to the last step).

    ``featurizer`` defaults to :class:`CRMFeaturizer` built from ``featurizer_params``; pass a
    list of featurizers to concatenate them (e.g. CRM + L2 norms).
    """
    if featurizer is None:
        featurizer = CRMFeaturizer(**featurizer_params)
    elif isinstance(featurizer, (list, tuple)):
        featurizer = FeatureUnion([(f"f{i}", f) for i, f in enumerate(featurizer)])
    return Pipeline(
        [("features", featurizer), ("scale", StandardScaler()), ("clf", make_classifier(classifier))]
    )


class CRMMethod(MembershipMethod):
    """CRM in the membership leaderboard (supervised; fitted inside the leaderboard's folds).

    Level 1 is used when ``level1="auto"`` and the data carries ``answer_embeddings`` (the
    pipeline embeds the with- and no-context answers; the leaderboard's traces skip the
    no-context generation, so there CRM runs on L2 + L3). ``mnemoscope crm eval`` always has
    all three levels.
    """

    requires: ClassVar[frozenset[Requirement]] = frozenset({"pairs"})
    supervised: ClassVar[bool] = True

    def __init__(
        self,
        *,
        classifier: ClassifierKind = "lr",
        direction: Direction = "pc",
        level1: Literal["auto", "off"] = "auto",
        variance_threshold: float = 0.01,
    ):
        self.classifier = classifier
        self.direction = direction
        self.level1 = level1
        self.variance_threshold = variance_threshold

    def features(self, data: MembershipData) -> CRMData:  # type: ignore[override]
        """CRM's levels from the pairs; Level 1 when ``level1="auto"`` and the caller supplied
        ``answer_embeddings`` (a detector never loads the sentence encoder itself)."""
        pairs = data.require("pairs")
        embeddings = data.answer_embeddings if self.level1 == "auto" else None
        return crm_data_from_pairs(pairs, embeddings=embeddings).with_labels(data.labels)

    def make_estimator(self) -> Pipeline:
        return crm_pipeline(
            classifier=self.classifier,
            direction=self.direction,
            variance_threshold=self.variance_threshold,
            levels="available" if self.level1 == "auto" else ("l2", "l3"),
        )
