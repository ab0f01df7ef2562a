"""The dashboard and the profile page in a real browser: headless Chromium (Playwright) against a
real ``mnemoscope serve``.

Needs the ``playwright`` Python package and a system Chromium at ``/usr/bin/chromium`` (Playwright
never downloads a browser here). Without them the tests skip, unless
``MNEMOSCOPE_REQUIRE_SERVICES=1``, which turns the skip into a failure.

The real-model test writes the screenshots of the docs, ``docs/img/dashboard.png`` and
``docs/img/profile.png`` (``$MNEMOSCOPE_SCREENSHOT_DIR`` redirects them), so they show what the
pages look like now.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi")

from screenshots import record_screenshot, screenshot_dir
from server_helpers import API_KEY, Server, serving, start_server, stop_server

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
SOURCES = ("context", "memory", "mixed", "undetermined")
SOURCE_RE = re.compile(r"^(context|memory|mixed|undetermined)$")


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


def _anonymous(model: str, profile: str, root: Path) -> Server:
    """``mnemoscope serve --allow-anonymous`` with no API key configured."""
    return start_server(
        Path(model),
        Path(profile),
        str(root / "audits.db"),
        root / "server.log",
        "--allow-anonymous",
        env={"MNEMOSCOPE_API_KEYS": ""},
    )


@pytest.fixture(scope="module")
def anon_server(
    browser: Any, tiny_service: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    model_dir, profile = tiny_service
    s = _anonymous(str(model_dir), str(profile), tmp_path_factory.mktemp("browser-anon"))
    try:
        yield s
    finally:
        stop_server(s)


@pytest.fixture
def js_errors() -> list[str]:
    """Uncaught script errors and console errors of the page, and every HTTP error it got."""
    return []


def _new_page(browser: Any, url: str, js_errors: list[str]) -> Any:
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=url)
    pg = ctx.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    pg.on("pageerror", lambda e: js_errors.append(f"pageerror: {e}"))
    pg.on("console", lambda m: js_errors.append(m.text) if m.type == "error" else None)
    pg.on("response", lambda r: js_errors.append(f"HTTP {r.status} {r.url}") if r.status >= 400 else None)
    return pg


@pytest.fixture
def page(browser: Any, server: Server, js_errors: list[str]) -> Iterator[Any]:
    pg = _new_page(browser, server.url, js_errors)
    try:
        yield pg
    finally:
        pg.context.close()


@pytest.fixture
def anon_page(browser: Any, anon_server: Server, js_errors: list[str]) -> Iterator[Any]:
    pg = _new_page(browser, anon_server.url, js_errors)
    try:
        yield pg
    finally:
        pg.context.close()


def _use_key(page: Any, key: str) -> None:
    page.fill("#apikey", key)
    page.click("#keyform button[type=submit]")


def _audit(page: Any, context: str, query: str, answer: str | None = None) -> None:
    """Submit the audit form and wait for its answer: a new result (another id) or an error."""
    before = page.inner_text("#r-meta")
    page.fill("#context", context)
    page.fill("#query", query)
    if answer is not None:
        page.click("#answer-box summary")
        page.fill("#answer", answer)
    page.click("#submit")
    page.wait_for_function(
        """(before) => !document.getElementById('submit').disabled && (
             !document.getElementById('error').hidden ||
             (!document.getElementById('result').hidden
              && document.getElementById('r-meta').textContent !== before))""",
        arg=before,
    )


def _shown_id(page: Any) -> str:
    m = re.search(r"id ([0-9a-f]{32})", page.inner_text("#r-meta"))
    assert m, page.inner_text("#r-meta")
    return m.group(1)


def _check_verdict_panel(page: Any, api: dict[str, Any]) -> None:
    """The audit panel shows ``api``'s verdict directly: badge, flag, p_memory, words, highlighted answer."""
    from playwright.sync_api import expect

    expect(page.locator("#result")).to_be_visible()
    expect(page.locator("#v-source")).to_have_text(api["source"])
    expect(page.locator("#v-source")).to_have_class(re.compile(rf"\bbadge {api['source']}\b"))
    expect(page.locator("#v-flag")).to_have_text("memory flag" if api["memory_flag"] else "not flagged")
    if api["p_memory"] is not None:
        expect(page.locator("#v-pmem")).to_have_text(f"p_memory {api['p_memory']:.2f}")
    expect(page.locator("#v-summary")).to_have_text(api["summary"])
    expect(page.locator("#v-evidence")).to_contain_text("Evidence: RePCS Z")
    expect(page.locator("#v-guarantee")).to_contain_text(f"Guarantee ({api['rule']} rule, alpha")
    toks = page.locator("#r-answer span.tok")
    assert toks.count() == len(api["tokens"]) > 0
    spelled = page.evaluate(
        "() => Array.from(document.querySelectorAll('#r-answer span.tok')).map(s => s.textContent).join('')"
    )
    assert spelled == api["answer"]
    shown = page.evaluate(
        "() => Array.from(document.querySelectorAll('#r-answer span.tok')).map(s => s.dataset.source)"
    )
    assert shown == [t["source"] for t in api["tokens"]]
    # hovering a word gives its numbers
    assert re.match(r"^(context|memory|neutral|query) \| pmi ", toks.nth(0).get_attribute("title") or "")
    _check_phrase_line(page, api)
    # CRM and RePCS are secondary: in the details section, closed until asked for
    assert page.evaluate("() => document.getElementById('details').open") is False


def _check_phrase_line(page: Any, api: dict[str, Any]) -> None:
    """Under the evidence: each answer-bearing phrase with its source badge colour and, with several
    passages, the passage (1-based) that states it; the closed-book answer when the API gives it."""
    from playwright.sync_api import expect

    ev = api["evidence"]
    aw = ev.get("answer_words")
    line = page.locator("#v-words")
    if not isinstance(aw, dict):
        expect(line).to_be_hidden()
    else:
        expect(line).to_be_visible()
        words = aw["words"][:8]
        if not words:
            expect(line).to_have_text("Answer-bearing phrases: none beyond the query")
        else:
            expect(line).to_contain_text("Answer-bearing phrases: ")
            shown = page.evaluate(
                "() => Array.from(document.querySelectorAll('#v-words span.ph'))"
                ".map(s => [s.textContent, s.dataset.source, s.className])"
            )
            assert shown == [[w["text"], w["grounded"], f"ph {w['grounded']}"] for w in words], shown
            text = line.inner_text()
            for w in words:
                if w["passage"] is not None and aw["n_passages"] > 1:
                    assert f"{w['text']} \u2014 {w['grounded']}" in text or w["grounded"] == "unsupported"
                    assert f"stated by passage {w['passage'] + 1}" in text, text
            if aw["n_passages"] <= 1:
                assert "passage" not in text.replace("no passage states it", ""), text
    cb = ev.get("closed_book_answer")
    if isinstance(cb, str):
        expect(page.locator("#v-closed-book")).to_contain_text(
            "Closed-book answer (the model without the context)"
        )
    else:
        expect(page.locator("#v-closed-book")).to_be_hidden()


def _api(page: Any, path: str, key: str | None = None) -> Any:
    return page.evaluate(
        "async ([path, key]) => (await fetch(path, key ? {headers: {Authorization: 'Bearer ' + key}} : {})).json()",
        [path, key],
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


def test_dashboard_audit_flow(page: Any, js_errors: list[str]) -> None:
    from playwright.sync_api import expect

    page.goto("/")
    expect(page).to_have_title("mnemoscope audit")
    expect(page.locator("#s-ready")).to_have_text("yes")
    expect(page.locator("#keystate")).to_contain_text("enter a key")
    expect(page.locator("#keyform")).to_be_visible()

    _use_key(page, API_KEY)
    expect(page.locator("#keystate")).to_have_text("key accepted")
    expect(page.locator("#s-count")).to_have_text("0")
    expect(page.locator("#s-model")).not_to_have_text("-")
    expect(page.locator("#s-rule")).to_have_text("combined")

    # markup in the query must come back as text in the history table, not as HTML
    tricky = 'What is <b id="inj">Zor</b> & "Ka"?'
    _audit(page, "Zor lies on the river Ka.", tricky)
    expect(page.locator("#error")).to_be_hidden()

    query = "Where is the town of Velmora?"
    _audit(page, "The town of Velmora lies on the river Odrin, north of the salt flats.", query)
    expect(page.locator("#error")).to_be_hidden()
    # the verdict leads, straight after "Audit": badge, memory flag, p_memory, words, answer, evidence
    api = _api(page, f"/v1/audits/{_shown_id(page)}", API_KEY)
    _check_verdict_panel(page, api)
    expect(page.locator("#r-meta")).to_have_text(re.compile(r"^id [0-9a-f]{32} · seq 2 · \d+ ms"))

    # the details section holds RePCS, drawn for this audit; CRM only when the audit traced hidden
    # states (a black-box verdict does not: issue 35), else it says so
    page.click("#details summary")
    if api.get("crm") is None:
        expect(page.locator("#v-anomaly")).to_have_text("CRM not measured")
    else:
        expect(page.locator("#v-anomaly")).to_have_text(
            re.compile(r"^CRM anomaly rule: (flagged|not flagged) \(score")
        )
        lts = page.evaluate(CANVAS_PIXELS, ["lts", LINE_BLUE])
        assert lts["drawn"] > 0.02 * lts["total"] and lts["colour"] > 20, lts
    expect(page.locator("#v-repcs")).to_have_text(
        re.compile(r"^RePCS (memorized|context used) \(Z [-+\d.e]+ vs tau [-+\d.e-]+\)")
    )
    kl = page.evaluate(CANVAS_PIXELS, ["kl", TAU_INK])
    assert kl["drawn"] > 500 and kl["colour"] > 50, kl

    # history: source, p_memory, memory flag; newest first
    rows = page.locator("#hist tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0).locator("td.q")).to_have_text(query)
    expect(rows.nth(1).locator("td.q")).to_have_text(tricky)
    assert page.locator("#inj").count() == 0, "the query was inserted as HTML"
    expect(rows.nth(0).locator("td").nth(3)).to_have_text(api["source"])
    expect(rows.nth(0).locator("td").nth(4)).to_have_text(f"{api['p_memory']:.2f}")
    expect(rows.nth(0).locator("td").nth(5)).to_have_text("flagged" if api["memory_flag"] else "no")

    # the status box counts answers by source, as /v1/stats does
    expect(page.locator("#s-count")).to_have_text("2")
    stats = _api(page, "/v1/stats", API_KEY)
    for src in SOURCES:
        expect(page.locator(f"#s-src-{src}")).to_have_text(str(stats["by_source"][src]))
    expect(page.locator("#s-lat")).to_have_text(re.compile(r"^\d+ / \d+ ms$"))
    expect(page.locator("#s-queue")).to_have_text(re.compile(r"^\d+ / \d+ \(batch \d+\)$"))

    # a given answer is scored as given
    _audit(page, "Zor lies on the river Ka.", "Where is Zor?", answer="On the river Ka.")
    expect(page.locator("#error")).to_be_hidden()
    spelled = page.evaluate(
        "() => Array.from(document.querySelectorAll('#r-answer span.tok')).map(s => s.textContent).join('')"
    )
    assert spelled == "On the river Ka."
    expect(page.locator("#v-evidence")).to_contain_text("given by the caller")

    # a reload keeps the key and shows the newest audit's verdict without a click
    page.reload()
    expect(page.locator("#keystate")).to_have_text("key accepted")
    expect(page.locator("#r-meta")).to_contain_text("seq 3")
    # the detail view: clicking an older history row opens that audit, highlighted the same way
    page.locator("#hist tr").nth(2).click()
    expect(page.locator("#r-meta")).to_contain_text("seq 1")
    assert re.search(r"#/audit/[0-9a-f]{32}$", page.url)
    expect(page.locator("#v-source")).to_have_text(SOURCE_RE)
    assert page.locator("#r-answer span.tok").count() > 0
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
    expect(page.locator("#s-src-memory")).to_have_text("-")
    expect(page.locator("#hist tr")).to_have_count(0)
    expect(page.locator("#result")).to_be_hidden()
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


def test_anonymous_dashboard_shows_a_fresh_verdict_and_filters_history_by_source(
    anon_page: Any, anon_server: Server, js_errors: list[str]
) -> None:
    """``serve --allow-anonymous``: no key asked, data loads; an audit made elsewhere (the API) is
    on screen with its verdict as soon as the dashboard opens; history filters by source."""
    from playwright.sync_api import expect

    contexts = [
        ("The town of Velmora lies on the river Odrin.", "Where is Velmora?"),
        ("", "Where is Velmora?"),  # no context: undetermined, whatever the model says
        ("Zor lies on the river Ka.", "Where is Zor?"),
        ("The river Odrin flows north.", "What is the capital of France?"),
    ]
    with httpx.Client(base_url=anon_server.url, timeout=120) as c:
        r = c.post("/v1/audit/batch", json={"items": [{"context": x, "query": q} for x, q in contexts]})
        assert r.status_code == 200, r.text
        fresh = c.post(
            "/v1/audit", json={"context": "Quenmar is the capital of Ostria.", "query": "Capital?"}
        )
        assert fresh.status_code == 200, fresh.text
    api = fresh.json()

    anon_page.goto("/")
    expect(anon_page.locator("#keystate")).to_have_text("no key needed (anonymous server)")
    expect(anon_page.locator("#keyform")).to_be_hidden()
    # no click, no key: the newest audit's verdict is the first thing in the audit panel
    expect(anon_page.locator("#r-meta")).to_contain_text(f"id {api['id']}")
    _check_verdict_panel(anon_page, api)
    expect(anon_page.locator("#s-count")).to_have_text("5")

    stats = _api(anon_page, "/v1/stats")
    assert sum(stats["by_source"].values()) == 5 and stats["by_source"]["undetermined"] >= 1
    for src in SOURCES:
        expect(anon_page.locator(f"#s-src-{src}")).to_have_text(str(stats["by_source"][src]))
    expect(anon_page.locator("#hist tr")).to_have_count(5)
    for src in SOURCES:
        anon_page.select_option("#f-source", src)
        rows = anon_page.locator("#hist tr")
        expect(rows).to_have_count(stats["by_source"][src])
        for i in range(rows.count()):
            expect(rows.nth(i).locator("td.src")).to_have_text(src)
    anon_page.select_option("#f-source", "")
    expect(anon_page.locator("#hist tr")).to_have_count(5)
    anon_page.check("#f-flag")
    expect(anon_page.locator("#hist tr")).to_have_count(stats["n_memory_flag"])
    anon_page.uncheck("#f-flag")

    # an audit from the form shows its verdict straight away too
    _audit(anon_page, "Zor lies on the river Ka.", "Which river is Zor on?")
    expect(anon_page.locator("#error")).to_be_hidden()
    _check_verdict_panel(anon_page, _api(anon_page, f"/v1/audits/{_shown_id(anon_page)}"))
    expect(anon_page.locator("#s-count")).to_have_text("6")

    # an audit of three passages (made through the API): its phrases name the passage that states them
    with httpx.Client(base_url=anon_server.url, timeout=120) as c:
        r = c.post(
            "/v1/audit",
            json={
                "passages": [
                    "The river Odrin flows north.",
                    "The town of Velmora lies on the river Odrin.",
                    "Zor lies on the river Ka.",
                ],
                "query": "Where is Velmora?",
            },
        )
        assert r.status_code == 200, r.text
    multi = r.json()
    anon_page.goto(f"/#/audit/{multi['id']}")
    expect(anon_page.locator("#r-meta")).to_contain_text(f"id {multi['id']}")
    aw = multi["evidence"]["answer_words"]
    assert aw is not None and aw["n_passages"] == 3, multi["evidence"]  # the tiny profile is grounded
    expect(anon_page.locator("#v-words")).to_be_visible()
    _check_verdict_panel(anon_page, multi)
    assert js_errors == [], js_errors


def _check_profile_page(page: Any, p: dict[str, Any]) -> None:
    """The /profile page shows ``p`` (GET /v1/profile): the figures at a glance, one panel per section."""
    from playwright.sync_api import expect

    card = p["card"]
    expect(page.locator("#p-rule")).to_have_text(p["rule"])
    expect(page.locator("#p-hash")).to_have_text(p["hash"][:16])
    expect(page.locator("#g-model")).to_have_text(card["model"]["name"])
    v, val = card["verdict"], card["validation"]
    expect(page.locator("#g-guarantee")).to_contain_text(f"n = {v['n_calibration']} held-out clean answers")
    expect(page.locator("#g-data")).to_have_text(
        f"{card['data']['n_records']} records: {card['data']['n_context']} context-needed, "
        f"{card['data']['n_memory']} memory"
    )
    shown = page.evaluate(
        "() => Array.from(document.querySelectorAll('#card section')).map(s => s.dataset.section)"
    )
    assert sorted(shown) == sorted(k for k in card if k != "format") and shown[0] == "validation"
    _check_drift(page, card["drift"])
    if val["status"] == "not measured":
        expect(page.locator("#g-auc")).to_have_text("not measured")
        expect(page.locator("#g-ffr")).to_have_text("not measured")
        expect(page.locator("#card section[data-section=validation] .nm").first).to_be_visible()
        return
    auc = val["auc"]
    expect(page.locator("#g-auc")).to_contain_text(
        f"{auc['estimate']:.3f} [{auc['ci_low']:.3f}, {auc['ci_high']:.3f}]"
    )
    expect(page.locator("#g-ffr")).to_have_text(
        f"{100 * val['false_flag_rate']:.1f} % realised vs alpha {val['alpha']:.3f}"
    )
    expect(page.locator("#g-recall")).to_have_text(f"{100 * val['memory_recall']:.1f} %")
    # the 3-way confusion matrix: truth rows x verdict columns, the recorded counts
    table = page.locator("#card table.confusion")
    expect(table).to_be_visible()
    for truth, row in val["confusion"].items():
        cells = table.locator("tbody tr", has=page.locator(f"th:text-is('{truth}')")).locator("td")
        assert [int(x) for x in cells.all_inner_texts()] == list(row.values()), (truth, row)


def _check_drift(page: Any, d: dict[str, Any]) -> None:
    """The drift watch at a glance and in its panel: why it is not watched, "not enough answers
    yet" without a p-value, or the last window's tests with their p-values."""
    from playwright.sync_api import expect

    glance, panel = page.locator("#g-drift"), page.locator("#card section[data-section=drift]")
    if not d["watched"]:
        expect(glance).to_have_text(d["reason"])
        expect(panel).to_contain_text(d["reason"])
        return
    if d["last"] is None:
        expect(glance).to_contain_text(
            f"not enough answers yet ({d['current']['n']} of {d['current']['of']} answers"
        )
        expect(panel.locator("table.drift")).to_have_count(0)
        return
    expect(glance).to_contain_text(f"{d['state']} in window {d['last']['index']}")
    rows = panel.locator("table.drift tbody tr")
    expect(rows).to_have_count(len(d["last"]["tests"]))


def test_profile_page(anon_page: Any, js_errors: list[str]) -> None:
    from playwright.sync_api import expect

    anon_page.goto("/profile")
    expect(anon_page).to_have_title("mnemoscope profile")
    expect(anon_page.locator("#keyform")).to_be_hidden()
    p = _api(anon_page, "/v1/profile")
    # calibrate validates every profile on a held-out part, the tiny test profile's included
    assert p["card"]["validation"]["status"] == "measured"
    _check_profile_page(anon_page, p)
    assert js_errors == [], js_errors


def test_profile_page_drift_before_and_after_a_full_window(
    browser: Any, tiny_service: Any, tmp_path: Path, js_errors: list[str]
) -> None:
    """A profile with a reference sample (96 records, half the facts held out) behind a real
    server: "not enough answers yet" until 100 answers are audited, then the window's tests."""

    from mnemoscope.audit.calibrate import calibrate_profile
    from mnemoscope.audit.profile import CalibrationConfig
    from mnemoscope.models import load_model
    from server_helpers import tiny_records

    model_dir, _ = tiny_service
    prof = tmp_path / "profile"
    calibrate_profile(
        load_model(str(model_dir)),
        tiny_records(96),
        prof,
        CalibrationConfig(max_new_tokens=3, chat=False, held_out_fraction=0.5),
        progress=False,
    )
    s = _anonymous(str(model_dir), str(prof), tmp_path)
    try:
        pg = _new_page(browser, s.url, js_errors)
        pg.goto("/profile")
        p = _api(pg, "/v1/profile")
        assert p["card"]["drift"]["watched"] and p["card"]["drift"]["last"] is None
        _check_profile_page(pg, p)
        with httpx.Client(base_url=s.url, timeout=300) as c:
            for b in range(4):
                items = [
                    {
                        "context": f"The town of Qel{i} lies on the river Ka{i % 5}.",
                        "query": f"Where is Qel{i}?",
                    }
                    for i in range(25 * b, 25 * b + 25)
                ]
                r = c.post("/v1/audit/batch", json={"items": items})
                assert r.status_code == 200, r.text
            assert 'mnemoscope_drift_p_value{test="p_memory"}' in c.get("/metrics").text
        pg.goto("/profile")
        p = _api(pg, "/v1/profile")
        assert p["card"]["drift"]["last"]["answers"] == [1, 100]
        _check_profile_page(pg, p)
        pm = pg.locator("#card section[data-section=drift] tr[data-test=p_memory] td")
        assert pm.nth(0).inner_text() == "100"
        pg.context.close()
        assert js_errors == [], js_errors
    finally:
        stop_server(s)


@pytest.mark.real_model
def test_screenshots_of_the_default_model(browser: Any, tmp_path: Path, js_errors: list[str]) -> None:
    """The default model behind an anonymous server: a context answer, a memory answer and a mixed
    one; writes docs/img/dashboard.png and docs/img/profile.png."""
    from importlib import resources

    from playwright.sync_api import expect

    from mnemoscope.audit.profile import load_profile

    shipped = resources.files("mnemoscope.data.profiles") / "smollm2-135m-instruct"
    s = _anonymous("default", str(shipped), tmp_path)
    try:
        items = [
            {"context": "The river Odrin flows north.", "query": "Who wrote Romeo and Juliet?"},
            {
                "context": "Paris hosts many museums, including the Louvre.",
                "query": "What is the capital of France?",
            },
            {
                "context": "The town of Velmora lies on the river Odrin, north of the salt flats.",
                "query": "Where is the town of Velmora?",
            },
        ]
        with httpx.Client(base_url=s.url, timeout=300) as c:
            r = c.post("/v1/audit/batch", json={"items": items})
            assert r.status_code == 200, r.text
            audits = [it["audit"] for it in r.json()["items"]]
        pg = _new_page(browser, s.url, js_errors)
        pg.goto("/")
        expect(pg.locator("#r-meta")).to_contain_text(f"id {audits[-1]['id']}")
        _check_verdict_panel(pg, audits[-1])
        expect(pg.locator("#hist tr")).to_have_count(3)
        # the verdict shown is the shipped profile's: it combines exactly the profile's signals
        prof = load_profile(Path(str(shipped)))
        signals = list(prof.verdict.selected_)
        expect(pg.locator("#v-evidence")).to_contain_text("combined: " + ", ".join(signals))
        if "crm_probability" not in signals:
            expect(pg.locator("#v-evidence")).not_to_contain_text("crm_probability")
        out = screenshot_dir() / "dashboard.png"
        pg.screenshot(path=str(out), full_page=True)
        assert out.stat().st_size > 20_000
        record_screenshot(out, prof)
        pg.goto("/profile")
        expect(pg.locator("#card section.panel").first).to_be_visible()
        p = _api(pg, "/v1/profile")
        assert p["card"]["validation"]["status"] == "measured"  # the shipped validation.json
        _check_profile_page(pg, p)
        assert p["hash"] == prof.content_hash
        out = screenshot_dir() / "profile.png"
        pg.screenshot(path=str(out), full_page=True)
        assert out.stat().st_size > 10_000
        record_screenshot(out, prof)
        pg.context.close()
        assert js_errors == [], js_errors
    finally:
        stop_server(s)
