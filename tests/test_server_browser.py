"""The dashboard in a real browser: headless Chromium (Playwright) against a real ``mnemoscope serve``.

Needs the ``playwright`` Python package and a system Chromium at ``/usr/bin/chromium`` (Playwright
never downloads a browser here). Without them the tests skip, unless
``MNEMOSCOPE_REQUIRE_SERVICES=1``, which turns the skip into a failure.

Screenshots go to ``$MNEMOSCOPE_SCREENSHOT_DIR`` (``dashboard.png``) when it is set, else to a
temporary folder; ``MNEMOSCOPE_SCREENSHOT_DIR=docs/img`` refreshes the one in the docs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from server_helpers import API_KEY, Server, serving

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 60_000


def _unavailable(reason: str) -> None:
    if os.environ.get("MNEMOSCOPE_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{reason} (MNEMOSCOPE_REQUIRE_SERVICES=1)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed: pip install playwright (no browser download needed)")
    if not CHROMIUM.is_file():
        _unavailable(f"{CHROMIUM} is missing: apt-get install chromium")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def server(browser: Any, tiny_service: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(tiny_service, tmp_path_factory.mktemp("browser-svc")) as s:
        yield s


@pytest.fixture
def js_errors() -> list[str]:
    """Uncaught script errors and console errors of the page, and every HTTP error it got."""
    return []


@pytest.fixture
def page(browser: Any, server: Server, js_errors: list[str]) -> Iterator[Any]:
    ctx = browser.new_context(viewport={"width": 1280, "height": 860}, base_url=server.url)
    pg = ctx.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    pg.on("pageerror", lambda e: js_errors.append(f"pageerror: {e}"))
    pg.on("console", lambda m: js_errors.append(m.text) if m.type == "error" else None)
    pg.on("response", lambda r: js_errors.append(f"HTTP {r.status} {r.url}") if r.status >= 400 else None)
    try:
        yield pg
    finally:
        ctx.close()


def _screenshot_dir(tmp_path: Path) -> Path:
    d = Path(os.environ.get("MNEMOSCOPE_SCREENSHOT_DIR") or tmp_path)
    d.mkdir(parents=True, exist_ok=True)
    return d


def _use_key(page: Any, key: str) -> None:
    page.fill("#apikey", key)
    page.click("#keyform button[type=submit]")


def _audit(page: Any, context: str, query: str) -> None:
    """Submit the audit form and wait for its answer: a new result (another id) or an error."""
    before = page.inner_text("#r-meta")
    page.fill("#context", context)
    page.fill("#query", query)
    page.click("#submit")
    page.wait_for_function(
        """(before) => !document.getElementById('submit').disabled && (
             !document.getElementById('error').hidden ||
             (!document.getElementById('result').hidden
              && document.getElementById('r-meta').textContent !== before))""",
        arg=before,
    )


# Pixels of a canvas: how many are drawn at all, and how many are close to an RGB colour.
CANVAS_PIXELS = """([id, rgb]) => {
  const cv = document.getElementById(id);
  const d = cv.getContext('2d').getImageData(0, 0, cv.width, cv.height).data;
  let drawn = 0, colour = 0;
  for (let i = 0; i < d.length; i += 4) {
    if (d[i + 3] > 0) drawn++;
    if (d[i + 3] > 200 && Math.abs(d[i] - rgb[0]) < 24 && Math.abs(d[i + 1] - rgb[1]) < 24
        && Math.abs(d[i + 2] - rgb[2]) < 24) colour++;
  }
  return {drawn, colour, total: cv.width * cv.height};
}"""
LINE_BLUE = [0x2F, 0x6F, 0xDF]  # the LTS trajectory line and points
TAU_INK = [0x17, 0x20, 0x2C]  # the tau marker on the RePCS bar


def test_dashboard_audit_flow(page: Any, js_errors: list[str], tmp_path: Path) -> None:
    from playwright.sync_api import expect

    page.goto("/")
    expect(page).to_have_title("mnemoscope audit")
    expect(page.locator("#s-ready")).to_have_text("yes")
    expect(page.locator("#keystate")).to_contain_text("enter a key")
    before = page.evaluate(CANVAS_PIXELS, ["lts", LINE_BLUE])
    assert before["colour"] == 0, "the LTS chart shows a trajectory before any audit"

    _use_key(page, API_KEY)
    expect(page.locator("#keystate")).to_have_text("key accepted")
    expect(page.locator("#s-count")).to_have_text("0")
    expect(page.locator("#s-model")).not_to_have_text("-")

    # markup in the query must come back as text in the history table, not as HTML
    tricky = 'What is <b id="inj">Zor</b> & "Ka"?'
    _audit(page, "Zor lies on the river Ka.", tricky)
    expect(page.locator("#error")).to_be_hidden()

    query = "Where is the town of Velmora?"
    _audit(page, "The town of Velmora lies on the river Odrin, north of the salt flats.", query)
    expect(page.locator("#error")).to_be_hidden()

    # the verdict leads: a source badge, p_memory, the sentence, the guarantee; CRM is secondary
    expect(page.locator("#v-source")).to_have_text(re.compile(r"^(context|memory|mixed|undetermined)$"))
    expect(page.locator("#v-source")).to_have_class(
        re.compile(r"\bbadge (context|memory|mixed|undetermined)\b")
    )
    expect(page.locator("#v-pmem")).to_have_text(re.compile(r"^p_memory \d\.\d\d$"))
    expect(page.locator("#v-summary")).not_to_be_empty()
    expect(page.locator("#v-guarantee")).to_contain_text("Guarantee (combined rule")
    expect(page.locator("#v-anomaly")).to_have_text(
        re.compile(r"^CRM anomaly rule: (flagged|not flagged) \(score")
    )
    expect(page.locator("#v-repcs")).to_have_text(
        re.compile(r"^RePCS (memorized|context used) \(Z [-+\d.e]+ vs tau [-+\d.e-]+\)")
    )
    # every answer token is a highlighted element, and together they spell the answer
    toks = page.locator("#r-answer span.tok")
    assert toks.count() > 0
    spelled = page.evaluate(
        "() => Array.from(document.querySelectorAll('#r-answer span.tok')).map(s => s.textContent).join('')"
    )
    audit_id = re.search(r"id ([0-9a-f]{32})", page.inner_text("#r-meta")).group(1)  # type: ignore[union-attr]
    api = page.evaluate(
        "async ([id, key]) => (await fetch('/v1/audits/' + id, {headers: {Authorization: 'Bearer ' + key}})).json()",
        [audit_id, API_KEY],
    )
    assert spelled == api["answer"] and len(api["tokens"]) == toks.count()
    sources = set(
        page.evaluate(
            "() => Array.from(document.querySelectorAll('#r-answer span.tok')).map(s => s.dataset.source)"
        )
    )
    assert sources <= {"context", "memory", "neutral"}, sources
    expect(page.locator("#r-meta")).to_have_text(re.compile(r"^id [0-9a-f]{32} · seq \d+ · \d+ ms"))

    # history: refreshed after each audit (and every 5 s); newest first
    rows = page.locator("#hist tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0).locator("td.q")).to_have_text(query)
    expect(rows.nth(1).locator("td.q")).to_have_text(tricky)
    assert page.locator("#inj").count() == 0, "the query was inserted as HTML"
    expect(rows.nth(0).locator("td").nth(3)).to_have_text(
        re.compile(r"^(context|memory|mixed|undetermined)$")
    )
    expect(rows.nth(0).locator("td").nth(6)).to_have_text(re.compile(r"^(flagged|no)$"))

    # status panel counts
    expect(page.locator("#s-count")).to_have_text("2")
    assert int(page.inner_text("#s-anomalies")) in (0, 1, 2)
    expect(page.locator("#s-rate")).to_have_text(re.compile(r"^\d+\.\d %$"))
    expect(page.locator("#s-lat")).to_have_text(re.compile(r"^\d+ / \d+ ms$"))
    expect(page.locator("#s-queue")).to_have_text(re.compile(r"^\d+ / \d+ \(batch \d+\)$"))

    # the LTS chart and the RePCS bar were drawn for the last audit
    lts = page.evaluate(CANVAS_PIXELS, ["lts", LINE_BLUE])
    assert lts["drawn"] > 0.02 * lts["total"], lts  # the calibration band alone is a few % of the canvas
    assert lts["colour"] > 20, lts  # trajectory points (the tiny model's profile has one target layer)
    kl = page.evaluate(CANVAS_PIXELS, ["kl", TAU_INK])
    assert kl["drawn"] > 500 and kl["colour"] > 50, kl

    # a reload keeps the key (sessionStorage) and draws the newest audit from the history
    page.reload()
    expect(page.locator("#keystate")).to_have_text("key accepted")
    expect(page.locator("#s-count")).to_have_text("2")
    expect(page.locator("#hist tr").nth(0).locator("td.q")).to_have_text(query)
    page.wait_for_function(
        "() => { const cv = document.getElementById('lts');"
        " const d = cv.getContext('2d').getImageData(0, 0, cv.width, cv.height).data;"
        " for (let i = 3; i < d.length; i += 4) if (d[i] > 0) return true; return false; }"
    )
    # one more audit after the reload: the result box and the charts follow it
    query3 = "What is the capital of France?"
    _audit(page, "The river Odrin flows north into the salt flats of Velmora.", query3)
    expect(page.locator("#hist tr")).to_have_count(3)
    expect(page.locator("#hist tr").nth(0).locator("td.q")).to_have_text(query3)
    expect(page.locator("#s-count")).to_have_text("3")
    expect(page.locator("#r-meta")).to_contain_text("seq 3")

    # the detail view: clicking an older history row opens that audit, highlighted the same way
    first_meta = page.inner_text("#r-meta")
    page.locator("#hist tr").nth(2).click()
    expect(page.locator("#r-meta")).not_to_have_text(first_meta)
    expect(page.locator("#r-meta")).to_contain_text("seq 1")
    assert re.search(r"#/audit/[0-9a-f]{32}$", page.url)
    expect(page.locator("#v-source")).to_have_text(re.compile(r"^(context|memory|mixed|undetermined)$"))
    assert page.locator("#r-answer span.tok").count() > 0
    detail = _screenshot_dir(tmp_path) / "dashboard-verdict.png"
    page.locator("#form").screenshot(path=str(detail))
    assert detail.stat().st_size > 5_000
    page.locator("#hist tr").nth(0).click()
    expect(page.locator("#r-meta")).to_contain_text("seq 3")

    out = _screenshot_dir(tmp_path) / "dashboard.png"
    page.screenshot(path=str(out), full_page=True)
    assert out.stat().st_size > 10_000
    assert js_errors == [], js_errors


def test_dashboard_wrong_key(page: Any, js_errors: list[str]) -> None:
    from playwright.sync_api import expect

    page.goto("/")
    _use_key(page, API_KEY)
    expect(page.locator("#keystate")).to_have_text("key accepted")
    expect(page.locator("#s-count")).to_have_text(re.compile(r"^\d+$"))
    # switching to a wrong key: rejected, and what the good key loaded is no longer shown
    _use_key(page, "not-the-key")
    expect(page.locator("#keystate")).to_have_text(
        re.compile(r"^key rejected: this API key is not valid for this server")
    )
    expect(page.locator("#s-count")).to_have_text("-")
    expect(page.locator("#s-model")).to_have_text("-")
    expect(page.locator("#hist tr")).to_have_count(0)
    # an audit with the wrong key is refused with the server's message
    page.fill("#query", "Where is Zor?")
    page.click("#submit")
    expect(page.locator("#error")).to_be_visible()
    expect(page.locator("#error")).to_contain_text("not valid")
    expect(page.locator("#result")).to_be_hidden()
    # the only errors are the API's 403s (the browser logs them as failed resources); no script error
    unexpected = [
        e
        for e in js_errors
        if not (
            e.startswith("HTTP 403 ")
            or e.startswith("Failed to load resource: the server responded with a status of 403")
        )
    ]
    assert not unexpected, js_errors
