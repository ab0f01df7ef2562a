"""A fitted CRM in one file, loadable without pickle, bound to the model it was fitted on.

``crm fit`` writes ``crm.npz`` (``np.load(..., allow_pickle=False)``): per-layer
directions, the calibration mean/std of each layer's LTS (the audit server's anomaly
rule, CRM appendix V.1), the scaler and the classifier (logistic-regression weights, or
XGBoost's own JSON model as bytes), and a JSON header with the model identity, every
setting and a SHA-256 content hash. :func:`load_crm` refuses a file fitted for another
model (compare :attr:`FittedCRM.model`'s fingerprint) with :class:`ModelMismatchError`.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.pipeline import Pipeline

from mnemoscope.detectors.crm import CRMFeaturizer
from mnemoscope.errors import InputError, ModelMismatchError
from mnemoscope.features.crm import CRMData
from mnemoscope.identity import check_same_model
from mnemoscope.io import atomic_write

__all__ = ["FORMAT", "FittedCRM", "ModelMismatchError", "from_pipeline", "load_crm", "save_crm"]

FORMAT = "mnemoscope-crm/1"


def _identity(model: dict[str, Any]) -> str:
    return f"{model.get('name')} (fingerprint {str(model.get('fingerprint'))[:16]})"


@dataclass
class FittedCRM:
    """The arrays of a fitted CRM and what to do with them (no sklearn objects needed).

    Attributes:
        layers: ``[k]`` hidden-state rows of the target layers.
        directions: ``[k d]`` unit directions.
        lts_mean, lts_std: ``[k]`` calibration statistics of each layer's LTS.
        surface_names: Level-1/2 feature names used before the LTS columns.
        scaler_mean, scaler_scale: ``[f]`` standardisation of the feature vector.
        classifier: ``"lr"``, ``"xgb"`` or ``"none"`` (directions and calibration only).
        coef, intercept: logistic-regression weights (``"lr"``).
        xgb_json: XGBoost's model (``"xgb"``).
        model: identity of the model (``ModelInfo.to_dict()``).
        settings: how it was fitted (direction, selection, template, T, embedder, ...).
    """

    layers: np.ndarray
    directions: np.ndarray
    lts_mean: np.ndarray
    lts_std: np.ndarray
    surface_names: tuple[str, ...]
    scaler_mean: np.ndarray | None
    scaler_scale: np.ndarray | None
    classifier: str
    model: dict[str, Any]
    settings: dict[str, Any]
    coef: np.ndarray | None = None
    intercept: float | None = None
    xgb_json: bytes | None = None
    content_hash: str = ""
    metrics: dict[str, Any] = field(default_factory=dict)
    _booster: Any = field(default=None, repr=False)

    # -- identity -------------------------------------------------------------------------------

    def check_model(self, info: Any) -> None:
        """Raise :class:`ModelMismatchError` unless ``info`` (a ModelInfo or its dict) is our model."""
        check_same_model(
            self.model,
            info,
            what="this CRM artefact",
            remedy="fit a new one with `mnemoscope crm fit` on this model",
        )

    # -- inference ------------------------------------------------------------------------------

    def lts(self, disp: np.ndarray) -> np.ndarray:
        """``[n k]`` LTS of displacements ``[n layer d]`` (or ``[layer d]`` for one sample)."""
        d = np.asarray(disp, dtype=np.float64)
        single = d.ndim == 2
        if single:
            d = d[None]
        if d.ndim != 3 or d.shape[2] != self.directions.shape[1] or d.shape[1] <= int(self.layers.max()):
            raise InputError(
                f"displacement of shape {d.shape[1:]} does not fit this artefact "
                f"(d={self.directions.shape[1]}, layers up to {int(self.layers.max())})",
                field="disp",
            )
        out = np.einsum("nld,ld->nl", d[:, self.layers], self.directions)
        return out[0] if single else out

    def anomaly(self, lts: np.ndarray, k_sigma: float = 2.0) -> tuple[np.ndarray, np.ndarray, float]:
        """CRM appendix V.1: ``z_l = (LTS_l - mu_l) / sigma_l``; a layer is flagged when
        ``|z_l| > k_sigma``; the score is mean ``|z_l|``. Returns (z, flagged mask, score)."""
        z = (np.asarray(lts, dtype=np.float64) - self.lts_mean) / np.maximum(self.lts_std, 1e-12)
        flagged = np.abs(z) > k_sigma
        return z, flagged, float(np.abs(z).mean())

    def features(self, data: CRMData) -> np.ndarray:
        parts = [data.surface_columns(self.surface_names)] if self.surface_names else []
        parts.append(self.lts(data.disp))
        return np.column_stack(parts).astype(np.float64)

    def predict_proba(self, data: CRMData) -> np.ndarray:
        """``[n]`` P(member) under the fitted classifier."""
        if self.classifier == "none":
            raise InputError("this artefact has no classifier (fitted with --classifier none)")
        F = self.features(data)
        assert self.scaler_mean is not None and self.scaler_scale is not None
        Z = (F - self.scaler_mean) / self.scaler_scale
        if self.classifier == "lr":
            assert self.coef is not None and self.intercept is not None
            return 1.0 / (1.0 + np.exp(-(Z @ self.coef + self.intercept)))  # type: ignore[no-any-return]
        if self._booster is None:
            import xgboost

            b = xgboost.Booster()
            b.load_model(bytearray(self.xgb_json or b""))
            self._booster = b
        import xgboost

        return np.asarray(self._booster.predict(xgboost.DMatrix(Z)), dtype=np.float64)


def from_pipeline(
    pipe: Pipeline, *, model: dict[str, Any], settings: dict[str, Any], metrics: dict[str, Any] | None = None
) -> FittedCRM:
    """Export a fitted ``crm_pipeline`` (a :class:`CRMFeaturizer` with Level 3) to arrays."""
    feat = pipe.named_steps.get("features")
    if not isinstance(feat, CRMFeaturizer) or getattr(feat, "projector_", None) is None:
        raise InputError("only a fitted CRM pipeline with Level 3 (LTS) can be exported")
    proj = feat.projector_
    assert proj is not None
    scaler = pipe.named_steps["scale"]
    clf = pipe.named_steps["clf"]
    kind = "lr" if hasattr(clf, "coef_") else "xgb"
    art = FittedCRM(
        layers=proj.layers_.astype(np.int64),
        directions=proj.directions_.astype(np.float64),
        lts_mean=np.asarray(proj.lts_mean_, dtype=np.float64),
        lts_std=np.asarray(proj.lts_std_, dtype=np.float64),
        surface_names=tuple(feat.surface_names_),
        scaler_mean=np.asarray(scaler.mean_, dtype=np.float64),
        scaler_scale=np.asarray(scaler.scale_, dtype=np.float64),
        classifier=kind,
        model=model,
        settings=settings,
        metrics=metrics or {},
    )
    if kind == "lr":
        art.coef = np.asarray(clf.coef_[0], dtype=np.float64)
        art.intercept = float(clf.intercept_[0])
    else:
        art.xgb_json = bytes(clf.get_booster().save_raw("json"))
    return art


def _arrays(art: FittedCRM) -> dict[str, np.ndarray]:
    a = {
        "layers": art.layers,
        "directions": art.directions,
        "lts_mean": art.lts_mean,
        "lts_std": art.lts_std,
    }
    if art.scaler_mean is not None and art.scaler_scale is not None:
        a["scaler_mean"] = art.scaler_mean
        a["scaler_scale"] = art.scaler_scale
    if art.coef is not None:
        a["coef"] = art.coef
        a["intercept"] = np.array([art.intercept], dtype=np.float64)
    if art.xgb_json is not None:
        a["xgb_json"] = np.frombuffer(art.xgb_json, dtype=np.uint8)
    return a


def _hash(arrays: dict[str, np.ndarray], header: dict[str, Any]) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(header, sort_keys=True, default=str).encode())
    for k in sorted(arrays):
        h.update(k.encode())
        h.update(np.ascontiguousarray(arrays[k]).tobytes())
    return h.hexdigest()


def save_crm(art: FittedCRM, path: str | Path) -> Path:
    """Write the artefact atomically; sets and returns its content hash in the header."""
    path = Path(path)
    arrays = _arrays(art)
    header = {
        "format": FORMAT,
        "classifier": art.classifier,
        "surface_names": list(art.surface_names),
        "model": art.model,
        "settings": art.settings,
        "metrics": art.metrics,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    art.content_hash = _hash(arrays, {k: v for k, v in header.items() if k != "created"})
    header["content_hash"] = art.content_hash
    buf = io.BytesIO()
    np.savez(buf, header=np.array(json.dumps(header, default=str)), **arrays)  # type: ignore[arg-type]
    return atomic_write(path, buf.getvalue())


def load_crm(path: str | Path, *, model: Any = None) -> FittedCRM:
    """Read an artefact; with ``model`` (ModelInfo or dict) refuse a mismatched model.

    Raises:
        InputError: not a CRM artefact, an unknown format, or a corrupted file (hash mismatch).
        ModelMismatchError: fitted for another model.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"no CRM artefact at {path}")
    try:
        with np.load(path, allow_pickle=False) as z:
            header = json.loads(str(z["header"]))
            arrays = {k: z[k] for k in z.files if k != "header"}
    except (ValueError, KeyError, OSError) as e:
        raise InputError(f"{path} is not a CRM artefact ({e})") from e
    if header.get("format") != FORMAT:
        raise InputError(f"{path}: format {header.get('format')!r} is not {FORMAT!r}")
    expect = header.get("content_hash")
    got = _hash(arrays, {k: v for k, v in header.items() if k not in ("created", "content_hash")})
    if expect != got:
        raise InputError(f"{path}: content hash mismatch (file altered or truncated)")
    xgb = arrays.get("xgb_json")
    art = FittedCRM(
        layers=arrays["layers"],
        directions=arrays["directions"],
        lts_mean=arrays["lts_mean"],
        lts_std=arrays["lts_std"],
        surface_names=tuple(header.get("surface_names", [])),
        scaler_mean=arrays.get("scaler_mean"),
        scaler_scale=arrays.get("scaler_scale"),
        classifier=header["classifier"],
        model=header["model"],
        settings=header["settings"],
        coef=arrays.get("coef"),
        intercept=float(arrays["intercept"][0]) if "intercept" in arrays else None,
        xgb_json=None if xgb is None else xgb.tobytes(),
        content_hash=got,
        metrics=header.get("metrics", {}),
    )
    if model is not None:
        art.check_model(model)
    return art
