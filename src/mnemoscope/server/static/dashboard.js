// mnemoscope audit dashboard: plain JS, no CDN, talks to the /v1 API with a Bearer key.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  let key = sessionStorage.getItem("mnemoscope-key") || "";
  let profile = null;
  let last = null;

  function headers() {
    const h = { "Content-Type": "application/json" };
    if (key) h["Authorization"] = "Bearer " + key;
    return h;
  }
  async function api(path, opts) {
    const r = await fetch(path, Object.assign({ headers: headers() }, opts || {}));
    let body = null;
    try { body = await r.json(); } catch (e) { body = null; }
    if (!r.ok) {
      const msg = body && body.detail ? body.detail : r.status + " " + r.statusText;
      const err = new Error(typeof msg === "string" ? msg : JSON.stringify(msg));
      err.status = r.status;
      throw err;
    }
    return body;
  }
  const fmt = (v, d) => (v === null || v === undefined ? "-" : Number(v).toFixed(d === undefined ? 3 : d));
  // KL values are often << 0.01: three significant digits instead of a fixed number of decimals
  function num(v) {
    if (v === null || v === undefined) return "-";
    const x = Number(v), ax = Math.abs(x);
    if (ax === 0 || (ax >= 0.01 && ax < 1e5)) return x.toFixed(ax >= 100 ? 0 : 2);
    return x.toPrecision(3);
  }
  function esc(s) {
    return String(s == null ? "" : s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  }

  async function refreshStatus() {
    try {
      const r = await fetch("/ready");
      $("s-ready").textContent = r.ok ? "yes" : "no";
    } catch (e) { $("s-ready").textContent = "unreachable"; }
    if (!key) { $("keystate").textContent = "enter a key to load data"; return; }
    try {
      const s = await api("/v1/stats");
      profile = s.profile;
      $("keystate").textContent = "key accepted";
      $("s-model").textContent = s.model.name + (s.model.adapter ? " + " + s.model.adapter : "");
      $("s-layers").textContent = s.model.n_layers + " (" + s.profile.layers.length + " target)";
      $("s-count").textContent = s.n_audits;
      $("s-anomalies").textContent = s.n_anomalies;
      $("s-rate").textContent = s.anomaly_rate === null ? "-" : (100 * s.anomaly_rate).toFixed(1) + " %";
      $("s-mem").textContent = s.n_memorized;
      $("s-lat").textContent = fmt(s.latency_ms.p50, 0) + " / " + fmt(s.latency_ms.p95, 0) + " ms";
      $("s-queue").textContent = s.queue.depth + " / " + s.queue.capacity + " (batch " + s.queue.max_batch_size + ")";
    } catch (e) {
      const denied = e.status === 401 || e.status === 403;
      $("keystate").textContent = denied ? "key rejected: " + e.message : e.message;
      if (denied) {
        // do not keep showing what an earlier, accepted key loaded
        for (const id of ["s-model", "s-layers", "s-count", "s-anomalies", "s-rate", "s-mem", "s-lat", "s-queue"]) $(id).textContent = "-";
      }
    }
  }

  async function refreshHistory() {
    if (!key) return;
    try {
      const h = await api("/v1/history?limit=20");
      $("hist").innerHTML = h.items.map((a) =>
        '<tr class="' + (a.anomaly_flag ? "flag" : "") + '" data-id="' + esc(a.id) + '">' +
        "<td>" + esc(a.seq) + "</td>" +
        "<td>" + (a.created_at ? new Date(a.created_at * 1000).toLocaleTimeString() : "-") + "</td>" +
        '<td class="q" title="' + esc(a.query) + '">' + esc(a.pruned ? "(pruned)" : a.query) + "</td>" +
        '<td class="src-' + esc(a.source) + '">' + esc(a.pruned ? "-" : a.source || "-") + "</td>" +
        "<td>" + fmt(a.p_memory, 2) + "</td>" +
        "<td>" + num(a.repcs && a.repcs.kl) + "</td>" +
        "<td>" + (a.pruned ? "-" : a.anomaly_flag ? "flagged" : "no") + "</td>" +
        "<td>" + fmt(a.latency_ms, 0) + " ms</td></tr>").join("");
      if (!last && h.items.length && !h.items[0].pruned) { last = h.items[0]; drawAll(); }
    } catch (e) {
      // the status panel reports auth problems; drop rows loaded with an earlier key
      if (e.status === 401 || e.status === 403) { $("hist").innerHTML = ""; last = null; drawAll(); }
    }
  }

  function drawLTS(a) {
    const cv = $("lts"), g = cv.getContext("2d");
    const W = cv.width, H = cv.height, L = 64, R = 12, T = 12, B = 30;
    g.clearRect(0, 0, W, H);
    g.font = "11px system-ui, sans-serif";
    if (!a) { g.fillStyle = "#6b7480"; g.fillText("no audit yet", W / 2 - 30, H / 2); return; }
    const y = a.lts_trajectory || [], z = a.lts_z || [], layers = a.layers || [], n = y.length;
    if (!n) { g.fillStyle = "#6b7480"; g.fillText("no LTS trajectory (CRM not measured)", W / 2 - 90, H / 2); return; }
    const flagged = new Set(a.flagged_layers);
    // calibration band: mu +- k sigma recovered from z: mu = y - z*sigma is unknown here, so draw z-space band
    const k = profile && profile.anomaly ? profile.anomaly.k_sigma : 2;
    const vals = z.concat([k, -k]);
    let lo = Math.min.apply(null, vals), hi = Math.max.apply(null, vals);
    const pad = (hi - lo) * 0.1 || 1; lo -= pad; hi += pad;
    const X = (i) => L + (n === 1 ? (W - L - R) / 2 : (i * (W - L - R)) / (n - 1));
    const Y = (v) => T + ((hi - v) * (H - T - B)) / (hi - lo);
    g.fillStyle = "#eef3fb"; g.fillRect(L, Y(k), W - L - R, Y(-k) - Y(k));
    g.strokeStyle = "#c7cdd4"; g.beginPath(); g.moveTo(L, Y(0)); g.lineTo(W - R, Y(0)); g.stroke();
    g.fillStyle = "#6b7480";
    g.textAlign = "right";
    for (const t of [lo, 0, hi]) g.fillText(t.toFixed(1), L - 6, Y(t) + 4);
    g.textAlign = "center";
    g.save(); g.translate(12, T + (H - T - B) / 2); g.rotate(-Math.PI / 2); g.fillText("z = (LTS - mu) / sigma", 0, 0); g.restore();
    g.strokeStyle = "#2f6fdf"; g.lineWidth = 2; g.beginPath();
    z.forEach((v, i) => (i ? g.lineTo(X(i), Y(v)) : g.moveTo(X(i), Y(v)))); g.stroke();
    z.forEach((v, i) => {
      const bad = flagged.has(layers[i]);
      g.fillStyle = bad ? "#d93b3b" : "#2f6fdf";
      g.beginPath(); g.arc(X(i), Y(v), bad ? 5 : 3.5, 0, 2 * Math.PI); g.fill();
      if (n <= 40 || i % 2 === 0) { g.fillStyle = "#6b7480"; g.fillText(String(layers[i]), X(i), H - 14); }
    });
    g.fillStyle = "#6b7480"; g.textAlign = "right"; g.fillText("layer", W - R, H - 2); g.textAlign = "left";
  }

  function drawKL(a) {
    if (a && !a.repcs) a = null;
    const cv = $("kl"), g = cv.getContext("2d"), W = cv.width, H = cv.height;
    g.clearRect(0, 0, W, H);
    g.font = "11px system-ui, sans-serif";
    if (!a) return;
    const zv = a.repcs.kl, tau = a.repcs.tau;
    const hasTau = tau !== null && tau !== undefined;
    const hi = Math.max(zv, hasTau ? tau : 0, 1e-9) * 1.25, L = 64, R = 12;
    const X = (v) => L + (v / hi) * (W - L - R);
    g.fillStyle = a.repcs.memorized ? "#d93b3b" : "#2e9d5b";
    g.fillRect(L, 18, Math.max(1, X(zv) - L), 22);
    g.fillStyle = "#17202c";
    if (hasTau) {
      g.strokeStyle = "#17202c"; g.lineWidth = 2; g.beginPath(); g.moveTo(X(tau), 10); g.lineTo(X(tau), 48); g.stroke();
      g.fillText("tau = " + num(tau), Math.min(X(tau) + 4, W - 90), 60);
    } else {
      g.fillText("tau not certified (too few clean calibration queries): nothing is flagged memorized", L, 60);
    }
    g.fillText("Z = " + num(zv) + (a.repcs.memorized ? "  (memorized)" : "  (context used)"), L + 4, 12);
  }

  function drawAll() { drawLTS(last); drawKL(last); }

  // the answer with every token wrapped by its source; offsets index into a.answer
  function renderAnswer(a) {
    const el = $("r-answer");
    el.textContent = "";
    if (!a.answer) { el.textContent = a.pruned ? "(pruned)" : "(answer not returned)"; return; }
    const toks = a.tokens || [];
    if (!toks.length) { el.textContent = a.answer; return; }
    for (const t of toks) {
      const span = document.createElement("span");
      span.className = "tok" + (t.source === "context" || t.source === "memory" ? " " + t.source : "");
      span.dataset.source = t.source;
      span.textContent = t.text;
      span.title = t.source + " | pmi " + num(t.pmi) + " | KL " + num(t.kl) +
        " | p(with) " + fmt(Math.exp(t.logp_with), 3) + " | p(without) " + fmt(Math.exp(t.logp_without), 3);
      el.appendChild(span);
    }
  }

  function showResult(a) {
    last = a;
    $("result").hidden = false;
    const src = a.source || "undetermined";
    const badge = $("v-source");
    badge.textContent = src;
    badge.className = "badge " + src;
    $("v-pmem").textContent = a.p_memory === null || a.p_memory === undefined ? "p_memory not measured" : "p_memory " + fmt(a.p_memory, 2);
    $("v-summary").textContent = a.summary || "";
    renderAnswer(a);
    const ev = a.evidence || {};
    const frac = ev.context_token_fraction;
    $("v-evidence").textContent = "Evidence: RePCS Z " + num(ev.repcs_z) + " (tau " + num(ev.tau) + "), closed-book log-prob " +
      num(ev.closed_book_logprob) + " per token, context-supported words " + (frac === null || frac === undefined ? "none attributed" : (100 * frac).toFixed(0) + " %") +
      (ev.signals_used && ev.signals_used.length ? "; combined: " + ev.signals_used.join(", ") : "");
    const g = a.guarantee || {};
    $("v-guarantee").textContent = "Guarantee (" + (a.rule || "") + " rule, alpha " + fmt(g.alpha, 2) + (g.certified ? ", certified" : ", NOT certified") + "): " + (g.statement || "");
    const rp = $("v-repcs");
    rp.textContent = "RePCS " + (a.repcs.memorized ? "memorized" : "context used") + " (Z " + num(a.repcs.kl) + " vs tau " + num(a.repcs.tau) + ")";
    rp.className = "verdict";
    const an = $("v-anomaly");
    an.textContent = "CRM anomaly rule: " + (a.anomaly_flag ? "flagged" : "not flagged") + " (score " + fmt(a.anomaly_score, 2) + ")";
    an.className = "verdict";
    const cr = $("v-crm");
    cr.hidden = a.crm_probability === null || a.crm_probability === undefined;
    cr.textContent = "CRM classifier " + fmt(a.crm_probability, 2);
    cr.className = "verdict";
    $("r-meta").textContent = "id " + a.id + " · seq " + a.seq + " · " + fmt(a.latency_ms, 0) + " ms";
    drawAll();
  }

  // audit detail: a history row (or #/audit/<id>) opens that audit in the same view
  async function openAudit(id) {
    try {
      const a = await api("/v1/audits/" + encodeURIComponent(id));
      showResult(a);
      $("result").scrollIntoView({ block: "nearest" });
    } catch (e) {
      $("error").textContent = e.message; $("error").hidden = false;
    }
  }
  $("hist").addEventListener("click", (ev) => {
    const tr = ev.target.closest("tr[data-id]");
    if (tr) { location.hash = "#/audit/" + tr.dataset.id; }
  });
  window.addEventListener("hashchange", () => {
    const m = location.hash.match(/^#\/audit\/(.+)$/);
    if (m && key) openAudit(decodeURIComponent(m[1]));
  });

  $("keyform").addEventListener("submit", (ev) => {
    ev.preventDefault();
    key = $("apikey").value.trim();
    sessionStorage.setItem("mnemoscope-key", key);
    refreshStatus(); refreshHistory();
  });

  $("auditform").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    $("error").hidden = true;
    $("submit").disabled = true; $("busy").textContent = "auditing...";
    try {
      const a = await api("/v1/audit", { method: "POST", body: JSON.stringify({ context: $("context").value, query: $("query").value }) });
      showResult(a);
      refreshStatus(); refreshHistory();
    } catch (e) {
      $("error").textContent = e.message; $("error").hidden = false;
    } finally {
      $("submit").disabled = false; $("busy").textContent = "";
    }
  });

  $("apikey").value = key;
  drawAll();
  refreshStatus(); refreshHistory();
  { const m = location.hash.match(/^#\/audit\/(.+)$/); if (m && key) openAudit(decodeURIComponent(m[1])); }
  setInterval(() => { refreshStatus(); refreshHistory(); }, 5000);
})();
