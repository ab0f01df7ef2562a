// The profile's card (GET /v1/profile): one panel per section; what the profile does not carry says "not measured".
"use strict";
(function () {
  const { state, setKey, api, probeAnonymous, esc } = window.mnemo;
  const $ = (id) => document.getElementById(id);
  const NM = '<span class="nm">not measured</span>';

  const title = (k) => k.replace(/_/g, " ").replace(/^./, (c) => c.toUpperCase());
  function scalar(v) {
    if (v === null || v === undefined || v === "not measured") return NM;
    if (typeof v === "number") return esc(Number.isInteger(v) ? String(v) : (Math.abs(v) >= 0.001 || v === 0 ? v.toFixed(3) : v.toPrecision(3)));
    if (typeof v === "boolean") return v ? "yes" : "no";
    return esc(v);
  }
  const isMatrix = (v) => Array.isArray(v) && v.length && v.every((r) => Array.isArray(r));
  // a 3-way confusion matrix: {labels, rows: [[...]]} or {true_label: {predicted: n}} or a bare matrix
  function matrix(v) {
    let labels = null, rows = null, cols = null;
    if (isMatrix(v)) rows = v;
    else if (v && isMatrix(v.matrix || v.rows || v.counts)) { rows = v.matrix || v.rows || v.counts; labels = v.labels || null; cols = v.predicted || v.columns || labels; labels = v.actual || v.rows_labels || labels; }
    else if (v && typeof v === "object" && Object.values(v).every((r) => r && typeof r === "object" && !Array.isArray(r))) {
      labels = Object.keys(v); cols = Array.from(new Set(labels.flatMap((k) => Object.keys(v[k]))));
      rows = labels.map((k) => cols.map((c) => v[k][c]));
    }
    if (!rows) return null;
    cols = cols || rows[0].map((_, i) => String(i)); labels = labels || rows.map((_, i) => String(i));
    return '<table class="confusion"><thead><tr><th>actual \\ predicted</th>' + cols.map((c) => "<th>" + esc(c) + "</th>").join("") +
      "</tr></thead><tbody>" + rows.map((r, i) => "<tr><th>" + esc(labels[i]) + "</th>" + r.map((x) => "<td>" + scalar(x) + "</td>").join("") + "</tr>").join("") + "</tbody></table>";
  }
  function value(k, v) {
    if (/confusion/i.test(k)) { const m = matrix(v); if (m) return m; }
    if (Array.isArray(v)) {
      if (v.length === 2 && v.every((x) => typeof x === "number")) return "[" + scalar(v[0]) + ", " + scalar(v[1]) + "]";
      return v.length ? v.map((x) => (typeof x === "object" && x !== null ? dl(x) : scalar(x))).join(", ") : NM;
    }
    if (v && typeof v === "object") return dl(v);
    return scalar(v);
  }
  function dl(obj) {
    return "<dl>" + Object.entries(obj).map(([k, v]) => '<dt>' + esc(title(k)) + '</dt><dd data-key="' + esc(k) + '">' + value(k, v) + "</dd>").join("") + "</dl>";
  }

  async function load() {
    $("error").hidden = true;
    if (!state.anonymous && !state.key) { $("keystate").textContent = "enter a key to load data"; return; }
    try {
      const p = await api("/v1/profile");
      $("keystate").textContent = state.anonymous ? "no key needed (anonymous server)" : "key accepted";
      $("p-path").textContent = p.path; $("p-hash").textContent = p.hash.slice(0, 16); $("p-rule").textContent = p.rule;
      $("card").innerHTML = Object.entries(p.card).map(([k, v]) =>
        '<section class="panel" data-section="' + esc(k) + '"><h2>' + esc(title(k)) + "</h2>" +
        (v && typeof v === "object" && !Array.isArray(v) ? dl(v) : value(k, v)) + "</section>").join("");
    } catch (e) {
      $("keystate").textContent = e.status === 401 || e.status === 403 ? "key rejected: " + e.message : "";
      $("error").textContent = e.message; $("error").hidden = false; $("card").innerHTML = "";
    }
  }
  $("keyform").addEventListener("submit", (ev) => { ev.preventDefault(); setKey($("apikey").value.trim()); load(); });
  (async () => {
    if (await probeAnonymous()) $("keyform").hidden = true; else $("apikey").value = state.key;
    load();
  })();
})();
