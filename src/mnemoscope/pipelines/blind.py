"""The blind baselines on a labelled set of texts, and the shift diagnostic.

One function, :func:`blind_baselines`, used by the leaderboard (``bench run``) and by
``crm eval``: it cross-validates each blind method of :mod:`mnemoscope.detectors.blind` on
the texts (every fitted step inside the folds), summarises the out-of-fold scores with
bootstrap CIs, and passes the rows to :func:`~mnemoscope.detectors.blind.shift_diagnostic`.
A method that cannot be measured (a single class, fewer samples per class than folds, no
text, no sentence encoder installed) becomes a row ``{"status": "not measured", "reason"}``
instead of an exception, so a report is never lost to its baseline.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mnemoscope.detectors.base import METHODS, MembershipData
from mnemoscope.detectors.blind import BLIND_METHODS, shift_diagnostic
from mnemoscope.errors import InputError, MnemoscopeError

__all__ = ["BlindReport", "blind_baselines", "text_embeddings"]

log = logging.getLogger(__name__)


@dataclass
class BlindReport:
    """What :func:`blind_baselines` measured.

    Attributes:
        entries: one leaderboard-style row per method: ``method``, ``roc_auc``,
            ``roc_auc_ci``, the TPR/FPR metrics, ``protocol``, ``blind: True``; or
            ``status: "not measured"`` with ``reason`` (then ``roc_auc`` is None).
        scores: out-of-fold scores (higher = member) of each measured method.
        diagnostic: :func:`~mnemoscope.detectors.blind.shift_diagnostic` of the entries.
    """

    entries: list[dict[str, Any]]
    scores: dict[str, np.ndarray] = field(default_factory=dict)
    diagnostic: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"entries": self.entries, **self.diagnostic}


def text_embeddings(
    texts: Sequence[str], *, embedder: Any = None, cache: str | Path | None = None, key: str = ""
) -> np.ndarray:
    """Sentence embeddings of ``texts`` (the offline MiniLM encoder unless ``embedder`` is
    given), cached as ``cache/text-embeddings-<key>.npz`` when ``cache`` is set."""
    from mnemoscope.io import atomic_savez

    path = Path(cache) / f"text-embeddings-{key}.npz" if cache is not None and key else None
    if path is not None and path.is_file():
        with np.load(path, allow_pickle=False) as z:
            emb = z["emb"]
        if emb.shape[0] == len(texts):
            return np.asarray(emb)
    if embedder is None:
        from mnemoscope.models.embedder import load_embedder

        embedder = load_embedder("default")
    emb = np.asarray(embedder.encode(list(texts)), dtype=np.float32)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_savez(path, {"emb": emb})
    return emb


def _not_measured(method: str, reason: str, n: int, labels: np.ndarray) -> dict[str, Any]:
    n_pos = int((labels == 1).sum())
    return {
        "method": method,
        "status": "not measured",
        "reason": reason,
        "roc_auc": None,
        "roc_auc_ci": None,
        "n": n,
        "n_pos": n_pos,
        "n_neg": n - n_pos,
        "blind": True,
    }


def blind_baselines(
    ids: Sequence[str],
    texts: Sequence[str] | None,
    labels: Sequence[int] | np.ndarray,
    *,
    methods: Sequence[str] = BLIND_METHODS,
    seed: int = 0,
    n_splits: int = 5,
    n_resamples: int = 1000,
    embed: bool = True,
    embedder: Any = None,
    cache: str | Path | None = None,
    cache_key: str = "",
    progress: Callable[[str], None] | None = None,
) -> BlindReport:
    """Cross-validated blind baselines and the shift diagnostic of one labelled set of texts.

    Args:
        ids, texts, labels: the documents (label 1 = member). ``texts=None`` (pre-computed
            scores, no text) skips every blind method with that reason.
        methods: blind method names (registered in ``METHODS``).
        seed, n_splits, n_resamples: the same CV folds and bootstrap as the caller's methods.
        embed: compute ``blind_embedding`` (loads the sentence encoder); ``False`` skips it.
        embedder: a loaded :class:`~mnemoscope.models.embedder.Embedder` (default: MiniLM).
        cache, cache_key: cache the text embeddings on disk.
        progress: called with a short message before each method (for terminals).

    Returns:
        A :class:`BlindReport`; it never raises for data it cannot measure.
    """
    from mnemoscope.stats import cross_val_scores, summarize

    y = np.asarray(labels, dtype=int)
    n = int(y.size)
    unknown = [m for m in methods if m not in BLIND_METHODS]
    if unknown:
        raise InputError(
            f"not blind baselines: {', '.join(unknown)} (expected some of {', '.join(BLIND_METHODS)})"
        )
    entries: list[dict[str, Any]] = []
    scores: dict[str, np.ndarray] = {}
    no_text = texts is None or not any(isinstance(t, str) and t.strip() for t in texts)
    data: MembershipData | None = None
    if not no_text:
        assert texts is not None
        if len(texts) != n or len(ids) != n:
            raise InputError(f"ids, texts and labels differ in length: {len(ids)}, {len(texts)}, {n}")
        data = MembershipData(ids=list(ids), texts=[t if isinstance(t, str) else "" for t in texts], labels=y)
    for name in methods:
        if data is None:
            entries.append(
                _not_measured(name, "no text in this dataset (pre-computed scores): skipped", n, y)
            )
            continue
        if name == "blind_embedding":
            if not embed:
                entries.append(_not_measured(name, "skipped (embed=False / --no-blind-embedding)", n, y))
                continue
            if data.text_embeddings is None:
                try:
                    if progress:
                        progress("embedding the texts (blind_embedding)")
                    data.text_embeddings = text_embeddings(
                        data.texts, embedder=embedder, cache=cache, key=cache_key
                    )
                except MnemoscopeError as e:
                    entries.append(_not_measured(name, f"no sentence encoder: {e}", n, y))
                    continue
        if progress:
            progress(name)
        method = METHODS.build(name)
        try:
            cv = cross_val_scores(
                method.make_estimator(),
                method.features(data),
                y,
                n_splits=n_splits,
                seed=seed,
                n_resamples=n_resamples,
            )
        except InputError as e:
            entries.append(_not_measured(name, e.reason, n, y))
            continue
        oof = np.asarray(cv.oof_scores, dtype=float)
        scores[name] = oof
        summary = summarize(oof, y, rng=seed, n_resamples=n_resamples)
        entries.append(
            {"method": name, **summary, "protocol": f"{n_splits}-fold CV ({cv.protocol})", "blind": True}
        )
    return BlindReport(entries=entries, scores=scores, diagnostic=shift_diagnostic(entries))
