// The profile's card (GET /v1/profile): a summary of the figures behind the verdict, then one panel
// per section of the card; whatever the profile does not carry says "not measured".
"use strict";
(function () {
  const { state, setKey, api, probeAnonymous, esc } = window.mnemo;
  const $ = (id) => document.getElementById(id);
  const NM = '<span class="nm">not measured</span>';
  const ORDER = ["validation", "drift", "verdict", "data", "model", "repcs", "profile"];
  const TITLES = { validation: "Held-out validation", drift: "Drift: live answers vs the calibration's", verdict: "Verdict and its guarantee", data: "Calibration data", repcs: "RePCS (secondary)" };
  const measured = (v) => v !== null && v !== undefined && v !== "not measured";

  const title = (k) => TITLES[k] || k.replace(/_/g, " ").replace(/^./, (c) => c.toUpperCase());
  function scalar(v) {
    if (!measured(v)) return NM;
    if (typeof v === "number") return esc(Number.isInteger(v) ? String(v) : (Math.abs(v) >= 0.001 || v === 0 ? v.toFixed(3) : v.toPrecision(3)));
    if (typeof v === "boolean") return v ? "yes" : "no";
    return esc(v);
  }
  const pct = (v) => (measured(v) ? (100 * v).toFixed(1) + " %" : NM);
  function auc(a) {
    if (!a || typeof a !== "object") return NM;
    const ci = measured(a.ci_low) && measured(a.ci_high) ? " [" + scalar(a.ci_low) + ", " + scalar(a.ci_high) + "]" : "";
    return scalar(a.estimate) + ci + (a.score ? ' <span class="muted">(' + esc(a.score) + ")</span>" : "");
  }
  // the 3-way confusion matrix: truth -> verdict -> count
  function confusion(v) {
    if (!v || typeof v !== "object") return NM;
    const rows = Object.keys(v);
    const cols = Array.from(new Set(rows.flatMap((k) => Object.keys(v[k] || {}))));
    return '<table class="confusion"><thead><tr><th>truth \\ verdict</th>' + cols.map((c) => "<th>" + esc(c) + "</th>").join("") +
      "</tr></thead><tbody>" + rows.map((r) => "<tr><th>" + esc(r) + "</th>" + cols.map((c) => "<td>" + scalar((v[r] || {})[c]) + "</td>").join("") + "</tr>").join("") +
      "</tbody></table>";
  }
  function value(k, v) {
    if (k === "confusion") return confusion(v);
    if (k === "auc" || k === "cv_auc") return typeof v === "object" && v !== null ? auc(v) : scalar(v);
    if (/rate$|recall$|accuracy/.test(k)) return measured(v) ? pct(v) : NM;
    if (Array.isArray(v)) return v.length ? v.map((x) => (typeof x === "object" && x !== null ? dl(x) : scalar(x))).join(", ") : NM;
    if (v && typeof v === "object") return Object.keys(v).length ? dl(v) : NM;
    return scalar(v);
  }
  function dl(obj) {
    // a measured section has no "reason" to give
    const entries = Object.entries(obj).filter(([k, v]) => !(k === "reason" && (v === null || obj.status === "measured")));
    return "<dl>" + entries.map(([k, v]) => '<dt>' + esc(title(k)) + '</dt><dd data-key="' + esc(k) + '">' + value(k, v) + "</dd>").join("") + "</dl>";
  }

  // the drift watch (card.drift): why it is not watched, "not enough answers yet", or the last
  // tested window with each test's statistic and p-value (never a p-value before a full window)
  const p3 = (v) => (v === null || v === undefined ? NM : v < 0.001 ? v.toExponential(2) : v.toFixed(3));
  function driftLine(d) {
    if (!d || !d.watched) return '<span class="nm">' + esc((d && d.reason) || "not watched") + "</span>";
    if (!d.last) return '<span class="nm">not enough answers yet</span> <span class="muted">(' + d.current.n + " of " + d.current.of + " answers before the first test)</span>";
    const l = d.last;
    const how = l.method === "permutation" ? "permutation p = " + p3(l.p_value) + " over " + l.n_tests + " coordinates"
      : "Bonferroni p = " + p3(l.p_value) + " over " + l.n_tests + " tests";
    return '<b class="drift-' + (l.drifted ? "yes" : "no") + '">' + esc(d.state) + "</b> in window " + l.index +
      " (answers " + l.answers[0] + "-" + l.answers[1] + "): " + how +
      ", alpha " + scalar(d.alpha) + ' <span class="muted">(' + d.n_alarms + " of " + d.n_windows + " tests fired)</span>";
  }
  function drift(d) {
    let html = "<p data-key=\"drift-state\">" + driftLine(d) + "</p>";
    if (!d || !d.watched) return html;
    html += '<p class="muted">' + esc(d.scheme) + "; reference: " + d.reference.n + " calibration answers (" + esc(d.reference.source) +
      "), flag rate " + pct(d.reference.flag_rate) + "; next test: " + d.current.n + " of " + d.current.of + " answers</p>";
    if (!d.last) return html;
    return html + '<table class="drift"><thead><tr><th>test</th><th>window n</th><th>reference n</th><th>statistic</th><th>p-value</th><th>method</th></tr></thead><tbody>' +
      d.last.tests.map((t) => '<tr data-test="' + esc(t.name) + '"><th>' + esc(t.name) + "</th><td>" + t.n_window + "</td><td>" + t.n_reference +
        "</td><td>" + (t.statistic === null ? NM : scalar(t.statistic)) + "</td><td>" + (t.p_value === null ? '<span class="nm">' + esc(t.reason) + "</span>" : p3(t.p_value)) +
        '</td><td class="muted">' + esc(t.method) + "</td></tr>").join("") + "</tbody></table>";
  }

  function glance(p) {
    const c = p.card, v = c.verdict || {}, d = c.data || {}, val = c.validation || {};
    $("g-model").textContent = (c.model && c.model.name) || "-";
    $("p-rule").textContent = p.rule;
    $("p-path").textContent = p.path;
    $("p-hash").textContent = p.hash.slice(0, 16);
    $("g-guarantee").innerHTML = measured(v.alpha)
      ? "alpha " + scalar(v.alpha) + ", n = " + scalar(v.n_calibration) + " held-out clean answers, " + (v.certified ? "certified" : "<b>NOT certified</b> (needs " + scalar(v.min_n_for_alpha) + ")")
      : NM;
    $("g-data").innerHTML = scalar(d.n_records) + " records: " + scalar(d.n_context) + " context-needed, " + scalar(d.n_memory) + " memory";
    $("g-auc").innerHTML = auc(val.auc) + (measured(val.n) ? ' <span class="muted">on ' + scalar(val.n) + " held-out answers</span>" : "");
    $("g-ffr").innerHTML = measured(val.false_flag_rate) ? pct(val.false_flag_rate) + " realised vs alpha " + scalar(val.alpha) : NM;
    $("g-recall").innerHTML = measured(val.memory_recall) ? pct(val.memory_recall) : NM;
    $("g-drift").innerHTML = "drift" in c ? driftLine(c.drift) : NM;
  }

  async function load() {
    $("error").hidden = true;
    if (!state.anonymous && !state.key) { $("keystate").textContent = "enter a key to load data"; return; }
    try {
      const p = await api("/v1/profile");
      $("keystate").textContent = state.anonymous ? "no key needed (anonymous server)" : "key accepted";
      glance(p);
      const keys = ORDER.filter((k) => k in p.card).concat(Object.keys(p.card).filter((k) => !ORDER.includes(k) && k !== "format"));
      $("card").innerHTML = keys.map((k) => {
        const v = p.card[k];
        return '<section class="panel" data-section="' + esc(k) + '"><h2>' + esc(title(k)) + "</h2>" +
          (k === "drift" ? drift(v) : v && typeof v === "object" && !Array.isArray(v) ? dl(v) : value(k, v)) + "</section>";
      }).join("");
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
