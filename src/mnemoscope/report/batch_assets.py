"""The batch report's inline stylesheet and script (no network, no libraries).

The script reads the payload blob, then filters, sorts and pages the answers and opens one as
a highlighted answer. It only ever writes data with ``textContent``/``setAttribute``. When it
is ready it sets ``document.body.dataset.ready`` and ``window.__mnemoscopeReport`` (the load
time in ms since navigation start, the script's own time, the row count) for tests and benchmarks.
"""

from __future__ import annotations

__all__ = ["CSS", "JS"]

CSS = """
:root{--ctx:#2f7d4f;--mem:#c2410c;--mix:#7c3aed;--und:#6b7280;--uns:#be123c;--bg:#fafaf9;--fg:#1c1917;--line:#e7e5e4}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}
header{padding:14px 22px;background:#fff;border-bottom:1px solid var(--line)}
h1{font-size:20px;margin:0 0 4px}
h2{font-size:15px;margin:0 0 8px}
main{padding:14px 22px;display:flex;flex-direction:column;gap:16px}
section{background:#fff;border:1px solid var(--line);border-radius:8px;padding:12px 14px;min-width:0}
.charts{display:flex;flex-wrap:wrap;gap:16px}
.charts section{flex:1 1 520px}
.chart{max-width:100%;height:auto}
.chart .lbl{font-size:12px;fill:#44403c}.chart .val,.chart .tick{font-size:11px;fill:#57534e}
.chart .axis{stroke:#a8a29e}.chart .thr{stroke:#111;stroke-width:1.5;stroke-dasharray:4 3}
.chart .thrlbl{font-size:11px;fill:#111}
.legend{display:flex;gap:12px;font-size:12px;margin-top:4px}
.key i{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:4px;vertical-align:-1px}
.muted{color:#78716c}
.notice{border-color:#f59e0b;background:#fffbeb}
.kv th{text-align:left;padding:2px 14px 2px 0;color:#57534e;font-weight:600;vertical-align:top;white-space:nowrap}
.kv td{overflow-wrap:anywhere}
.controls{display:flex;flex-wrap:wrap;gap:14px;align-items:center;margin-bottom:8px}
.pager{margin-left:auto}
.split{display:flex;gap:14px;align-items:flex-start}
.tablewrap{flex:1 1 60%;min-width:0}
#detail{flex:1 1 40%;min-width:0;position:sticky;top:8px;border:1px solid var(--line);border-radius:8px;padding:10px 12px;max-height:90vh;overflow:auto}
.scroll{overflow:auto}
table.grid{border-collapse:collapse;width:100%;table-layout:fixed}
.grid th,.grid td{border-bottom:1px solid var(--line);padding:5px 6px;text-align:left;vertical-align:top;overflow-wrap:anywhere;word-break:break-word}
.grid th{background:#f5f5f4;cursor:pointer;user-select:none;position:sticky;top:0;white-space:nowrap}
.grid th[aria-sort=ascending]::after{content:" \\25B2"}.grid th[aria-sort=descending]::after{content:" \\25BC"}
#table th:nth-child(1){width:17%}#table th:nth-child(2){width:43%}#table th:nth-child(3){width:16%}#table th:nth-child(4){width:12%}#table th:nth-child(5){width:12%}
.grid td.q{unicode-bidi:plaintext}
.grid tbody tr{cursor:pointer}.grid tbody tr:hover{background:#f5f5f4}.grid tbody tr.sel{background:#e0f2fe}
.num{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;padding:1px 7px;border-radius:9px;color:#fff;font-size:12px;font-weight:600;white-space:nowrap}
.b-context{background:var(--ctx)}.b-memory{background:var(--mem)}.b-mixed{background:var(--mix)}.b-unsupported{background:var(--uns)}.b-undetermined,.b-other{background:var(--und)}
.answer{font-size:15px;line-height:1.7;padding:8px 10px;border:1px solid var(--line);border-radius:6px;background:#fcfcfb;white-space:pre-wrap;overflow-wrap:anywhere;unicode-bidi:plaintext}
.tok-context{background:#dcfce7;border-bottom:2px solid var(--ctx)}
.tok-memory{background:#ffedd5;border-bottom:2px solid var(--mem)}
.tok-neutral{}
.tok-query{border-bottom:2px dotted var(--und)}
.phrases{margin:8px 0 4px}.phrases li{margin:2px 0}
.ph{padding:0 4px;border-radius:3px;font-weight:600;unicode-bidi:isolate}
.ph-context{background:#dcfce7;border-bottom:2px solid var(--ctx)}.ph-memory{background:#ffedd5;border-bottom:2px solid var(--mem)}
.ph-unsupported{background:#ffe4e6;border-bottom:2px solid var(--uns)}.ph-other{background:#f5f5f4;border-bottom:2px solid var(--und)}
.phl-context{color:var(--ctx)}.phl-memory{color:var(--mem)}.phl-unsupported{color:var(--uns)}
.answer span[title]{cursor:help}
.qtext{unicode-bidi:plaintext;overflow-wrap:anywhere;white-space:pre-wrap}
.ctx{overflow-wrap:anywhere}
dl.ev{display:grid;grid-template-columns:auto 1fr;gap:2px 12px;margin:6px 0}
dl.ev dt{color:#57534e}dl.ev dd{margin:0;font-variant-numeric:tabular-nums}
footer{padding:10px 22px;font-size:12px}
@media (max-width:900px){.split{flex-direction:column}#detail{position:static;max-height:none}}
"""

JS = r"""
(function () {
  "use strict";
  var t0 = performance.now();
  var TOK = ["context", "memory", "neutral", "query"];
  var PHRASE = ["context", "memory", "unsupported"];
  var PAGE = 50;
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function fmt(x, d) { return x === null || x === undefined ? "n/a" : Number(x).toFixed(d === undefined ? 3 : d); }
  function badge(src) {
    var known = ["context", "memory", "mixed", "undetermined", "unsupported"].indexOf(src) >= 0;
    return el("span", "badge b-" + (known ? src : "other"), src);
  }
  // the answer-bearing phrases and where each came from, worded as the CLI's audit view:
  // [text, source index (P.phrase_sources), passage (0-based; only with several passages), passage_effect]
  function phrases(list, n) {
    var p = el("p", "phrases");
    p.id = "phrases";
    p.appendChild(el("span", "muted", "answer-bearing phrases: "));
    if (!list.length) { p.appendChild(document.createTextNode("none beyond the query")); return p; }
    list.forEach(function (w, k) {
      var src = w[1] === null || w[1] === undefined ? null : PHRASE[w[1]];
      var why = src === "unsupported" ? "unsupported: no passage states it" : src || "?";
      if (w[2] !== null && w[2] !== undefined) {
        why += ", stated by passage " + (w[2] + 1);
        if (w[3] !== null && w[3] !== undefined) {
          var e = -w[3];
          why += " (without it: " + (e >= 0 ? "+" : "") + e.toFixed(1) + " nats)";
        }
      }
      if (k) p.appendChild(document.createTextNode("; "));
      var t = el("span", "ph ph-" + (src || "other"), w[0]);
      t.setAttribute("dir", "auto");
      t.setAttribute("data-source", src || "?");
      p.appendChild(t);
      p.appendChild(el("span", "phl-" + (src || "other"), " \u2014 " + why));
    });
    if (n > list.length) p.appendChild(document.createTextNode(" and " + (n - list.length) + " more"));
    return p;
  }
  function load() {
    var node = document.getElementById("payload");
    var enc = node.getAttribute("data-encoding");
    if (enc === "json") return Promise.resolve(JSON.parse(node.textContent));
    if (typeof DecompressionStream === "undefined") {
      return Promise.reject(new Error("this browser cannot inflate the embedded data (no DecompressionStream)"));
    }
    var bin = atob(node.textContent.trim());
    var bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Response(stream).text().then(JSON.parse);
  }
  function start(P) {
    var rows = P.rows, detail = P.detail, sources = P.sources;
    if (P.phrase_sources) PHRASE = P.phrase_sources;
    var state = { source: "", flagged: false, text: "", key: -1, dir: 1, page: 0, sel: -1 };
    var order = [], view = [];
    for (var i = 0; i < rows.length; i++) order.push(i);
    var sel = document.getElementById("f-source");
    sources.forEach(function (s, k) {
      var o = el("option", null, s + " (" + (P.counts[s] || 0) + ")");
      o.value = String(k);
      sel.appendChild(o);
    });
    function apply() {
      var src = state.source === "" ? -1 : Number(state.source);
      var text = state.text.toLowerCase();
      var base = order;
      if (state.key >= 0) {
        var k = state.key, d = state.dir;
        base = order.slice().sort(function (a, b) {
          var x = rows[a][k], y = rows[b][k];
          if (k === 2) { x = sources[x]; y = sources[y]; }
          if (x === y) return a - b;
          if (x === null || x === undefined) return 1;
          if (y === null || y === undefined) return -1;
          return (x < y ? -1 : 1) * d;
        });
      }
      view = base.filter(function (i) {
        var r = rows[i];
        if (src >= 0 && r[2] !== src) return false;
        if (state.flagged && r[4] !== true) return false;
        if (text && String(r[0]).toLowerCase().indexOf(text) < 0 &&
            (r[1] === null || String(r[1]).toLowerCase().indexOf(text) < 0)) return false;
        return true;
      });
      var pages = Math.max(1, Math.ceil(view.length / PAGE));
      if (state.page >= pages) state.page = pages - 1;
      draw(pages);
    }
    function draw(pages) {
      var body = document.getElementById("rows");
      var frag = document.createDocumentFragment();
      var a = state.page * PAGE, b = Math.min(view.length, a + PAGE);
      for (var j = a; j < b; j++) {
        var i = view[j], r = rows[i];
        var tr = el("tr");
        tr.setAttribute("data-index", String(i));
        tr.setAttribute("data-id", String(r[0]));
        tr.tabIndex = 0;
        if (i === state.sel) tr.className = "sel";
        tr.appendChild(el("td", "id", r[0]));
        var q = el("td", "q", r[1] === null ? "(query not recorded)" : r[1]);
        q.setAttribute("dir", "auto");
        if (r[1] === null) q.className = "q muted";
        tr.appendChild(q);
        var s = el("td", "src");
        s.appendChild(badge(sources[r[2]]));
        tr.appendChild(s);
        tr.appendChild(el("td", "num p", fmt(r[3])));
        tr.appendChild(el("td", "flag", r[4] === true ? "yes" : r[4] === false ? "" : "n/a"));
        frag.appendChild(tr);
      }
      body.replaceChildren(frag);
      document.getElementById("shown").textContent =
        view.length + " of " + rows.length + " answers" + (view.length ? " (rows " + (a + 1) + "-" + b + ")" : "");
      document.getElementById("page").textContent = "page " + (state.page + 1) + " / " + pages;
      document.getElementById("prev").disabled = state.page === 0;
      document.getElementById("next").disabled = state.page >= pages - 1;
    }
    function open(i) {
      state.sel = i;
      var r = rows[i], d = typeof detail[i] === "string" ? JSON.parse(detail[i]) : detail[i];
      var box = document.getElementById("detail");
      var f = document.createDocumentFragment();
      var h = el("h2");
      h.appendChild(el("span", "qtext", r[0]));
      f.appendChild(h);
      var top = el("p");
      top.appendChild(badge(sources[r[2]]));
      top.appendChild(document.createTextNode(" p_memory " + fmt(r[3]) + (r[4] === true ? " \u2014 flagged as memory" : r[4] === false ? " \u2014 not flagged" : "")));
      f.appendChild(top);
      if (d[1]) f.appendChild(el("p", null, d[1]));
      f.appendChild(el("h3", null, "Query"));
      var q = el("p", "qtext", r[1] === null ? "(not recorded)" : r[1]);
      q.setAttribute("dir", "auto");
      f.appendChild(q);
      if (typeof d[7] === "string") {
        f.appendChild(el("h3", null, "Context"));
        var c = el("p", "qtext", d[7]);
        c.setAttribute("dir", "auto");
        f.appendChild(c);
      } else if (d[8]) {
        var cs = el("p", "muted ctx", "context not stored; " + d[8].slice(0, 23) + "\u2026");
        cs.id = "ctx-digest";
        cs.setAttribute("title", d[8]);
        f.appendChild(cs);
      }
      f.appendChild(el("h3", null, "Answer"));
      var ans = el("div", "answer");
      ans.id = "answer";
      ans.setAttribute("dir", "auto");
      if (d[4]) {
        d[4].forEach(function (t) {
          var s = el("span", "tok-" + TOK[t[1]], t[0]);
          s.setAttribute("data-source", TOK[t[1]]);
          var tip = TOK[t[1]] + ": pmi " + fmt(t[2]) + ", kl " + fmt(t[3]);
          if (t[4] !== null && t[2] !== null) tip += ", log p with context " + fmt(t[4]) + ", without " + fmt(t[4] - t[2]);
          s.setAttribute("title", tip);
          ans.appendChild(s);
        });
      } else {
        ans.textContent = d[0] === null ? "(answer not recorded)" : d[0];
      }
      f.appendChild(ans);
      var leg = el("p", "legend");
      [["tok-context", "from the context"], ["tok-memory", "from memory"], ["tok-query", "copied from the query"], ["tok-neutral", "neutral"]].forEach(function (x) {
        var s = el("span", x[0], x[1]);
        leg.appendChild(s);
      });
      leg.appendChild(el("span", "muted", "(hover a word for its numbers)"));
      f.appendChild(leg);
      if (d[9]) f.appendChild(phrases(d[9], d[10]));
      if (typeof d[11] === "string" || d[11] === true) {
        var cb = el("p", "closed-book");
        cb.id = "closed-book";
        cb.appendChild(el("span", "muted", "closed-book answer (the model without the context): "));
        if (d[11] === true) {
          cb.appendChild(document.createTextNode("the same as the answer"));
        } else {
          var cbt = el("span", "qtext", d[11]);
          cbt.setAttribute("dir", "auto");
          cb.appendChild(cbt);
        }
        f.appendChild(cb);
      }
      f.appendChild(el("h3", null, "Evidence"));
      var dl = el("dl", "ev");
      P.evidence_keys.forEach(function (k, j) {
        dl.appendChild(el("dt", null, k));
        dl.appendChild(el("dd", null, d[2][j] === null ? "not measured" : fmt(d[2][j], 4)));
      });
      f.appendChild(dl);
      f.appendChild(el("h3", null, "Guarantee"));
      var g = d[3] === null ? null : P.guarantees[d[3]];
      f.appendChild(el("p", "guarantee", g ? (g.statement || JSON.stringify(g)) : "not recorded"));
      if (d[5] && d[5].length) {
        f.appendChild(el("h3", null, "Notes"));
        var ul = el("ul");
        d[5].forEach(function (n) { ul.appendChild(el("li", null, n)); });
        f.appendChild(ul);
      }
      if (d[6] !== null) f.appendChild(el("p", "muted", "results.jsonl line " + d[6]));
      box.replaceChildren(f);
      var cur = document.querySelectorAll("#rows tr.sel");
      for (var c = 0; c < cur.length; c++) cur[c].className = "";
      var row = document.querySelector('#rows tr[data-index="' + i + '"]');
      if (row) row.className = "sel";
    }
    sel.addEventListener("change", function () { state.source = sel.value; state.page = 0; apply(); });
    document.getElementById("f-flagged").addEventListener("change", function (e) { state.flagged = e.target.checked; state.page = 0; apply(); });
    var timer = null;
    document.getElementById("f-text").addEventListener("input", function (e) {
      clearTimeout(timer);
      timer = setTimeout(function () { state.text = e.target.value; state.page = 0; apply(); }, 120);
    });
    document.getElementById("prev").addEventListener("click", function () { state.page--; apply(); });
    document.getElementById("next").addEventListener("click", function () { state.page++; apply(); });
    var heads = document.querySelectorAll("#table th");
    for (var hi = 0; hi < heads.length; hi++) {
      (function (th) {
        function sortBy() {
          var k = Number(th.getAttribute("data-key"));
          state.dir = state.key === k ? -state.dir : (k === 3 ? -1 : 1);
          state.key = k;
          for (var x = 0; x < heads.length; x++) heads[x].removeAttribute("aria-sort");
          th.setAttribute("aria-sort", state.dir > 0 ? "ascending" : "descending");
          apply();
        }
        th.addEventListener("click", sortBy);
        th.addEventListener("keydown", function (e) { if (e.key === "Enter") sortBy(); });
      })(heads[hi]);
    }
    var tbody = document.getElementById("rows");
    tbody.addEventListener("click", function (e) {
      var tr = e.target.closest("tr");
      if (tr) open(Number(tr.getAttribute("data-index")));
    });
    tbody.addEventListener("keydown", function (e) {
      var tr = e.target.closest("tr");
      if (tr && e.key === "Enter") open(Number(tr.getAttribute("data-index")));
    });
    apply();
    window.__mnemoscopeReport = { n: rows.length, readyMs: performance.now(), scriptMs: performance.now() - t0, open: open };
    document.body.setAttribute("data-ready", "1");
  }
  load().then(start).catch(function (err) {
    var box = document.getElementById("detail");
    box.replaceChildren(el("p", "notice", "Could not read the embedded results: " + err.message));
    document.body.setAttribute("data-ready", "error");
  });
})();
"""
