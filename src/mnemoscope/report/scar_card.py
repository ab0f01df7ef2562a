"""The SCAR audit card: ``card.json``, per-layer arrays (CSV + NPY), PNG figures and a
self-contained interactive HTML page (inline SVG and JavaScript; no CDN, works offline)."""

from __future__ import annotations

import csv
import html
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from mnemoscope.detectors.scar import ScarResult

__all__ = ["card_dict", "card_html", "write_card"]

CARD_VERSION = 1


def _clean(x: Any) -> Any:
    """JSON-safe copy: numpy scalars to Python, non-finite floats to ``None``."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, np.ndarray):
        return _clean(x.tolist())
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating, float)):
        v = float(x)
        return v if math.isfinite(v) else None
    return x


def card_dict(result: ScarResult, extra_settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """The machine-readable card (the ``card.json`` contract).

    ``per_layer`` holds every array of :attr:`ScarResult.per_layer` plus ``L``, an alias of
    ``length`` (the thermodynamic length under the name the issue's contract uses).
    """
    d = result.to_dict()
    if "length" in d["per_layer"]:
        d["per_layer"]["L"] = d["per_layer"]["length"]
    d["settings"] = {**d["settings"], **(extra_settings or {})}
    d["card_version"] = CARD_VERSION
    d["detected"] = result.detected
    return dict(_clean(d))


def write_card(
    result: ScarResult, out: str | Path, *, extra_settings: dict[str, Any] | None = None, plots: bool = True
) -> dict[str, Any]:
    """Write ``card.json``, ``per_layer.csv``, ``arrays/<name>.npy``, ``card.html`` and (with
    ``plots``) one PNG per figure of :data:`mnemoscope.report.scar_plots.FIGURES`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    from mnemoscope.provenance import provenance

    card = {**card_dict(result, extra_settings), "provenance": provenance()}
    (out / "card.json").write_text(json.dumps(card, indent=1))
    names = list(result.per_layer)
    with (out / "per_layer.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["layer", *names])
        for i, ell in enumerate(result.layers):
            w.writerow([int(ell), *(repr(float(result.per_layer[n][i])) for n in names)])
    arr = out / "arrays"
    arr.mkdir(exist_ok=True)
    np.save(arr / "layers.npy", result.layers)
    for n in names:
        np.save(arr / f"{n}.npy", result.per_layer[n])
    if plots:
        from mnemoscope.report.figures import save_figure
        from mnemoscope.report.scar_plots import FIGURES

        for name, make in FIGURES.items():
            fig = make(result)
            save_figure(fig, out / f"{name}.png")
    (out / "card.html").write_text(card_html(card))
    return card


_SERIES = [
    ("kappa", "curvature kappa", "kappa_anchor"),
    ("length", "thermodynamic length L", "length_anchor"),
    ("drift", "drift ||v||", "drift_anchor"),
    ("drift_delta", "||v - v_anchor||", None),
    ("z_kappa", "z_kappa", "z_kappa_anchor"),
    ("z_length", "z_L", "z_length_anchor"),
    ("z_drift", "z_v", "z_drift_anchor"),
    ("T", "composite T (signed)", "T_anchor"),
    ("T_hinge", "hinge composite", None),
    ("stat", "permutation statistic", None),
    ("p", "permutation p", None),
    ("q", "BH q", None),
]

_JS = r"""
const card = JSON.parse(document.getElementById('card-data').textContent);
const L = card.layers, P = card.per_layer;
const W = 860, H = 300, M = {l: 60, r: 20, t: 20, b: 40};
function scale(a, b, c, d) { return v => c + (v - a) * (d - c) / ((b - a) || 1); }
function draw(key, anchorKey, label) {
  const s = P[key] || [], a = anchorKey ? (P[anchorKey] || []) : [];
  const all = s.concat(a).filter(v => v !== null && isFinite(v));
  let lo = Math.min(...all), hi = Math.max(...all);
  if (lo === hi) { lo -= 1; hi += 1; }
  const x = scale(L[0] - 0.5, L[L.length - 1] + 0.5, M.l, W - M.r), y = scale(lo, hi, H - M.b, M.t);
  let g = '';
  for (const [b0, b1] of card.bands) {
    g += `<rect x="${x(b0 - 0.5)}" y="${M.t}" width="${x(b1 + 0.5) - x(b0 - 0.5)}" height="${H - M.t - M.b}" fill="#f5b041" opacity="0.3"/>`;
  }
  if (card.rupture_layer !== null) {
    g += `<line x1="${x(card.rupture_layer)}" x2="${x(card.rupture_layer)}" y1="${M.t}" y2="${H - M.b}" stroke="#7d3c98" stroke-dasharray="3,3"/>`;
  }
  for (let i = 0; i <= 4; i++) {
    const v = lo + (hi - lo) * i / 4;
    g += `<line x1="${M.l}" x2="${W - M.r}" y1="${y(v)}" y2="${y(v)}" stroke="#ddd"/>`;
    g += `<text x="${M.l - 6}" y="${y(v) + 4}" text-anchor="end" font-size="10">${v.toPrecision(3)}</text>`;
  }
  for (const ell of L) {
    g += `<text x="${x(ell)}" y="${H - M.b + 14}" text-anchor="middle" font-size="9">${ell}</text>`;
  }
  g += `<text x="${(W) / 2}" y="${H - 6}" text-anchor="middle" font-size="11">layer</text>`;
  const path = (vals, color, dash, who) => {
    let d = '', dots = '';
    vals.forEach((v, i) => {
      if (v === null) return;
      d += (d ? 'L' : 'M') + x(L[i]) + ',' + y(v);
      dots += `<circle cx="${x(L[i])}" cy="${y(v)}" r="3.5" fill="${color}"><title>${who} layer ${L[i]}: ${label} = ${Number(v).toPrecision(4)}  (p=${Number(P.p[i]).toPrecision(3)}, q=${Number(P.q[i]).toPrecision(3)})</title></circle>`;
    });
    return `<path d="${d}" fill="none" stroke="${color}" stroke-width="1.6" stroke-dasharray="${dash}"/>` + dots;
  };
  if (a.length) g += path(a, '#1e8449', '5,3', 'anchor');
  g += path(s, '#c0392b', '', 'suspect');
  document.getElementById('plot').innerHTML = `<svg width="${W}" height="${H}" xmlns="http://www.w3.org/2000/svg">${g}</svg>`;
}
const sel = document.getElementById('series');
sel.addEventListener('change', () => { const o = sel.options[sel.selectedIndex]; draw(o.value, o.dataset.anchor || null, o.text); });
sel.dispatchEvent(new Event('change'));
"""


def _fmt(v: Any) -> str:
    if v is None:
        return "not measured"
    if isinstance(v, float):
        return f"{v:.4g}"
    return html.escape(str(v))


def card_html(card: dict[str, Any]) -> str:
    """A self-contained HTML page for one card (series selector, hover tooltips, tables)."""
    s = card["settings"]

    def ci(name: str) -> str:
        est = card.get(name if name != "scar" else "scar_score")
        rng = card.get(f"{name}_ci" if name != "scar" else "scar_score_ci")
        if est is None:
            return "not measured (no accepted band)"
        return f"{_fmt(est)} [{_fmt(rng[0])}, {_fmt(rng[1])}]" if rng else _fmt(est)

    options = "".join(
        f'<option value="{k}"' + (f' data-anchor="{a}"' if a else "") + f">{html.escape(lbl)}</option>"
        for k, lbl, a in _SERIES
        if k in card["per_layer"]
    )
    rows = "".join(
        "<tr>"
        + f"<td>{ell}</td>"
        + "".join(
            f"<td>{_fmt(card['per_layer'][k][i])}</td>"
            for k in ("kappa", "length", "drift", "z_kappa", "z_length", "z_drift", "T", "p", "q")
        )
        + "</tr>"
        for i, ell in enumerate(card["layers"])
    )
    sus = s.get("suspect", {}) or {}
    anc = s.get("anchor", {}) or {}
    settings_rows = "".join(
        f"<tr><td>{html.escape(str(k))}</td><td><code>{html.escape(json.dumps(v, default=str))[:400]}</code></td></tr>"
        for k, v in sorted(s.items())
    )
    data = json.dumps({k: card[k] for k in ("layers", "per_layer", "bands", "rupture_layer")}).replace(
        "</", "<\\/"
    )
    bands = ", ".join(f"{a}-{b}" for a, b in card["bands"]) or "none"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>SCAR audit card</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 24px; color: #222; max-width: 960px; }}
table {{ border-collapse: collapse; font-size: 12px; }} td, th {{ border: 1px solid #ccc; padding: 2px 6px; }}
.verdict {{ font-size: 18px; padding: 8px 12px; background: {"#fdebd0" if card["bands"] else "#e9f7ef"}; }}
code {{ font-size: 11px; }}
</style></head><body>
<h1>SCAR audit card</h1>
<p class="verdict">Rupture bands: <b>{bands}</b>; rupture layer l* = <b>{_fmt(card["rupture_layer"])}</b></p>
<p>Suspect: <code>{html.escape(str(sus.get("name")))} {html.escape(str(sus.get("adapter") or ""))}</code>;
anchor: <code>{html.escape(str(anc.get("name")))} {html.escape(str(anc.get("adapter") or ""))}</code>;
{_fmt(s.get("n_prompts"))} prompts, k = {_fmt(s.get("k_used"))}, token representation {_fmt(s.get("token_representation"))}.</p>
<table>
<tr><th>score</th><th>estimate [{_fmt(s.get("confidence", 0.95))} bootstrap CI]</th></tr>
<tr><td>SCAR (peak hinge T in band)</td><td>{ci("scar")}</td></tr>
<tr><td>SCAR_area (mean hinge T in band)</td><td>{ci("scar_area")}</td></tr>
<tr><td>SCAR_raw</td><td>{ci("scar_raw")}</td></tr>
<tr><td>peak (max hinge T, band-free)</td><td>{ci("peak")}</td></tr>
<tr><td>excess (max T - T_anchor)</td><td>{ci("excess")}</td></tr>
</table>
<h2>Trajectory</h2>
<label>series <select id="series">{options}</select></label>
<span style="color:#c0392b">&#9644; suspect</span> <span style="color:#1e8449">- - anchor</span>
<span style="background:#f5b041;opacity:.6">&nbsp;band&nbsp;</span>
<div id="plot"></div>
<h2>Per layer</h2>
<table><tr><th>layer</th><th>kappa</th><th>L</th><th>||v||</th><th>z_kappa</th><th>z_L</th><th>z_v</th><th>T</th><th>p</th><th>q</th></tr>
{rows}</table>
<h2>Settings</h2>
<table>{settings_rows}</table>
<script type="application/json" id="card-data">{data}</script>
<script>{_JS}</script>
</body></html>
"""
