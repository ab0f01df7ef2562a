"""The batch report as ONE self-contained HTML file (no network: inline CSS, JS and SVG).

The page holds the run's payload (:func:`mnemoscope.report.batch.run_payload`) as a JSON blob in
a ``<script type="application/json">`` element, escaped so that no text from a result can close
the element (``<``, ``>``, ``&``, U+2028/9 become ``\\uXXXX``). Above ``compress_over`` bytes the
blob is gzip-compressed and base64-encoded (the browser inflates it with
``DecompressionStream``): 100,000 results stay a file a browser opens in seconds. The script
builds every row and every highlighted answer with ``textContent`` / ``setAttribute``, never
``innerHTML`` with data, so a ``<script>`` in a query or an answer is shown, not run.

The static parts (provenance, counts by source, the p_memory histogram with the memory
threshold) are rendered here in Python as escaped HTML and inline SVG, so they show even
before the script runs.
"""

from __future__ import annotations

import base64
import gzip
import html
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from mnemoscope.report.batch_assets import CSS, JS

__all__ = ["COLOURS", "describe_run", "embed_json", "render_html"]

COLOURS = {
    "context": "#2f7d4f",
    "memory": "#c2410c",
    "mixed": "#7c3aed",
    "undetermined": "#6b7280",
    "unsupported": "#be123c",
    "not recorded": "#a3a3a3",
}
_E = html.escape
#: run records shown on the page (the most recent; a folder resumed many times lists the rest in meta.json)
_MAX_RUNS = 20


def embed_json(obj: Any, *, compress_over: int = 1_000_000) -> tuple[str, str]:
    """``(encoding, text)`` for a ``<script type="application/json">`` element: ``"json"`` with
    every character that could end the element escaped, or ``"gzip+base64"`` above
    ``compress_over`` bytes.

    Example:
        >>> embed_json({"q": "</script><b>"})
        ('json', '{"q":"\\\\u003c/script\\\\u003e\\\\u003cb\\\\u003e"}')
    """
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    if len(text.encode("utf-8")) > compress_over:
        blob = gzip.compress(text.encode("utf-8"), compresslevel=6, mtime=0)
        return "gzip+base64", base64.b64encode(blob).decode("ascii")
    for a, b in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(a, b)
    return "json", text


def _colour(source: str) -> str:
    return COLOURS.get(source, "#525252")


def _bar_chart(counts: Mapping[str, int]) -> str:
    """Horizontal bars: answers by verdict source (inline SVG)."""
    if not counts:
        return '<p class="muted">No audited answers.</p>'
    total = sum(counts.values()) or 1
    top = max(counts.values()) or 1
    w, bar_h, gap, left = 520, 22, 8, 110
    h = len(counts) * (bar_h + gap) + gap
    parts = [
        f'<svg class="chart" role="img" aria-label="answers by source" viewBox="0 0 {w} {h}" '
        f'width="{w}" height="{h}" xmlns="http://www.w3.org/2000/svg">'
    ]
    for i, (src, n) in enumerate(counts.items()):
        y = gap + i * (bar_h + gap)
        bw = max(1.0, (w - left - 120) * n / top) if n else 0.0
        parts.append(
            f'<text x="{left - 8}" y="{y + bar_h * 0.7:.1f}" text-anchor="end" class="lbl">{_E(src)}</text>'
            f'<rect x="{left}" y="{y}" width="{bw:.1f}" height="{bar_h}" rx="3" fill="{_colour(src)}">'
            f"<title>{_E(src)}: {n} ({100 * n / total:.1f}%)</title></rect>"
            f'<text x="{left + bw + 6:.1f}" y="{y + bar_h * 0.7:.1f}" class="val">{n} '
            f"({100 * n / total:.1f}%)</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _histogram(hist: Mapping[str, Any], threshold: float | None, threshold_note: str) -> str:
    """Stacked histogram of p_memory by source with the memory threshold drawn (inline SVG)."""
    edges: Sequence[float] = hist["edges"]
    counts: Mapping[str, Sequence[int]] = hist["counts"]
    if not counts or not any(sum(c) for c in counts.values()):
        return '<p class="muted">No p_memory recorded: nothing to draw.</p>'
    nb = len(edges) - 1
    totals = [sum(c[i] for c in counts.values()) for i in range(nb)]
    top = max(totals) or 1
    w, h, left, bottom, pad = 560, 230, 44, 34, 14
    pw, ph = w - left - pad, h - bottom - pad
    bw = pw / nb
    out = [
        f'<svg class="chart" role="img" aria-label="p_memory distribution" viewBox="0 0 {w} {h}" '
        f'width="{w}" height="{h}" xmlns="http://www.w3.org/2000/svg">',
        f'<line x1="{left}" y1="{pad + ph}" x2="{left + pw}" y2="{pad + ph}" class="axis"/>',
        f'<line x1="{left}" y1="{pad}" x2="{left}" y2="{pad + ph}" class="axis"/>',
    ]
    for i in range(nb):
        y0 = float(pad + ph)
        for src, c in counts.items():
            if not c[i]:
                continue
            bh = ph * c[i] / top
            y0 -= bh
            out.append(
                f'<rect x="{left + i * bw + 1:.1f}" y="{y0:.1f}" width="{bw - 2:.1f}" height="{bh:.1f}" '
                f'fill="{_colour(src)}"><title>p_memory {edges[i]:.2f}-{edges[i + 1]:.2f}: {c[i]} {_E(src)}'
                "</title></rect>"
            )
    for t in (0.0, 0.25, 0.5, 0.75, 1.0):
        x = left + pw * t
        out.append(f'<text x="{x:.1f}" y="{pad + ph + 16}" text-anchor="middle" class="tick">{t:g}</text>')
    out.append(f'<text x="{left - 6}" y="{pad + 8}" text-anchor="end" class="tick">{top}</text>')
    out.append(f'<text x="{left + pw / 2:.1f}" y="{h - 2}" text-anchor="middle" class="lbl">p_memory</text>')
    if threshold is not None:
        x = left + pw * min(max(threshold, 0.0), 1.0)
        out.append(
            f'<line x1="{x:.1f}" y1="{pad - 4}" x2="{x:.1f}" y2="{pad + ph}" class="thr">'
            f"<title>memory threshold {threshold:.4f}: {_E(threshold_note)}</title></line>"
            f'<text x="{x - 4:.1f}" y="{pad + 6}" text-anchor="end" class="thrlbl">threshold {threshold:.3f}</text>'
        )
    out.append("</svg>")
    legend = "".join(
        f'<span class="key"><i style="background:{_colour(s)}"></i>{_E(s)}</span>' for s in counts
    )
    note = (
        f'<p class="muted">Dashed line: {_E(threshold_note)}.</p>'
        if threshold is not None
        else f'<p class="muted">No threshold drawn: {_E(threshold_note)}.</p>'
    )
    return "".join(out) + f'<div class="legend">{legend}</div>' + note


def describe_run(r: Mapping[str, Any]) -> str:
    """One line for a run record: command, commit, version, profile, times, rows, outcome."""
    gc = r.get("git_commit")
    prof = r.get("profile") if isinstance(r.get("profile"), Mapping) else {}
    parts = [
        str(r.get("command") or "command not recorded"),
        f"commit {str(gc)[:10]}{' (dirty)' if r.get('git_dirty') else ''}"
        if gc
        else "commit n/a (not a checkout)",
        f"mnemoscope {r.get('mnemoscope') or '?'}",
    ]
    if prof:
        parts.append(f"profile {prof.get('path') or '?'} ({str(prof.get('hash') or '')[:12]})")
    ended = r.get("ended")
    parts.append(
        f"{r.get('started') or '?'} to {ended if ended else 'no end recorded (interrupted or running)'}"
    )
    if isinstance(r.get("appended"), int):
        parts.append(f"{r['appended']} answers written, {r.get('errors', 0)} errors")
    if r.get("outcome"):
        parts.append(str(r["outcome"]))
    return "; ".join(parts)


def _provenance(payload: Mapping[str, Any]) -> str:
    meta = payload.get("meta") or {}
    model = meta.get("model") or {}
    settings = meta.get("settings") or {}
    prov = payload.get("provenance") or {}
    card = payload.get("profile") or {}
    rows: list[tuple[str, str]] = []
    if model:
        fp = str(model.get("fingerprint") or "")[:12]
        rows.append(
            (
                "model",
                f"{model.get('name') or '?'} (spec {model.get('spec')}, fingerprint {fp or 'n/a'}"
                + (f", adapter {model.get('adapter')}" if model.get("adapter") else "")
                + ")",
            )
        )
    else:
        rows.append(("model", "not recorded (meta.json missing)"))
    ph = meta.get("profile_hash")
    prof_txt = f"hash {str(ph)[:12]}" if ph else "not recorded"
    if card:
        v = card.get("verdict") or {}
        val = card.get("validation") or {}
        auc = val.get("auc")
        prof_txt += f" - {card.get('profile', {}).get('path')}"
        if v.get("status") != "not measured":
            prof_txt += (
                f"; alpha {v.get('alpha')}, {'certified' if v.get('certified') else 'NOT certified'} "
                f"on {v.get('n_calibration')} held-out clean answers"
            )
        if isinstance(auc, Mapping):
            prof_txt += (
                f"; held-out AUC {auc['estimate']:.3f} [{auc['ci_low']:.3f}, {auc['ci_high']:.3f}], "
                f"false-flag rate {val.get('false_flag_rate'):.3f}, memory recall {val.get('memory_recall'):.3f}"
            )
        else:
            prof_txt += "; held-out validation not measured"
    rows.append(("profile", prof_txt))
    if settings:
        rows.append(
            (
                "settings",
                f"rule {settings.get('rule')}, max_new_tokens {settings.get('max_new_tokens')}"
                + (
                    f", template {settings['prompt'].get('template')}"
                    if isinstance(settings.get("prompt"), dict)
                    else ""
                ),
            )
        )
    runs = payload.get("runs") or []
    for i, r in enumerate(runs[-_MAX_RUNS:], max(1, len(runs) - _MAX_RUNS + 1)):
        rows.append((f"run {i}" if len(runs) > 1 else "audit run", describe_run(r)))
    if len(runs) > _MAX_RUNS:
        rows.append(("earlier runs", f"{len(runs) - _MAX_RUNS} more in meta.json"))
    mt = payload.get("results_mtime")
    if mt and not runs:
        rows.append(
            (
                "results written",
                time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(mt)) + " (results.jsonl last modified; "
                "meta.json records no run)",
            )
        )
    rows.append(("folder", str(payload.get("folder"))))
    if prov:
        gc = prov.get("git_commit")
        rows.append(
            (
                "report built",
                f"{prov.get('command')} - mnemoscope {prov.get('mnemoscope')}, commit "
                f"{str(gc)[:10] if gc else 'n/a (not a checkout)'}{' (dirty)' if prov.get('git_dirty') else ''}, "
                f"{prov.get('created')}",
            )
        )
    body = "".join(f'<tr><th>{_E(k)}</th><td dir="auto">{_E(v)}</td></tr>' for k, v in rows)
    return f'<table class="kv">{body}</table>'


def _notices(payload: Mapping[str, Any]) -> str:
    items: list[str] = [_E(n) for n in payload.get("notes") or []]
    for k, v in (payload.get("missing") or {}).items():
        items.append(
            f"{v} of {payload['n']} results lack <code>{_E(k)}</code> (written by an older version): "
            + {
                "memory_flag": "they are not counted as flagged",
                "p_memory": "they are left out of the distribution",
                "tokens": "their answers are shown without word highlighting",
            }.get(k, "shown as not recorded")
        )
    sk = payload.get("skipped") or []
    if sk:
        lis = "".join(
            f"<li>{_E(s['file'])}{'' if s.get('line') is None else ' line ' + str(s['line'])}: {_E(s['reason'])}</li>"
            for s in sk[:200]
        )
        more = f"<li>... and {len(sk) - 200} more</li>" if len(sk) > 200 else ""
        items.append(f"{len(sk)} line(s) skipped:<ul>{lis}{more}</ul>")
    if not items:
        return ""
    return (
        '<section id="notices" class="notice"><h2>What this report left out</h2><ul>'
        + "".join(f"<li>{i}</li>" for i in items)
        + "</ul></section>"
    )


def _errors(payload: Mapping[str, Any]) -> str:
    errs = payload.get("errors") or []
    n = payload.get("n_errors", len(errs))
    if not n:
        return '<section id="errors"><h2>Errors</h2><p class="muted">None: every record was audited.</p></section>'
    body = "".join(
        "<tr>"
        + "".join(
            f'<td dir="auto">{_E("" if e.get(k) is None else str(e.get(k)))}</td>'
            for k in ("line", "id", "field", "status", "message")
        )
        + "</tr>"
        for e in errs
    )
    more = f'<p class="muted">{n - len(errs)} more in errors.jsonl.</p>' if n > len(errs) else ""
    return (
        f'<section id="errors"><h2>Errors ({n})</h2><p class="muted">Records that could not be audited '
        "(errors.jsonl): the input line and the field at fault.</p>"
        '<div class="scroll"><table class="grid"><thead><tr><th>line</th><th>id</th><th>field</th><th>status</th>'
        f"<th>message</th></tr></thead><tbody>{body}</tbody></table></div>{more}</section>"
    )


def render_html(
    payload: Mapping[str, Any], *, compress_over: int = 1_000_000, title: str | None = None
) -> str:
    """The self-contained HTML page of a run's payload (module doc)."""
    encoding, blob = embed_json(payload, compress_over=compress_over)
    n = int(payload.get("n", 0))
    flagged = payload.get("flagged")
    title = title or f"mnemoscope audit report - {n} answers"
    flagged_txt = f"{flagged} of {n} flagged as memory" if flagged is not None else "memory flag not recorded"
    counts = payload.get("counts") or {}
    summary = " &middot; ".join(f'<b style="color:{_colour(s)}">{c}</b> {_E(s)}' for s, c in counts.items())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<title>{_E(title)}</title>
<style>{CSS}</style></head>
<body>
<header><h1>{_E(title)}</h1><p class="summary" id="summary">{summary or "no answers"} &mdash; <span id="flagged">{_E(flagged_txt)}</span></p></header>
<main>
<section id="provenance"><h2>Run</h2>{_provenance(payload)}</section>
{_notices(payload)}
<div class="charts">
<section id="by-source"><h2>Answers by source</h2>{_bar_chart(counts)}</section>
<section id="distribution"><h2>p_memory</h2>{_histogram(payload["hist"], payload.get("threshold"), str(payload.get("threshold_note", "")))}</section>
</div>
<section id="answers"><h2>Every audited answer</h2>
<noscript><p class="notice">The table needs JavaScript (no network access is made).</p></noscript>
<div class="controls">
<label>source <select id="f-source"><option value="">all</option></select></label>
<label><input type="checkbox" id="f-flagged"> flagged only</label>
<label>search <input type="search" id="f-text" placeholder="id or query" size="28"></label>
<span id="shown" class="muted"></span>
<span class="pager"><button id="prev" type="button">&larr;</button> <span id="page"></span> <button id="next" type="button">&rarr;</button></span>
</div>
<div class="split">
<div class="scroll tablewrap"><table class="grid" id="table"><thead><tr>
<th data-key="0" tabindex="0">id</th><th data-key="1" tabindex="0">query</th><th data-key="2" tabindex="0">source</th><th data-key="3" tabindex="0" class="num">p_memory</th><th data-key="4" tabindex="0">flagged</th>
</tr></thead><tbody id="rows"></tbody></table></div>
<aside id="detail" aria-live="polite"><p class="muted">Select a row to read the highlighted answer, its evidence and the guarantee.</p></aside>
</div>
</section>
{_errors(payload)}
</main>
<footer class="muted">mnemoscope batch report &middot; self-contained: no network requests &middot; data {encoding}</footer>
<script type="application/json" id="payload" data-encoding="{encoding}">{blob}</script>
<script>{JS}</script>
</body></html>
"""
