"""Mixed-script served answers through the endpoint auditor: how many audits fail (target 0 on 1,000).

Each item is a (context, query, answer) whose answer mixes scripts that byte-level BPE splits into
tokens of raw bytes (Cyrillic, Greek, CJK, Arabic, Hebrew, Devanagari, emoji) with Latin text and
code, drawn with a seed from the word lists below; the context states the answer, as a retrieved
passage would. The answers are given (the proxy's case: the app's served answer is audited), so
every item exercises the forced paths on the answer's own tokens. One llama-server (the default
model's GGUF, ``tests/llama_servers.py``) is started, a small endpoint profile is calibrated
against it (or ``--profile`` is used), and the items go through ``Auditor.from_endpoint`` (method
``auto``) in batches. Counted: failed audits (with their messages), the path that scored each
record, its fallbacks, and the records with bounded positions.

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/bench_mixed_scripts.py --n 1000 --server-threads 1
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # llama_servers: loopback server launchers
VERIFIED = ROOT / "benchmarks" / "results" / "verdict" / "verified.jsonl"
OUT = ROOT / "benchmarks" / "results" / "endpoint" / "mixed_scripts.json"

WORDS: dict[str, list[str]] = {
    "cyrillic": [
        "Москва",
        "столица",
        "России",
        "река",
        "Волга",
        "учёный",
        "ёлка",
        "щука",
        "Київ",
        "Беларусь",
    ],
    "greek": ["Αθήνα", "θάλασσα", "φιλοσοφία", "Ελλάδα", "λόγος", "ψυχή"],
    "cjk": ["東京", "北京", "大阪", "漢字", "こんにちは", "カタカナ", "서울", "한국어"],
    "arabic": ["القاهرة", "مرحبا", "العربية", "بيروت", "دمشق"],
    "hebrew": ["ירושלים", "שלום", "עברית"],
    "devanagari": ["नमस्ते", "दिल्ली", "हिन्दी"],
    "emoji": ["🎉", "🚀", "👍🏽", "🇫🇷", "❤️", "😀", "🧪"],
    "latin": ["Paris", "café", "naïve", "Zürich", "São Paulo", "Ærø", "the capital", "is"],
    "code": ["def f(x):\n    return x", "x = [i**2 for i in range(3)]", "SELECT * FROM t;", "a != b && c"],
}


def make_items(n: int, seed: int) -> list[dict[str, str]]:
    """``n`` items whose answers mix 1-4 pieces of random scripts (every item has a non-Latin one)."""
    rng = random.Random(seed)
    scripts = sorted(WORDS)
    non_latin = [s for s in scripts if s not in ("latin", "code")]
    items = []
    for i in range(n):
        kinds = [rng.choice(non_latin)] + [rng.choice(scripts) for _ in range(rng.randint(0, 3))]
        rng.shuffle(kinds)
        answer = " ".join(rng.choice(WORDS[k]) for k in kinds)
        items.append(
            {
                "id": f"mix-{i:04d}",
                "context": f"The answer recorded in the archive is: {answer}",
                "query": "What answer is recorded in the archive?",
                "answer": answer,
                "scripts": ",".join(sorted(set(kinds))),
            }
        )
    return items


def calibrate(base_url: str, out: Path) -> Any:
    from mnemoscope.audit.calibrate import calibrate as calibrate_profile
    from mnemoscope.audit.profile import CalibrationConfig
    from mnemoscope.audit.tracing import EndpointTracer
    from mnemoscope.data.records import Record
    from mnemoscope.models.endpoint import EndpointClient, EndpointConfig

    items = [json.loads(x) for x in VERIFIED.read_text().splitlines() if x.strip()]
    picked = [it for it in items if it["label"] == 0][:5] + [it for it in items if it["label"] == 1][:5]
    recs = [Record(id=it["id"], context=it["context"], query=it["query"], label=it["label"]) for it in picked]
    with EndpointClient(EndpointConfig(base_url, concurrency=1, timeout=600)) as c:
        return calibrate_profile(
            EndpointTracer(c, chat_template="default"), recs, out, CalibrationConfig(), progress=False
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--server-threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--profile", default=None, help="an endpoint profile folder (default: calibrate one)")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()

    from llama_servers import LlamaServerNative
    from mnemoscope.audit.auditor import Auditor
    from mnemoscope.audit.requests import AuditFailure, AuditRequest
    from mnemoscope.models.endpoint import EndpointClient, EndpointConfig
    from mnemoscope.models.loader import default_gguf_path

    items = make_items(args.n, args.seed)
    load_start = os.getloadavg()
    t0 = time.perf_counter()
    server = LlamaServerNative(default_gguf_path(), n_threads=args.server_threads).start(timeout=300)
    failed: list[dict[str, Any]] = []
    paths: collections.Counter[str] = collections.Counter()
    fell_back: list[dict[str, Any]] = []
    n_bounded = 0
    try:
        import tempfile

        profile = args.profile or calibrate(server.base_url, Path(tempfile.mkdtemp(prefix="mixed-profile-")))
        with EndpointClient(EndpointConfig(server.base_url, concurrency=1, timeout=600, method="auto")) as c:
            aud = Auditor.from_endpoint(c, profile)
            for b in range(0, len(items), args.batch):
                chunk = items[b : b + args.batch]
                reqs = [
                    AuditRequest(context=it["context"], query=it["query"], answer=it["answer"], id=it["id"])
                    for it in chunk
                ]
                for it, r in zip(chunk, aud.audit(reqs), strict=True):
                    if isinstance(r, AuditFailure):
                        failed.append(
                            {"id": it["id"], "answer": it["answer"], "status": r.status, "message": r.message}
                        )
                        continue
                    paths[str(r.extra.get("endpoint_method"))] += 1
                    if r.extra.get("fallbacks"):
                        fell_back.append({"id": it["id"], "fallbacks": r.extra["fallbacks"]})
                    n_bounded += bool(r.extra.get("bounded"))
                print(
                    f"{min(b + args.batch, len(items))}/{len(items)} audited, {len(failed)} failed",
                    flush=True,
                )
    finally:
        server.stop()
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    out = {
        "what": "mixed-script served answers audited over llama-server (native path, method auto): failed audits",
        "command": " ".join([sys.executable.rsplit("/", 1)[-1], *sys.argv]),
        "commit": commit,
        "n": len(items),
        "seed": args.seed,
        "server": " ".join(server.command),
        "server_threads": args.server_threads,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "loadavg_start": load_start,
        "loadavg_end": os.getloadavg(),
        "wall_s": round(time.perf_counter() - t0, 1),
        "n_failed": len(failed),
        "failed": failed,
        "paths": dict(paths),
        "n_fell_back": len(fell_back),
        "fell_back": fell_back[:50],
        "n_with_bounded_positions": n_bounded,
        "scripts": dict(collections.Counter(s for it in items for s in it["scripts"].split(","))),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(
        json.dumps(
            {
                k: out[k]
                for k in ("n", "n_failed", "paths", "n_fell_back", "n_with_bounded_positions", "wall_s")
            }
        )
    )


if __name__ == "__main__":
    main()
