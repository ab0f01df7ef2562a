"""How big is ``mnemoscope report``'s HTML page, and how long does Chromium take to open it?

Usage::

    python benchmarks/bench_report.py --make-seed-input /tmp/seed.jsonl     # 12 memory + 12 clean held-out items
    mnemoscope audit --input /tmp/seed.jsonl --out /tmp/seed --threads 1    # the real batch audit (default model)
    python benchmarks/bench_report.py --seed-dir /tmp/seed --seed-input /tmp/seed.jsonl [--sizes 10,1000,10000,100000]

``--seed-dir`` is a REAL batch audit's results folder (``mnemoscope audit --input FILE --out DIR``
on the default model, e.g. the held-out reliance items); its rows are replicated with new ids
(``<id>#<k>``) up to each size, so every row has the size and shape of a real result (tokens,
evidence, guarantee, CRM fields), with words and numbers varied (:func:`replicate`) so that the
compressed payload is not smaller than real results would give. For each size the script
writes the folder and its input file (the queries), then measures:

* ``results_bytes``: ``results.jsonl``; ``html_bytes``: the report, and its payload encoding;
* ``build_seconds``: ``load_run`` + ``run_payload`` + ``render_html`` + write (Python, one process);
* in headless Chromium (``/usr/bin/chromium`` through Playwright, fresh page each time):
  ``open_ms`` = navigation start to the page's ``data-ready`` (the script's ``readyMs``: parse,
  inflate, ``JSON.parse``, first page of the table drawn), ``wall_open_ms`` = the same seen from
  Python (``page.goto`` + wait), ``filter_ms`` = choose source "memory" until the table is
  redrawn, ``sort_ms`` = sort by p_memory, ``detail_ms`` = open one highlighted answer.

Each browser figure is the median of ``--repeats`` page loads. The machine is shared (other
processes run), so the load average at start and end is recorded with the thread settings.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"


def make_seed_input(path: Path) -> None:
    """The first 12 memorized and 12 clean items of the verdict's held-out fold (shipped reliance data),
    without their reference answer (the model answers)."""
    rows = [
        json.loads(x)
        for x in (ROOT / "src/mnemoscope/bench/data/context_reliance.jsonl").read_text().splitlines()
    ]
    by_id = {r["id"]: r for r in rows}
    test = json.loads((ROOT / "benchmarks/results/verdict/split.json").read_text())["test_ids"]
    ids = [i for i in test if i.startswith("rel-mem")][:12] + [i for i in test if i.startswith("rel-clean")][
        :12
    ]
    path.write_text(
        "".join(json.dumps({k: by_id[i][k] for k in ("id", "context", "query")}) + "\n" for i in ids),
        encoding="utf-8",
    )


def replicate(seed_dir: Path, seed_input: Path, out: Path, n: int, seed: int = 0) -> Path:
    """``n`` rows shaped like the seed's real rows, with varied content so the payload does not
    compress better than real results would: each row takes a seed row's structure (CRM fields,
    evidence, guarantee, token count), its answer words are drawn at random from all seed answers'
    words, every token number is jittered (normal, sd 0.5) and p_memory moves by sd 0.03 within
    [0, 1]; the query is the seed query with three random words appended. Returns the input file
    (queries by id) written next to the folder."""
    import numpy as np

    rng = np.random.default_rng(seed)
    rows = [json.loads(x) for x in (seed_dir / "results.jsonl").read_text(encoding="utf-8").splitlines() if x]
    queries = {
        r["id"]: r["query"] for r in map(json.loads, seed_input.read_text(encoding="utf-8").splitlines()) if r
    }
    vocab = [t["text"] for r in rows for t in r["tokens"] if t["text"].strip()]
    words = [w for q in queries.values() for w in q.split()]
    out.mkdir(parents=True, exist_ok=True)
    (out / "meta.json").write_text((seed_dir / "meta.json").read_text(encoding="utf-8"), encoding="utf-8")
    (out / "errors.jsonl").write_text("", encoding="utf-8")
    inp = out.parent / f"{out.name}-input.jsonl"
    with (out / "results.jsonl").open("w", encoding="utf-8") as f, inp.open("w", encoding="utf-8") as fi:
        for i in range(n):
            base = rows[i % len(rows)]
            r = dict(base)
            r["id"] = f"{base['id']}#{i // len(rows)}"
            toks, pos = [], 0
            for t in base["tokens"]:
                text = str(vocab[rng.integers(len(vocab))])
                noise = rng.normal(0.0, 0.5, size=3)
                lw = t["logp_with"] + noise[0]
                pmi = t["pmi"] + noise[1]
                toks.append(
                    {
                        **t,
                        "text": text,
                        "pmi": pmi,
                        "kl": abs(t["kl"] + noise[2]),
                        "logp_with": lw,
                        "logp_without": lw - pmi,
                        "start": pos,
                        "end": pos + len(text),
                    }
                )
                pos += len(text)
            r["tokens"] = toks
            r["answer"] = "".join(t["text"] for t in toks)
            if r.get("p_memory") is not None:
                r["p_memory"] = float(min(1.0, max(0.0, r["p_memory"] + rng.normal(0.0, 0.03))))
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
            extra = " ".join(str(words[j]) for j in rng.integers(len(words), size=3))
            fi.write(
                json.dumps({"id": r["id"], "context": "", "query": f"{queries[base['id']]} {extra}"}) + "\n"
            )
    return inp


def build(folder: Path, input_path: Path) -> tuple[Path, float, str]:
    from mnemoscope.provenance import provenance
    from mnemoscope.report.batch import load_run, write_report

    t0 = time.perf_counter()
    run = load_run(folder, input_path=input_path)
    path = write_report(run, folder / "report.html", provenance=provenance())
    secs = time.perf_counter() - t0
    enc = "gzip+base64" if 'data-encoding="gzip+base64"' in path.read_text(encoding="utf-8") else "json"
    return path, secs, enc


def measure(browser: Any, path: Path, repeats: int) -> dict[str, Any]:
    keys = ("open_ms", "wall_open_ms", "filter_ms", "sort_ms", "detail_ms")
    runs: dict[str, list[float]] = {k: [] for k in keys}
    for _ in range(repeats):
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(300_000)
        errors: list[str] = []
        page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
        t0 = time.perf_counter()
        page.goto(path.resolve().as_uri(), wait_until="domcontentloaded")
        page.wait_for_selector("body[data-ready='1']", state="attached")
        runs["wall_open_ms"].append((time.perf_counter() - t0) * 1000)
        runs["open_ms"].append(float(page.evaluate("window.__mnemoscopeReport.readyMs")))
        if errors:
            raise RuntimeError(f"page errors: {errors}")
        timed = """async (act) => {
            const t = performance.now();
            act();
            await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
            return performance.now() - t;
        }"""
        runs["filter_ms"].append(
            page.evaluate(
                timed.replace(
                    "act()",
                    "const s = document.getElementById('f-source');"
                    "s.value = String([...s.options].findIndex(o => o.text.startsWith('memory')) - 1);"
                    "s.dispatchEvent(new Event('change'))",
                ),
                None,
            )
        )
        runs["sort_ms"].append(
            page.evaluate(
                timed.replace("act()", "document.querySelector('th[data-key=\"3\"]').click()"), None
            )
        )
        runs["detail_ms"].append(
            page.evaluate(timed.replace("act()", "document.querySelector('#rows tr').click()"), None)
        )
        page.close()
    return {k: round(statistics.median(v), 1) for k, v in runs.items()} | {
        "runs": {k: [round(x, 1) for x in v] for k, v in runs.items()}
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed-dir", type=Path, help="a real batch audit's results folder")
    ap.add_argument("--seed-input", type=Path, help="the seed audit's input (for the queries)")
    ap.add_argument(
        "--make-seed-input", type=Path, metavar="FILE", help="write the seed audit's input and exit"
    )
    ap.add_argument("--sizes", default="10,1000,10000,100000")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path("/tmp/mnemoscope-bench-report"))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "report")
    args = ap.parse_args(argv)
    if args.make_seed_input:
        make_seed_input(args.make_seed_input)
        print(f"wrote {args.make_seed_input}")
        return 0
    if args.seed_dir is None or args.seed_input is None:
        ap.error("--seed-dir DIR and --seed-input FILE are required (or --make-seed-input FILE)")
    from playwright.sync_api import sync_playwright

    from mnemoscope.provenance import provenance

    seed_rows = [json.loads(x) for x in (args.seed_dir / "results.jsonl").read_text().splitlines() if x]
    result: dict[str, Any] = {
        "provenance": provenance(),
        "seed": {
            "folder": str(args.seed_dir),
            "rows": len(seed_rows),
            "mean_tokens_per_row": round(
                sum(len(r.get("tokens") or []) for r in seed_rows) / len(seed_rows), 1
            ),
            "model": json.loads((args.seed_dir / "meta.json").read_text()).get("model", {}).get("name"),
        },
        "machine": {
            "shared": True,
            "threads": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")},
            "cpus": os.cpu_count(),
            "load_avg_start": [round(x, 2) for x in os.getloadavg()],
        },
        "browser": {"executable": CHROMIUM, "headless": True, "repeats": args.repeats},
        "sizes": [],
    }
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-extensions"],
        )
        result["browser"]["version"] = browser.version
        for n in [int(s) for s in args.sizes.split(",")]:
            folder = args.work / f"n{n}"
            inp = replicate(args.seed_dir, args.seed_input, folder, n)
            path, secs, enc = build(folder, inp)
            row = {
                "n": n,
                "results_bytes": (folder / "results.jsonl").stat().st_size,
                "html_bytes": path.stat().st_size,
                "encoding": enc,
                "build_seconds": round(secs, 2),
                **measure(browser, path, args.repeats),
            }
            result["sizes"].append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "runs"}), flush=True)
        browser.close()
    result["machine"]["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_report.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out / 'bench_report.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
