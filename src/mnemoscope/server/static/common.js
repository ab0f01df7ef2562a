// Shared by the dashboard pages: the API key (sessionStorage), API calls, number formatting, escaping.
"use strict";
window.mnemo = (function () {
  const KEY = "mnemoscope-key";
  const state = { key: sessionStorage.getItem(KEY) || "", anonymous: false };

  function setKey(k) { state.key = k; sessionStorage.setItem(KEY, k); }

  async function api(path, opts) {
    const h = { "Content-Type": "application/json" };
    if (state.key) h["Authorization"] = "Bearer " + state.key;
    const r = await fetch(path, Object.assign({ headers: h }, opts || {}));
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

  // Does the server need a key? /health says ("auth": "none" when started with --allow-anonymous).
  async function probeAnonymous() {
    try {
      const r = await fetch("/health");
      state.anonymous = r.ok && (await r.json()).auth === "none";
    } catch (e) { state.anonymous = false; }
    return state.anonymous;
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
  return { state, setKey, api, probeAnonymous, fmt, num, esc };
})();
