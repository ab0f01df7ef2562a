"""SCAR figures. Each function draws a :class:`~mnemoscope.detectors.scar.ScarResult` and returns a
matplotlib Figure; callers save it. No statistic is computed here beyond display transforms
(hinge parts, the SE-map's Gaussian baseline, the surface's percentile scaling)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from mnemoscope.detectors.scar import ScarResult

__all__ = [
    "FIGURES",
    "heatmap_figure",
    "karyotype_figure",
    "projections_figure",
    "se_map",
    "se_map_figure",
    "surface",
    "surface_figure",
    "trajectory_figure",
]

SUSPECT = "#c0392b"
ANCHOR = "#1e8449"
COLORS = {"kappa": "#c0392b", "length": "#2e86c1", "drift": "#229954"}


def _figure(**kw: Any) -> Figure:
    from matplotlib.figure import Figure

    return Figure(**kw)


def _int_ticks(ax: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _bands(ax: Any, result: ScarResult, *, label: bool = True) -> None:
    _int_ticks(ax)
    for i, (a, b) in enumerate(result.bands):
        ax.axvspan(
            a - 0.5,
            b + 0.5,
            color="#f5b041",
            alpha=0.25,
            lw=0,
            label="rupture band" if label and i == 0 else None,
        )
    if result.rupture_layer is not None:
        ax.axvline(result.rupture_layer, color="#7d3c98", ls=":", lw=1.2, label="l*" if label else None)


def _title(result: ScarResult) -> str:
    s = result.settings
    band = ", ".join(f"{a}-{b}" for a, b in result.bands) or "none"
    return f"bands: {band}; l* = {result.rupture_layer}; n = {s.get('n_prompts')}, k = {s.get('k_used')}"


def trajectory_figure(result: ScarResult) -> Figure:
    """nDNA trajectory over depth: kappa, L and ||v|| of suspect vs anchor, band overlay."""
    fig = _figure(figsize=(9, 7.5), layout="constrained")
    axes = fig.subplots(3, 1, sharex=True)
    ell = result.layers
    pl = result.per_layer
    for ax, key, name in zip(
        axes,
        ("kappa", "length", "drift"),
        ("curvature kappa", "thermodynamic length L", "drift ||v||"),
        strict=True,
    ):
        ax.plot(ell, pl[key], "-o", ms=3, color=SUSPECT, label="suspect")
        ax.plot(ell, pl[f"{key}_anchor"], "-s", ms=3, color=ANCHOR, label="anchor")
        _bands(ax, result, label=key == "kappa")
        both = np.concatenate([pl[key], pl[f"{key}_anchor"]])
        if key == "length" and (both > 0).all() and both.max() > 20 * both.min():
            ax.set_yscale("log")  # the first steps dwarf the rest
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    axes[0].legend(loc="upper left", fontsize=8, ncol=4)
    axes[-1].set_xlabel("layer (block output)")
    fig.suptitle("SCAR nDNA trajectory - " + _title(result), fontsize=10)
    return fig


def projections_figure(result: ScarResult) -> Figure:
    """The trajectory's 2-D projections: (kappa, L), (kappa, ||v||), (layer, L); band layers ringed."""
    fig = _figure(figsize=(13, 4.2), layout="constrained")
    axes = fig.subplots(1, 3)
    pl = result.per_layer
    in_band = np.isin(result.layers, sorted(result.band_layers()))
    pairs = (("kappa", "length"), ("kappa", "drift"))
    for ax, (x, y) in zip(axes[:2], pairs, strict=True):
        for suffix, color, name in (("", SUSPECT, "suspect"), ("_anchor", ANCHOR, "anchor")):
            xs, ys = pl[x + suffix], pl[y + suffix]
            ax.plot(xs, ys, "-", color=color, alpha=0.5, lw=1)
            ax.scatter(
                xs, ys, c=result.layers, cmap="viridis", s=18, edgecolors=color, linewidths=0.8, label=name
            )
            for i in range(len(xs) - 1):
                ax.annotate(
                    "",
                    xy=(xs[i + 1], ys[i + 1]),
                    xytext=(xs[i], ys[i]),
                    arrowprops={"arrowstyle": "->", "color": color, "alpha": 0.35, "lw": 0.8},
                )
        if in_band.any():
            ax.scatter(
                pl[x][in_band],
                pl[y][in_band],
                s=90,
                facecolors="none",
                edgecolors="#f39c12",
                lw=1.8,
                label="band",
            )
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    ax = axes[2]
    ax.plot(result.layers, pl["length"], "-o", ms=3, color=SUSPECT, label="suspect")
    ax.plot(result.layers, pl["length_anchor"], "-s", ms=3, color=ANCHOR, label="anchor")
    _bands(ax, result)
    ax.set_xlabel("layer")
    ax.set_ylabel("length")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.suptitle("nDNA projections (colour = depth) - " + _title(result), fontsize=10)
    return fig


def _hinge_parts(result: ScarResult, suffix: str = "") -> np.ndarray:
    pl = result.per_layer
    a, b, c = result.weights
    return np.stack(
        [
            a * np.maximum(pl["z_kappa" + suffix], 0),
            b * np.maximum(-pl["z_length" + suffix], 0),
            c * np.maximum(pl["z_drift" + suffix], 0),
        ]
    )


def karyotype_figure(result: ScarResult) -> Figure:
    """Stacked per-layer bars of [z_kappa]+, [-z_L]+, [z_v]+ (weighted), anchor vs suspect."""
    fig = _figure(figsize=(12, 4.5), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    names = ("[z_kappa]+ curvature spike", "[-z_L]+ effort dip", "[z_v]+ drift surge")
    colors = (COLORS["kappa"], COLORS["length"], COLORS["drift"])
    for ax, suffix, title in ((axes[0], "_anchor", "anchor (clean)"), (axes[1], "", "suspect")):
        parts = _hinge_parts(result, suffix)
        bottom = np.zeros(parts.shape[1])
        for part, name, color in zip(parts, names, colors, strict=True):
            ax.bar(result.layers, part, bottom=bottom, color=color, label=name, width=0.8)
            bottom += part
        _int_ticks(ax)
        if suffix == "":
            _bands(ax, result, label=False)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("layer")
        ax.grid(alpha=0.3, axis="y")
    axes[0].set_ylabel("hinge evidence (sums to T_hinge)")
    axes[1].legend(fontsize=8, loc="upper left")
    fig.suptitle("SCAR karyotype - " + _title(result), fontsize=10)
    return fig


def se_map(T: np.ndarray, sigma: float = 1.5) -> np.ndarray:
    """``D(l) = T(l) - (G_sigma * T)(l)``: the composite minus its Gaussian-smoothed baseline."""
    from scipy.ndimage import gaussian_filter1d

    t = np.asarray(T, dtype=np.float64)
    return t - gaussian_filter1d(t, sigma, mode="nearest")


def se_map_figure(result: ScarResult, sigma: float = 1.5) -> Figure:
    """Semantic-earthquake map of suspect and anchor (signed T minus its Gaussian baseline)."""
    fig = _figure(figsize=(9, 4), layout="constrained")
    ax = fig.subplots()
    ds = se_map(result.per_layer["T"], sigma)
    da = se_map(result.per_layer["T_anchor"], sigma)
    ax.bar(result.layers - 0.2, ds, width=0.4, color=SUSPECT, label="suspect")
    ax.bar(result.layers + 0.2, da, width=0.4, color=ANCHOR, label="anchor")
    ax.axhline(0, color="k", lw=0.6)
    _bands(ax, result)
    ax.set_xlabel("layer")
    ax.set_ylabel(f"D(l) = T - G_{sigma:g} * T")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.suptitle("SE-map - " + _title(result), fontsize=10)
    return fig


def surface(T: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """The per-layer SCAR surface ``clip((T - q05) / (q95 - q05 + eps), 0, 1)``."""
    t = np.asarray(T, dtype=np.float64)
    lo, hi = np.quantile(t, [0.05, 0.95])
    return np.asarray(np.clip((t - lo) / (hi - lo + eps), 0.0, 1.0), dtype=np.float64)


def surface_figure(result: ScarResult) -> Figure:
    """Per-layer SCAR surface S(l) for anchor and suspect (rows), with BH-significant layers marked."""
    fig = _figure(figsize=(10, 3.2), layout="constrained")
    ax = fig.subplots()
    grid = np.stack([surface(result.per_layer["T_anchor"]), surface(result.per_layer["T"])])
    im = ax.imshow(
        grid,
        aspect="auto",
        cmap="magma",
        vmin=0,
        vmax=1,
        extent=(result.layers[0] - 0.5, result.layers[-1] + 0.5, 1.5, -0.5),
    )
    ax.set_yticks([0, 1], ["anchor", "suspect"])
    sig = result.layers[result.per_layer["q"] <= result.settings.get("q_fdr", 0.05)]
    ax.scatter(sig, np.ones_like(sig), marker="*", color="cyan", s=60, label="BH-significant (suspect)")
    for a, b in result.bands:
        ax.add_patch(_rect(a - 0.5, 0.5, b - a + 1, 1.0))
    ax.set_xlabel("layer")
    fig.colorbar(im, ax=ax, label="S(l)")
    if len(sig):
        ax.legend(fontsize=8, loc="upper right")
    fig.suptitle("per-layer SCAR surface - " + _title(result), fontsize=10)
    return fig


def _rect(x: float, y: float, w: float, h: float) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), w, h, fill=False, edgecolor="#f5b041", lw=2)


def heatmap_figure(result: ScarResult) -> Figure:
    """Per-layer heatmap of the three evidence channels (normalised to [0, 1] at the 99th
    percentile), BH markers above significant layers and a dotted l* guide."""
    fig = _figure(figsize=(11, 3.6), layout="constrained")
    ax = fig.subplots()
    parts = _hinge_parts(result)
    cap = np.maximum(np.quantile(parts, 0.99, axis=1, keepdims=True), 1e-6)
    norm = np.clip(parts / cap, 0, 1)
    ax.imshow(
        norm,
        aspect="auto",
        cmap="viridis",
        vmin=0,
        vmax=1,
        extent=(result.layers[0] - 0.5, result.layers[-1] + 0.5, 2.5, -0.5),
    )
    ax.set_yticks([0, 1, 2], ["curvature spike", "effort dip", "drift surge"])
    for j, ell in enumerate(result.layers):
        for i in range(3):
            if norm[i, j] >= 0.5:
                ax.text(ell, i, f"{norm[i, j]:.1f}", ha="center", va="center", fontsize=6, color="k")
    sig = result.layers[result.per_layer["q"] <= result.settings.get("q_fdr", 0.05)]
    ax.scatter(
        sig, np.full(len(sig), -0.3), marker="v", color="red", s=40, label="BH q <= q_FDR", clip_on=False
    )
    if result.rupture_layer is not None:
        ax.axvline(result.rupture_layer, color="white", ls=":", lw=1.5)
    ax.set_xlabel("layer")
    if len(sig):
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle("SCAR per-layer heatmap (suspect) - " + _title(result), fontsize=10)
    return fig


FIGURES = {
    "trajectory": trajectory_figure,
    "projections": projections_figure,
    "karyotype": karyotype_figure,
    "se_map": se_map_figure,
    "surface": surface_figure,
    "heatmap": heatmap_figure,
}
