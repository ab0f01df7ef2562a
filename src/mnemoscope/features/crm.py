"""CRM's per-sample numbers from paired traces (pure functions, no model, no fitting).

CRM (Computational Reality Monitoring) looks at three levels of a pair traced with and
without its context:

* **Level 1** (black box): ``1 - cos(enc(y_0), enc(y_c))`` between sentence embeddings of
  the no-context and with-context generations (paper eq. 3). The embeddings come from
  :mod:`mnemoscope.models.embedder`; this module only takes the vectors.
* **Level 2** (grey box): the per-step KL(p(.|c,q,y<t) || p(.|q,y<t)) series of the pair,
  aggregated into mean, max, variance, early and late means and the trend (slope).
* **Level 3** (white box): the displacement ``d_l = h_l^c - h_l^0`` of the last prompt
  token at every layer ``l = 0..L`` (hidden-state convention of
  :mod:`mnemoscope.trace.types`: row 0 is the embedding output, row L is after the final
  norm). Projections on fitted directions (the LTS) live in :mod:`mnemoscope.detectors.crm`,
  because directions are fitted.

:class:`CRMData` bundles these arrays for ``n`` samples so that estimators can be
cross-validated on it (it supports ``subset(idx)``, which :mod:`mnemoscope.stats.cv` uses).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from mnemoscope.errors import InputError
from mnemoscope.trace.types import PairTrace

__all__ = [
    "KL_FEATURES",
    "CRMData",
    "crm_data_from_pairs",
    "embedding_distance",
    "kl_aggregates",
]

KL_FEATURES = ("kl_mean", "kl_max", "kl_var", "kl_early", "kl_late", "kl_trend")


def kl_aggregates(kl_steps: npt.ArrayLike, split: int | None = None) -> np.ndarray:
    """Level-2 statistics of one KL series: mean, max, var, early mean, late mean, slope.

    Args:
        kl_steps: ``[step]`` KL(p_with || p_without) at each generated position.
        split: the early segment is the first ``split`` steps, the late one the rest.
            ``None`` (default) splits at ``ceil(T/2)`` of this series. The paper's "first
            32 vs remaining" is ``split=32``; with T = 32 generated tokens its late segment
            is always empty, and an empty segment's mean is defined as 0.0 (a constant
            feature), which is why it is not our default.

    Returns:
        ``[6]`` in the order of :data:`KL_FEATURES`. The slope is the least-squares slope of
        KL_t against t (0.0 for a single step).

    Example:
        >>> kl_aggregates([1.0, 2.0, 3.0, 4.0]).round(3).tolist()
        [2.5, 4.0, 1.25, 1.5, 3.5, 1.0]
        >>> kl_aggregates([1.0, 2.0, 3.0, 4.0], split=32)[3:5].tolist()
        [2.5, 0.0]
    """
    k = np.asarray(kl_steps, dtype=np.float64).ravel()
    if k.size == 0:
        raise InputError("the KL series is empty (no generated step)", field="kl_steps")
    if not np.isfinite(k).all():
        raise InputError("the KL series contains non-finite values", field="kl_steps")
    n = k.size
    s = (n + 1) // 2 if split is None else int(split)
    if s < 1:
        raise InputError(f"kl split must be >= 1, got {split}", field="kl_split")
    early, late = k[:s], k[s:]
    if n > 1:
        t = np.arange(n, dtype=np.float64)
        slope = float(np.polyfit(t, k, 1)[0])
    else:
        slope = 0.0
    return np.array(
        [
            k.mean(),
            k.max(),
            k.var(),
            early.mean() if early.size else 0.0,
            late.mean() if late.size else 0.0,
            slope,
        ]
    )


def embedding_distance(a: npt.ArrayLike, b: npt.ArrayLike) -> np.ndarray:
    """Row-wise ``1 - cos(a_i, b_i)``; a zero vector (empty text) has distance 1 to anything.

    Example:
        >>> embedding_distance([[1.0, 0.0], [1.0, 0.0]], [[1.0, 0.0], [0.0, 2.0]]).tolist()
        [0.0, 1.0]
    """
    x = np.atleast_2d(np.asarray(a, dtype=np.float64))
    y = np.atleast_2d(np.asarray(b, dtype=np.float64))
    if x.shape != y.shape:
        raise InputError(f"embedding shapes differ: {x.shape} vs {y.shape}")
    nx = np.linalg.norm(x, axis=1)
    ny = np.linalg.norm(y, axis=1)
    denom = nx * ny
    cos = np.divide((x * y).sum(1), denom, out=np.zeros(len(x)), where=denom > 0)
    return np.clip(1.0 - cos, 0.0, 2.0)


@dataclass(frozen=True, eq=False)
class CRMData:
    """CRM inputs of ``n`` samples, sliceable by sample for cross-validation.

    Attributes:
        ids: sample ids.
        labels: ``[n]`` 1 = member context, 0 = non-member; ``None`` when unlabelled.
        disp: ``[n layer d]`` displacement h_with - h_without at the last prompt token
            (float32), layer 0 = embeddings, layer L = after the final norm.
        surface: ``[n k]`` Level-1 and Level-2 features, named by ``surface_names``.
        surface_names: ``("l1_embed_dist", "kl_mean", ...)``; Level 1 is absent when no
            embedder was available.
        extras: other per-sample arrays with ``n`` rows (e.g. ``"h_without"`` ``[n layer d]``,
            ``"logit_lens_kl"`` ``[n layer]``, ``"attn_flow"`` ``[n L]``, ``"grad_norm"``,
            ``"static_hidden"`` ``[n d]``); baselines declare which they need.
    """

    ids: tuple[str, ...]
    labels: np.ndarray | None
    disp: np.ndarray
    surface: np.ndarray
    surface_names: tuple[str, ...]
    extras: Mapping[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.ids)
        if self.disp.ndim != 3 or self.disp.shape[0] != n:
            raise InputError(f"disp must be [n layer d] with n={n}, got {self.disp.shape}", field="disp")
        if self.surface.shape != (n, len(self.surface_names)):
            raise InputError(
                f"surface must be [n, {len(self.surface_names)}], got {self.surface.shape}", field="surface"
            )
        if self.labels is not None and self.labels.shape != (n,):
            raise InputError(f"labels must be [{n}], got {self.labels.shape}", field="labels")
        for k, v in self.extras.items():
            if v.shape[0] != n:
                raise InputError(f"extra '{k}' has {v.shape[0]} rows for {n} samples", field=k)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def n_layers(self) -> int:
        """Number of hidden-state rows (L + 1)."""
        return int(self.disp.shape[1])

    @property
    def d_model(self) -> int:
        return int(self.disp.shape[2])

    def subset(self, idx: npt.ArrayLike) -> CRMData:
        """The samples at ``idx`` (integer indices or a boolean mask)."""
        i = np.asarray(idx)
        if i.dtype == bool:
            i = np.flatnonzero(i)
        return CRMData(
            ids=tuple(self.ids[int(j)] for j in i),
            labels=None if self.labels is None else self.labels[i],
            disp=self.disp[i],
            surface=self.surface[i],
            surface_names=self.surface_names,
            extras={k: v[i] for k, v in self.extras.items()},
        )

    def surface_columns(self, names: Sequence[str]) -> np.ndarray:
        """Columns of ``surface`` by name (unknown names raise with the known ones)."""
        cols = []
        for n in names:
            if n not in self.surface_names:
                raise InputError(f"surface feature '{n}' is not available (have {list(self.surface_names)})")
            cols.append(self.surface_names.index(n))
        return self.surface[:, cols]

    def extra(self, name: str) -> np.ndarray:
        if name not in self.extras:
            raise InputError(
                f"this analysis needs '{name}', which was not extracted (have {sorted(self.extras)}); "
                "re-run `mnemoscope crm extract` with it enabled"
            )
        return self.extras[name]

    def with_labels(self, labels: npt.ArrayLike) -> CRMData:
        return CRMData(
            self.ids,
            np.asarray(labels, dtype=np.int64),
            self.disp,
            self.surface,
            self.surface_names,
            self.extras,
        )


def crm_data_from_pairs(
    pairs: Sequence[PairTrace],
    *,
    embeddings: tuple[np.ndarray, np.ndarray] | None = None,
    kl_split: int | None = None,
    extras: Mapping[str, np.ndarray] | None = None,
    keep_without: bool = False,
) -> CRMData:
    """Build :class:`CRMData` from paired traces (which must carry hidden states).

    Args:
        pairs: traces with ``h_with``/``h_without``; all of one model (same layer count).
        embeddings: ``(emb_with, emb_without)`` ``[n dim]`` sentence embeddings of the
            with-context and no-context generations, for Level 1 (omitted when ``None``).
        kl_split: see :func:`kl_aggregates`.
        extras: more per-sample arrays to carry (aligned with ``pairs``).
        keep_without: also keep ``h_without`` as the extra ``"h_without"`` (raw probes use it).

    Raises:
        InputError: naming the record, for a trace without hidden states or a layer count
            that differs from the first trace's.
    """
    if not pairs:
        raise InputError("no paired traces")
    disp = []
    h0 = []
    surface = []
    shape = None
    for p in pairs:
        if p.h_with is None or p.h_without is None:
            raise InputError(
                "the trace has no hidden states (traced with hidden=False)", record=p.id, field="h_with"
            )
        if shape is None:
            shape = p.h_with.shape
        if p.h_with.shape != shape or p.h_without.shape != shape:
            raise InputError(
                f"hidden states of shape {p.h_with.shape} differ from the first trace's {shape} "
                "(traces of different models?)",
                record=p.id,
                field="h_with",
            )
        try:
            surface.append(kl_aggregates(p.kl_steps, kl_split))
        except InputError as e:
            raise InputError(e.reason, record=p.id, field="kl_steps") from e
        disp.append(p.h_with.astype(np.float32) - p.h_without.astype(np.float32))
        if keep_without:
            h0.append(p.h_without.astype(np.float32))
    names: tuple[str, ...] = KL_FEATURES
    surf = np.asarray(surface)
    if embeddings is not None:
        ew, eo = embeddings
        if len(ew) != len(pairs) or len(eo) != len(pairs):
            raise InputError(f"embeddings have {len(ew)}/{len(eo)} rows for {len(pairs)} traces")
        surf = np.column_stack([embedding_distance(eo, ew), surf])
        names = ("l1_embed_dist", *KL_FEATURES)
    labels_list = [p.label for p in pairs]
    labels = None if any(v is None for v in labels_list) else np.asarray(labels_list, dtype=np.int64)
    ex: dict[str, Any] = dict(extras or {})
    if keep_without:
        ex["h_without"] = np.stack(h0)
    return CRMData(
        ids=tuple(p.id for p in pairs),
        labels=labels,
        disp=np.stack(disp),
        surface=surf,
        surface_names=names,
        extras=ex,
    )
