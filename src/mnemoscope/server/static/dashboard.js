// mnemoscope audit dashboard: plain JS, no CDN, talks to the /v1 API (Bearer key unless anonymous).
// Verdict first: the audit panel shows the source badge, the highlighted answer, the evidence and the
// guarantee; RePCS and CRM sit in the collapsed "details" section.
"use strict";
(function () {
  const { state, setKey, api, probeAnonymous, fmt, num, esc } = window.mnemo;
  const $ = (id) => document.getElementById(id);
  const SOURCES = ["context", "memory", "mixed", "undetermined", "unsupported"];
  let profile = null;
  let last = null;
  let shownFirst = false;
  let stats = null;

  function clearStatus() {
    for (const id of ["s-model", "s-rule", "s-count", "s-flags", "s-lat", "s-queue"]) $(id).textContent = "-";
    for (const s of SOURCES) { $("s-src-" + s).textContent = "-"; barOf(s).style.width = "0"; }
  }
  const barOf = (s) => document.querySelector('#s-sources tr[data-source="' + s + '"] td.bar span');
  const canRead = () => state.anonymous || !!state.key;

  async function refreshStatus() {
    try {
      const r = await fetch("/ready");
      $("s-ready").textContent = r.ok ? "yes" : "no";
    } catch (e) { $("s-ready").textContent = "unreachable"; }
    if (!canRead()) { $("keystate").textContent = "enter a key to load data"; return; }
    try {
      const s = await api("/v1/stats");
      profile = s.profile;
      stats = s;
      $("keystate").textContent = state.anonymous ? "no key needed (anonymous server)" : "key accepted";
      $("s-model").textContent = s.model.name + (s.model.adapter ? " + " + s.model.adapter : "");
      $("s-rule").textContent = s.profile.rule || "-";
      $("s-count").textContent = s.n_audits;
      $("s-flags").textContent = s.n_memory_flag + (s.memory_flag_rate === null ? "" : " (" + (100 * s.memory_flag_rate).toFixed(1) + " %)");
      const by = s.by_source;
      const max = Math.max(1, ...SOURCES.map((k) => by[k] || 0));
      for (const k of SOURCES) {
        $("s-src-" + k).textContent = String(by[k] || 0);
        barOf(k).style.width = (100 * (by[k] || 0) / max).toFixed(1) + "%";
      }
      $("s-lat").textContent = fmt(s.latency_ms.p50, 0) + " / " + fmt(s.latency_ms.p95, 0) + " ms";
      $("s-queue").textContent = s.queue.depth + " / " + s.queue.capacity + " (batch " + s.queue.max_batch_size + ")";
    } catch (e) {
      const denied = e.status === 401 || e.status === 403;
      $("keystate").textContent = denied ? "key rejected: " + e.message : e.message;
      if (denied) clearStatus(); // do not keep showing what an earlier, accepted key loaded
    }
  }

  function historyQuery() {
    const q = new URLSearchParams({ limit: "20" });
    if ($("f-source").value) q.set("source", $("f-source").value);
    if ($("f-flag").checked) q.set("memory_flag", "true");
    return "/v1/history?" + q.toString();
  }

  async function refreshHistory() {
    if (!canRead()) return;
    try {
      const h = await api(historyQuery());
      const src = $("f-source").value, flagOnly = $("f-flag").checked;
      let of = "";
      if (stats && !flagOnly) of = " of " + (src ? stats.by_source[src] + " from " + src : stats.n_audits);
      else if (stats && !src) of = " of " + stats.n_memory_flag + " flagged";
      $("h-total").textContent = h.items.length + of + " shown";
      $("hist").innerHTML = h.items.map((a) =>
        '<tr class="' + (a.memory_flag ? "flagged" : "") + '" data-id="' + esc(a.id) + '" data-source="' + esc(a.source || "") + '">' +
        "<td>" + esc(a.seq) + "</td>" +
        "<td>" + (a.created_at ? new Date(a.created_at * 1000).toLocaleTimeString() : "-") + "</td>" +
        '<td class="q" title="' + esc(a.query) + '">' + esc(a.pruned ? "(pruned)" : a.query) + "</td>" +
        '<td class="src src-' + esc(a.source) + '">' + esc(a.pruned ? "-" : a.source || "-") + "</td>" +
        "<td>" + fmt(a.p_memory, 2) + "</td>" +
        "<td>" + (a.pruned || a.memory_flag == null ? "-" : a.memory_flag ? "flagged" : "no") + "</td>" +
        "<td>" + fmt(a.latency_ms, 0) + " ms</td></tr>").join("");
      // first load: the newest audit is shown at once (no click needed), unless the URL names one
      if (!shownFirst && !location.hash && h.items.length && !h.items[0].pruned && !$("f-source").value && !$("f-flag").checked) {
        shownFirst = true;
        openAudit(h.items[0].id, false);
      }
    } catch (e) {
      // the status panel reports auth problems; drop rows loaded with an earlier key
      if (e.status === 401 || e.status === 403) { $("hist").innerHTML = ""; $("h-total").textContent = ""; last = null; $("result").hidden = true; }
    }
  }

  function drawLTS(a) {
    const cv = $("lts"), g = cv.getContext("2d");
    const W = cv.width, H = cv.height, L = 64, R = 12, T = 12, B = 30;
    g.clearRect(0, 0, W, H);
    g.font = "11px system-ui, sans-serif";
    const crm = a && a.crm;
    if (!crm) { g.fillStyle = "#6b7480"; g.fillText(a ? "CRM not measured for this audit" : "no audit yet", W / 2 - 80, H / 2); return; }
    const z = crm.lts_z || [], layers = crm.layers || [], n = z.length;
    if (!n) { g.fillStyle = "#6b7480"; g.fillText("no LTS trajectory (CRM not measured)", W / 2 - 90, H / 2); return; }
    const flagged = new Set(crm.flagged_layers || []);
    const k = profile && profile.anomaly ? profile.anomaly.k_sigma : 2;
    const vals = z.filter((v) => v !== null).concat([k, -k]);
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
    z.forEach((v, i) => (i ? g.lineTo(X(i), Y(v || 0)) : g.moveTo(X(i), Y(v || 0)))); g.stroke();
    z.forEach((v, i) => {
      const bad = flagged.has(layers[i]);
      g.fillStyle = bad ? "#d93b3b" : "#2f6fdf";
      g.beginPath(); g.arc(X(i), Y(v || 0), bad ? 5 : 3.5, 0, 2 * Math.PI); g.fill();
      if (n <= 40 || i % 2 === 0) { g.fillStyle = "#6b7480"; g.fillText(String(layers[i]), X(i), H - 14); }
    });
    g.fillStyle = "#6b7480"; g.textAlign = "right"; g.fillText("layer", W - R, H - 2); g.textAlign = "left";
  }

  function drawKL(a) {
    const cv = $("kl"), g = cv.getContext("2d"), W = cv.width, H = cv.height;
    g.clearRect(0, 0, W, H);
    g.font = "11px system-ui, sans-serif";
    if (!a || !a.repcs || a.repcs.kl === null || a.repcs.kl === undefined) return;
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

  // the answer with every token wrapped by its source; offsets index into a.answer
  function renderAnswer(a) {
    const el = $("r-answer");
    el.textContent = "";
    if (!a.answer) { el.textContent = a.pruned ? "(pruned)" : "(answer not returned)"; return; }
    const toks = a.tokens || [];
    if (!toks.length) { el.textContent = a.answer; return; }
    for (const t of toks) {
      const span = document.createElement("span");
      span.className = "tok" + (["context", "memory", "query"].includes(t.source) ? " " + t.source : "");
      span.dataset.source = t.source;
      span.textContent = t.text;
      const p = (lp) => (lp === null || lp === undefined ? "-" : fmt(Math.exp(lp), 3));
      span.title = t.source + " | pmi " + num(t.pmi) + " | KL " + num(t.kl) + " | p(with) " + p(t.logp_with) + " | p(without) " + p(t.logp_without);
      el.appendChild(span);
    }
  }

  // the answer-bearing phrases with their source and passage, worded as the CLI's audit view
  // (passages are 0-based in the API, shown 1-based; none shown for a plain context: one passage)
  const PHRASE_SOURCES = ["context", "memory", "unsupported"];
  const MAX_PHRASES = 8;
  function renderWords(ev) {
    const el = $("v-words");
    el.textContent = "";
    const aw = ev.answer_words;
    el.hidden = !aw || typeof aw !== "object";
    if (el.hidden) return;
    const words = Array.isArray(aw.words) ? aw.words : [];
    el.appendChild(document.createTextNode("Answer-bearing phrases: "));
    if (!words.length) { el.appendChild(document.createTextNode("none beyond the query")); return; }
    const several = Number(aw.n_passages || 1) > 1;
    words.slice(0, MAX_PHRASES).forEach((w, k) => {
      const src = w.grounded || (w.source === "added" ? "unsupported" : w.source);
      const known = PHRASE_SOURCES.includes(src);
      let why = src === "unsupported" ? "unsupported: no passage states it" : known ? src : "?";
      if (w.passage !== null && w.passage !== undefined && several) {
        why += ", stated by passage " + (Number(w.passage) + 1);
        if (w.passage_effect !== null && w.passage_effect !== undefined) {
          const e = -Number(w.passage_effect);
          why += " (without it: " + (e >= 0 ? "+" : "") + e.toFixed(1) + " nats)";
        }
      }
      if (w.in_closed_book !== null && w.in_closed_book !== undefined) {
        why += (w.in_closed_book ? ", in" : ", not in") + " the closed-book answer";
      }
      if (k) el.appendChild(document.createTextNode("; "));
      const t = document.createElement("span");
      t.className = "ph " + (known ? src : "other");
      t.dataset.source = known ? src : "?";
      t.dir = "auto";
      t.textContent = w.text;
      el.appendChild(t);
      el.appendChild(document.createTextNode(" \u2014 " + why));
    });
    if (words.length > MAX_PHRASES) el.appendChild(document.createTextNode(" and " + (words.length - MAX_PHRASES) + " more"));
  }

  function showResult(a) {
    last = a;
    $("result").hidden = false;
    const src = a.source || "undetermined";
    const badge = $("v-source");
    badge.textContent = src;
    badge.className = "badge " + src;
    const flag = $("v-flag");
    const noFlag = a.memory_flag === null || a.memory_flag === undefined; // stored before the flag was recorded
    flag.textContent = noFlag ? "flag not recorded" : a.memory_flag ? "memory flag" : "not flagged";
    flag.className = "flag " + (a.memory_flag ? "on" : "off");
    $("v-pmem").textContent = a.p_memory === null || a.p_memory === undefined ? "p_memory not measured" : "p_memory " + fmt(a.p_memory, 2);
    $("v-summary").textContent = a.summary || "";
    const clip = (t, n) => (t.length > n ? t.slice(0, n - 1) + "…" : t);
    $("r-input").textContent = a.query == null ? "" : "Q: " + clip(a.query, 200) +
      (a.context == null ? "" : a.context ? "   ·   context: " + clip(a.context, 160) : "   ·   no context");
    renderAnswer(a);
    const ev = a.evidence || {};
    const frac = ev.context_token_fraction;
    $("v-evidence").textContent = "Evidence: RePCS Z " + num(ev.repcs_z) + " (tau " + num(ev.tau) + "), closed-book log-prob " +
      num(ev.closed_book_logprob) + " per token, context-supported words " + (frac === null || frac === undefined ? "none attributed" : (100 * frac).toFixed(0) + " %") +
      (ev.signals_used && ev.signals_used.length ? "; combined: " + ev.signals_used.join(", ") : "") +
      (a.answer_given ? "; the answer was given by the caller and scored" : "");
    renderWords(ev);
    const cb = ev.closed_book_answer;
    $("v-closed-book").hidden = typeof cb !== "string";
    $("v-closed-book").textContent = typeof cb === "string" ? "Closed-book answer (the model without the context): " + (cb.trim() || "(empty)") : "";
    const gu = a.guarantee || {};
    $("v-guarantee").textContent = "Guarantee (" + (a.rule || "") + " rule, alpha " + fmt(gu.alpha, 2) + ", n = " + (gu.n_calibration === undefined ? "-" : gu.n_calibration) +
      (gu.certified ? ", certified" : ", NOT certified") + "): " + (gu.statement || "");
    const rp = $("v-repcs");
    rp.textContent = a.repcs ? "RePCS " + (a.repcs.memorized ? "memorized" : "context used") + " (Z " + num(a.repcs.kl) + " vs tau " + num(a.repcs.tau) + ")" : "RePCS not measured";
    const crm = a.crm;
    $("v-anomaly").textContent = crm ? "CRM anomaly rule: " + (crm.anomaly_flag ? "flagged" : "not flagged") + " (score " + fmt(crm.anomaly_score, 2) + ")" : "CRM not measured";
    const cr = $("v-crm");
    cr.hidden = !crm || crm.crm_probability === null || crm.crm_probability === undefined;
    cr.textContent = "CRM classifier " + fmt(crm && crm.crm_probability, 2);
    $("r-meta").textContent = "id " + a.id + " · seq " + a.seq + " · " + fmt(a.latency_ms, 0) + " ms";
    drawLTS(a); drawKL(a);
  }

  // audit detail: a history row (or #/audit/<id>) opens that audit in the same view
  async function openAudit(id, scroll) {
    try {
      showResult(await api("/v1/audits/" + encodeURIComponent(id)));
      if (scroll) $("result").scrollIntoView({ block: "nearest" });
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
    if (m && canRead()) openAudit(decodeURIComponent(m[1]), true);
  });

  $("keyform").addEventListener("submit", (ev) => {
    ev.preventDefault();
    setKey($("apikey").value.trim());
    refreshStatus(); refreshHistory();
  });
  $("histfilter").addEventListener("change", () => refreshHistory());
  $("histfilter").addEventListener("submit", (ev) => ev.preventDefault());

  $("auditform").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    $("error").hidden = true;
    $("submit").disabled = true; $("busy").textContent = "auditing...";
    const body = { context: $("context").value, query: $("query").value };
    const given = $("answer").value;
    if (given.trim()) body.answer = given;
    try {
      const a = await api("/v1/audit", { method: "POST", body: JSON.stringify(body) });
      shownFirst = true;
      showResult(a);
      refreshStatus(); refreshHistory();
    } catch (e) {
      $("error").textContent = e.message; $("error").hidden = false;
    } finally {
      $("submit").disabled = false; $("busy").textContent = "";
    }
  });

  async function start() {
    if (await probeAnonymous()) {
      $("keyform").hidden = true;
    } else {
      $("apikey").value = state.key;
    }
    drawLTS(null); drawKL(null);
    await refreshStatus();
    await refreshHistory();
    const m = location.hash.match(/^#\/audit\/(.+)$/);
    if (m && canRead()) openAudit(decodeURIComponent(m[1]), false);
    setInterval(() => { refreshStatus(); refreshHistory(); }, 5000);
  }
  start();
})();
