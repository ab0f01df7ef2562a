"""CRM report: Markdown tables (analogues of the paper's Tables 1-6) and figures.

Figures are returned, never saved or shown; the CLI decides where they go.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["crm_markdown", "layer_auc_figure", "lts_trajectory_figure", "noise_figure"]


def _f(v: Any, nd: int = 3) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "n/a"
    return f"{v:.{nd}f}"


def _ci(e: Mapping[str, Any]) -> str:
    lo, hi = (e.get("roc_auc_ci") or [None, None])[:2]
    return f"{_f(e.get('roc_auc'))} [{_f(lo)}, {_f(hi)}]"


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _best_blind(r: Mapping[str, Any]) -> tuple[str, float] | None:
    b = r.get("blind") or {}
    if b.get("best_blind") is None or b.get("best_blind_auc") is None:
        return None
    return str(b["best_blind"]), float(b["best_blind_auc"])


def _shift_lines(r: Mapping[str, Any]) -> list[str]:
    """The shift diagnostic (from :func:`mnemoscope.detectors.blind.shift_diagnostic`)."""
    if "shift_warning" not in r:
        return []
    if r.get("shift_warning"):
        return ["", f"> **Shift warning**: {r.get('shift_reason')}."]
    return ["", f"Shift diagnostic: {r.get('shift_reason')}."]


def _family_lines(r: Mapping[str, Any]) -> list[str]:
    fam = r.get("families") or {}
    rows = fam.get("rows") or []
    if not rows:
        return []
    bb = _best_blind(r)
    out = [
        "",
        "## CRM's signal by feature family",
        "",
        "Each family through the same scaler + logistic regression as crm_lr, same folds; L1(input) = "
        "CRM's Level-1 statistic on the inputs, 1 - cos(enc(context), enc(query)), no model."
        + (f" Best blind baseline: {bb[0]} {_f(bb[1])}." if bb else ""),
        "",
        "| family | reads | AUC [95% CI] | AUC - best blind |",
        "|---|---|---|---|",
    ]
    for row in rows:
        diff = None if bb is None or row.get("roc_auc") is None else row["roc_auc"] - bb[1]
        val = _ci(row) if row.get("roc_auc") is not None else f"n/a ({row.get('error', '')})"
        out.append(f"| {row['family']} | {row.get('source', '')} | {val} | {_f(diff)} |")
    return out


def _blind_lines(r: Mapping[str, Any]) -> list[str]:
    b = r.get("blind")
    if not b:
        return []
    out = ["", "## Blind baselines (the text alone, never the model)", ""]
    if b.get("skipped"):
        out.append(f"{b['skipped']}.")
    entries = b.get("entries") or []
    if entries:
        out += [f"{b.get('protocol', '')}", "", "| method | AUC [95% CI] | note |", "|---|---|---|"]
        for e in entries:
            note = e.get("reason", "") if e.get("roc_auc") is None else ""
            val = _ci(e) if e.get("roc_auc") is not None else "not measured"
            out.append(f"| {e['method']} | {val} | {note} |")
    return out


def crm_markdown(report: Mapping[str, Any], title: str = "CRM evaluation") -> str:
    """The report as Markdown: main table, ablations, controls, layers, causal, directions."""
    r = report
    a = r.get("analyses", {})
    out = [f"# {title}", ""]
    out.append(
        f"Protocol: **{r.get('protocol')}** - n = {r.get('n')} ({r.get('n_members')} members, "
        f"{r.get('n_non_members')} non-members); {r.get('settings', {}).get('n_splits')}-fold stratified CV, "
        f"seed {r.get('settings', {}).get('seed')}; AUC [95% bootstrap CI]."
    )
    if r.get("protocol") == "paper":
        out.append(
            "\n> Paper protocol: directions and layer selection come from a calibration subset that "
            "is also part of the CV folds (leaks); compare with the leakage-free run."
        )
    out += _shift_lines(r)
    best = r.get("best_likelihood") or {}
    crm, xgb = r.get("crm_lr", {}), r.get("crm_xgb", {})
    gain = None
    if best.get("roc_auc") is not None and crm.get("roc_auc") is not None:
        gain = crm["roc_auc"] - best["roc_auc"]
    n_l3 = len(a.get("target_layers", {}).get("layers", []))
    out += [
        "",
        "## Table 1 - main result",
        "",
        "| best likelihood baseline | CRM-LR | CRM-XGB | gain | L3 dim |",
        "|---|---|---|---|---|",
        f"| {best.get('method', 'n/a')} {_f(best.get('roc_auc'))} | {_ci(crm)} | {_ci(xgb) if xgb else 'n/a'} "
        f"| {_f(gain, 3) if gain is not None else 'n/a'} | {n_l3} |",
        "",
        "## Table 2 - the signal by level",
        "",
        "| full CRM | L3 only | L1+L2 only | full - L3 only |",
        "|---|---|---|---|",
    ]
    l3 = r.get("crm_l3_lr", {})
    d = None if crm.get("roc_auc") is None or l3.get("roc_auc") is None else crm["roc_auc"] - l3["roc_auc"]
    out.append(f"| {_ci(crm)} | {_ci(l3)} | {_ci(r.get('l1l2_lr', {}))} | {_f(d)} |")
    out += _family_lines(r)
    bb = _best_blind(r)
    bb_head = f"best blind ({bb[0]})" if bb else "best blind"
    out += [
        "",
        "## All methods",
        "",
        f"| method | group | AUC [95% CI] | {bb_head} | AUC - best blind | fold std | what |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in r.get("methods", []):
        e = r.get(name, {})
        what = e.get("description", "") + (f" - error: {e['error']}" if e.get("error") else "")
        std = e.get("fold_auc_std")
        diff = None if bb is None or e.get("roc_auc") is None else e["roc_auc"] - bb[1]
        out.append(
            f"| {name} | {e.get('group', '')} | {_ci(e)} | {_f(bb[1]) if bb else 'n/a'} | {_f(diff)} "
            f"| {_f(std) if std is not None else ''} | {what} |"
        )
    out += _blind_lines(r)
    perm = a.get("permutation", {})
    tm = a.get("templates", {})
    st = a.get("same_topic", {})
    out += [
        "",
        "## Table 3 - controls",
        "",
        "| prompt std (templates) | permuted AUC (mean +- std) | same-topic CRM-LR | same-topic delta | same-topic n |",
        "|---|---|---|---|---|",
        f"| {_f(tm.get('std'))} | {_f(perm.get('mean'))} +- {_f(perm.get('std'))} (n={perm.get('n', 0)}) "
        f"| {_ci(st.get('crm_lr', {})) if st.get('crm_lr') else 'n/a'} | {_f(st.get('crm_lr', {}).get('delta'))} "
        f"| {st.get('n', 'n/a')} |",
    ]
    if tm.get("per_template"):
        out += ["", "| template | CRM-LR AUC [CI] |", "|---|---|"]
        out += [f"| {k} | {_ci(v)} |" for k, v in tm["per_template"].items()]
    sw = a.get("layer_sweep", {})
    if sw:
        out += [
            "",
            "## Table 4 - single-layer LTS sweep",
            "",
            f"Best layers: {sw.get('best')} (hidden-state rows; 0 = embeddings, last = after the final norm).",
            "",
            "| layer | AUC [CI] | fold mean +- std |",
            "|---|---|---|",
        ]
        out += [
            f"| {row['layer']} | {_ci(row)} | {_f(row['fold_mean'])} +- {_f(row['fold_std'])} |"
            for row in sw.get("layers", [])
        ]
    cz = a.get("causal")
    if cz and "clean" in cz:
        out += [
            "",
            "## Table 5 - causal analyses (L3-only LR)",
            "",
            f"Clean AUC {_ci(cz['clean'])}; peak layer {cz.get('peak_layer')}.",
            "",
            "| block | layers | eps | AUC | delta |",
            "|---|---|---|---|---|",
        ]
        for row in cz.get("noise", []):
            ls = row["layers"]
            span = f"{ls[0]}-{ls[-1]}" if len(ls) > 1 else str(ls[0])
            out.append(
                f"| {row['block']} | {span} | {row['eps']} | {_f(row['roc_auc'])} | {_f(row['delta'])} |"
            )
        out += ["", "| patched layer (h_c <- h_0, last token) | AUC | delta |", "|---|---|---|"]
        out += [
            f"| {row['layer']} | {_f(row['roc_auc'])} | {_f(row['delta'])} |"
            for row in cz.get("patching", [])
        ]
    dr = a.get("direction", {})
    out += [
        "",
        "## Table 6 - direction",
        "",
        "| PC1 (L3 only) | supervised mean-difference | delta |",
        "|---|---|---|",
        f"| {_f(dr.get('pc1'))} | {_f(dr.get('mean_diff'))} | "
        f"{_f(None if dr.get('pc1') is None or dr.get('mean_diff') is None else dr['mean_diff'] - dr['pc1'])} |",
    ]
    if isinstance(a.get("pc_rank"), list):
        out += ["", "PC-rank ablation (L3 only, LR):", "", "| PC | AUC [CI] |", "|---|---|"]
        out += [f"| PC{row['rank']} | {_ci(row)} |" for row in a["pc_rank"]]
    if isinstance(a.get("pca_sweep"), list):
        out += ["", "PCA sweep on the concatenated displacement:", "", "| K | AUC [CI] |", "|---|---|"]
        out += [f"| {row['k']} | {_ci(row)} |" for row in a["pca_sweep"]]
    if isinstance(a.get("leave_one_layer_out"), list):
        deltas = [row["delta"] for row in a["leave_one_layer_out"] if row.get("delta") is not None]
        if deltas:
            out += [
                "",
                f"Leave-one-layer-out (L3 only): max |delta AUC| = {max(abs(x) for x in deltas):.3f}.",
            ]
    vocab = a.get("vocab")
    if isinstance(vocab, list) and vocab:
        out += ["", "## Vocabulary back-projection of the PC1 directions (top 10 tokens)", ""]
        out += ["| layer | tokens |", "|---|---|"]
        out += [f"| {row['layer']} | {' '.join(repr(t) for t in row['tokens'])} |" for row in vocab]
    return "\n".join(out) + "\n"


def layer_auc_figure(
    sweeps: Mapping[str, Mapping[str, Any]], *, title: str = "Single-layer CRM-LTS AUC"
) -> Any:
    """Per-layer AUC curves (pooled out-of-fold AUC; band = +- 1 std of the fold AUCs),
    one line per ``{label: layer_sweep}``. Layers are shown as a fraction of depth when the
    models differ in depth."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    depths = {max(r["layer"] for r in s["layers"]) for s in sweeps.values() if s.get("layers")}
    relative = len(depths) > 1
    for label, s in sweeps.items():
        rows = s.get("layers", [])
        if not rows:
            continue
        x = np.array([r["layer"] for r in rows], dtype=float)
        if relative:
            x = x / x.max()
        m = np.array([r["fold_mean"] for r in rows])
        sd = np.array([r["fold_std"] for r in rows])
        pooled = np.array([r["roc_auc"] for r in rows], dtype=float)
        (line,) = ax.plot(x, pooled, lw=1.6, label=label)
        ax.fill_between(x, m - sd, m + sd, color=line.get_color(), alpha=0.15, lw=0)
    ax.axhline(0.5, ls="--", color="grey", lw=1)
    ax.set_xlabel("layer / depth" if relative else "layer (hidden-state row)")
    ax.set_ylabel("ROC-AUC")
    ax.set_ylim(0.2, 1.02)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def lts_trajectory_figure(
    traj: Mapping[str, Any], *, title: str = "LTS trajectory (standardised, PC1)"
) -> Any:
    """Mean +- std standardised LTS per layer, members vs non-members."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.0))
    x = np.array(traj["layers"])
    for key, label, color in (("members", "members", "tab:red"), ("non_members", "non-members", "tab:blue")):
        m = np.array(traj[f"{key}_mean"])
        s = np.array(traj[f"{key}_std"])
        ax.plot(x, m, color=color, lw=1.6, label=label)
        ax.fill_between(x, m - s, m + s, color=color, alpha=0.12, lw=0)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xlabel("layer (hidden-state row)")
    ax.set_ylabel("LTS (z-score over all samples)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def noise_figure(causal: Mapping[str, Any], *, title: str = "Noise injection: delta AUC (L3-only LR)") -> Any:
    """Grouped bars of delta AUC per block and eps, plus the patching deltas."""
    plt = _plt()
    rows = causal.get("noise", [])
    blocks = list(dict.fromkeys(r["block"] for r in rows))
    eps = sorted({r["eps"] for r in rows})
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), gridspec_kw={"width_ratios": [3, 1.3]})
    ax = axes[0]
    w = 0.8 / max(1, len(eps))
    for j, e in enumerate(eps):
        vals = [next((r["delta"] for r in rows if r["block"] == b and r["eps"] == e), np.nan) for b in blocks]
        ax.bar(np.arange(len(blocks)) + (j - (len(eps) - 1) / 2) * w, vals, w, label=f"eps={e}")
    ax.set_xticks(np.arange(len(blocks)))
    ax.set_xticklabels(
        [f"{b}\n{causal['blocks'][b][0]}-{causal['blocks'][b][-1]}" for b in blocks], fontsize=8
    )
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_ylabel("delta AUC")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    pt = causal.get("patching", [])
    axes[1].bar([str(r["layer"]) for r in pt], [r["delta"] for r in pt], color="tab:gray")
    axes[1].axhline(0, color="grey", lw=0.8)
    axes[1].set_xlabel("patched layer")
    axes[1].set_title("patching h_c <- h_0", fontsize=10)
    fig.tight_layout()
    return fig
