"""The CRM tables of docs/crm.md, printed from the committed sibling reports.

    python benchmarks/crm_summary.py [--out benchmarks/results/crm] [--sibling weak strong positive]

Reads ``<out>/<sibling>/report.json`` (and ``<out>/<sibling>/paper/report.json``) as written by
``benchmarks/crm_eval_siblings.py`` and prints Markdown: the main table, the layer and causal
table, the other methods and the noise-injection grid. Nothing is recomputed; the point is
that every number in the docs can be traced back to a committed report.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from mnemoscope.report.crm import _ci
from mnemoscope.report.crm import _f as f


def ci(e: dict[str, Any] | None) -> str:
    return "not extracted" if not e or e.get("roc_auc") is None else _ci(e)


def signed(v: float | None) -> str:
    return "n/a" if v is None else f"{v:+.3f}"


def main_row(sib: str, r: dict[str, Any]) -> str:
    a = r["analyses"]
    best = r["best_likelihood"]
    best_e = r.get(best["method"], {})
    perm = a["permutation"]
    tm = a.get("templates") or {}
    per = tm.get("per_template", {})
    if per:
        n_t = next(iter(per.values())).get("n")
        tstr = (
            f"{f(tm.get('std'))} ("
            + ", ".join(f"{k} {f(v['roc_auc'])}" for k, v in per.items())
            + f"; n={n_t})"
        )
    else:
        tstr = "not run"
    st = a["same_topic"]["crm_lr"]
    same = f"{signed(st['delta'])} ({f(st['roc_auc'])}, n={a['same_topic']['n']})"
    return (
        f"| {sib} | {r['model']['name']} | {r['n']} | {best['method']} {ci(best_e)} | {ci(r['crm_lr'])} | "
        f"{ci(r['crm_xgb'])} | {ci(r['l1l2_lr'])} | {ci(r['crm_l3_lr'])} | "
        f"{f(perm['mean'])} +- {f(perm['std'])} | {tstr} | {same} |"
    )


def layer_row(sib: str, r: dict[str, Any]) -> str:
    a = r["analyses"]
    sw = a["layer_sweep"]
    best_layer = sw["best"][0]
    be = next(x for x in sw["layers"] if x["layer"] == best_layer)
    tl = a["target_layers"]["layers"]
    lolo = max(abs(x["delta"]) for x in a["leave_one_layer_out"]) if a["leave_one_layer_out"] else None
    c = a.get("causal") or {}
    n = c.get("n", "n/a")
    return (
        f"| {sib} | {tl[0]}-{tl[-1]} | {sw['best']} | {ci(be)} | {f(lolo)} | {n} | {ci(c.get('clean'))} | "
        + ", ".join(f"L{p['layer']}: {f(p['roc_auc'])} ({signed(p['delta'])})" for p in c.get("patching", []))
        + " |"
    )


def table(header: str, rows: list[str]) -> None:
    """Print a Markdown table: the header, its separator (one cell per column), the rows."""
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    print("\n".join(rows))
    print()


def noise_rows(sibs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    out = []
    for sib, r in sibs:
        c = r["analyses"].get("causal") or {}
        blocks = c.get("blocks", {})
        for name, layers in blocks.items():
            cells = []
            for eps in (0.1, 0.5, 1.0):
                hit = [x for x in c.get("noise", []) if x["block"] == name and abs(x["eps"] - eps) < 1e-9]
                cells.append(f"{f(hit[0]['roc_auc'])} ({signed(hit[0]['delta'])})" if hit else "not run")
            span = f"L{layers[0]}-{layers[-1]}" if len(layers) > 1 else f"L{layers[0]}"
            out.append(f"| {sib} | {name} ({span}) | " + " | ".join(cells) + " |")
    return out


def other_row(sib: str, r: dict[str, Any], paper: dict[str, Any] | None) -> str:
    p = "n/a"
    if paper:
        p = " / ".join(f(paper.get(m, {}).get("roc_auc")) for m in ("crm_lr", "crm_xgb", "crm_sup_lr"))
    return (
        f"| {sib} | {ci(r.get('static_mia_lr'))} | {ci(r.get('logit_lens_lr'))} | {ci(r.get('attn_flow_lr'))} | "
        f"{ci(r.get('grad_norm_lr'))} | {ci(r.get('raw_pca8_diff'))} | {ci(r.get('l2_multilayer'))} | "
        f"{ci(r.get('crm_sup_lr'))} | {p} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/crm")
    ap.add_argument("--sibling", nargs="+", default=["weak", "strong", "positive", "gemma-positive2"])
    args = ap.parse_args()
    sibs = []
    for s in args.sibling:
        path = Path(args.out) / s / "report.json"
        if path.is_file():
            sibs.append((s, json.loads(path.read_text())))
    table(
        "| sibling | model | n | best likelihood | CRM-LR | CRM-XGB | L1+L2 only | L3 only | "
        "permuted (10x) | template std | same-topic delta (CRM-LR) |",
        [main_row(s, r) for s, r in sibs],
    )
    table(
        "| sibling | target layers | best single layers (sweep) | best single-layer AUC | "
        "leave-one-layer-out max abs delta | causal n | clean L3 AUC | patching peak layer |",
        [layer_row(s, r) for s, r in sibs],
    )
    table("| sibling | block (layers) | eps 0.1 | eps 0.5 | eps 1.0 |", noise_rows(sibs))
    rows = []
    for s, r in sibs:
        pp = Path(args.out) / s / "paper" / "report.json"
        rows.append(other_row(s, r, json.loads(pp.read_text()) if pp.is_file() else None))
    table(
        "| sibling | static MIA (LR) | logit-lens KL | attention flow | gradient norm | raw PCA-8 displacement "
        "| per-layer L2 norms | supervised direction | paper protocol CRM-LR / XGB / supervised |",
        rows,
    )


if __name__ == "__main__":
    main()
