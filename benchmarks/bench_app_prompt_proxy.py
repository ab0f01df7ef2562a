"""The guarantee on the application's own prompt, through the audit proxy (issue 36).

A profile calibrated with ``mnemoscope calibrate --endpoint URL --prompt FILE`` certifies its
threshold on the application's prompt. This sends the profile's held-out answers (records the
calibration never fitted on) to the proxy the way the application would: its own messages,
rendered from the calibrated prompt, with the official ``openai`` client and no ``mnemoscope``
object. It counts:

* the realised false-flag rate on the context-needed (label 0) items, with its Clopper-Pearson
  95 % interval, against the profile's alpha;
* the memory recall on the memory (label 1) items;
* how the proxy compared each request with the calibrated prompt (``layout.prompt.status``) and
  the audits' statuses.

With ``--send-prompt FILE`` the requests are rendered from another application prompt (a
different system prompt or instructions, the context in the same place) instead of the
calibrated one: the stream the proxy must mark "not the calibrated prompt"
(``prompt.status = "different"``), and what the guarantee certified on the calibrated prompt is
worth on it (its realised false-flag rate and recall).

The proxy and the upstream must be running (``mnemoscope proxy --upstream ... --profile DIR``);
the script does not start them.

Usage:
    python benchmarks/bench_app_prompt_proxy.py --profile DIR --proxy http://127.0.0.1:8090/v1
        [--model NAME] [--limit N] [--send-prompt FILE] [--out benchmarks/results/proxy/app_prompt.json]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from mnemoscope.audit.profile import load_profile
from mnemoscope.audit.prompt_match import app_prompt_of
from mnemoscope.audit.validation import binomial_ci, read_held_out
from mnemoscope.provenance import provenance
from mnemoscope.trace.app_prompt import load_app_prompt

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", required=True, help="an endpoint profile calibrated with --prompt")
    ap.add_argument("--proxy", required=True, help="the proxy's base URL (…/v1)")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--limit", type=int, default=None, help="at most this many held-out items")
    ap.add_argument(
        "--send-prompt",
        default=None,
        help="render the requests from this application prompt (a --prompt file) instead of the calibrated one",
    )
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/proxy/app_prompt.json"))
    args = ap.parse_args()

    from openai import OpenAI

    prov = provenance()
    prof = load_profile(args.profile, backend="endpoint")
    app = app_prompt_of(prof.header)
    if app is None:
        raise SystemExit(f"{args.profile} was not calibrated with --prompt: nothing to compare")
    sent = app if args.send_prompt is None else load_app_prompt(args.send_prompt)
    rows = [r for r in read_held_out(args.profile) if r.get("label") in (0, 1)][: args.limit]
    client = OpenAI(base_url=args.proxy, api_key="unused", timeout=600)
    load0 = os.getloadavg()
    seen: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for i, r in enumerate(rows, 1):
        messages = sent.render(r["context"], r["query"])
        resp = client.chat.completions.create(
            model=args.model, messages=messages, temperature=0, max_tokens=prof.max_new_tokens
        )
        audit = (resp.model_extra or {}).get("mnemoscope") or {}
        seen.append(
            {
                "id": r["id"],
                "label": r["label"],
                "kind": r.get("kind"),
                "status": audit.get("status"),
                "memory_flag": audit.get("memory_flag"),
                "source": audit.get("source"),
                "prompt_status": ((audit.get("layout") or {}).get("prompt") or {}).get("status"),
            }
        )
        if i % 20 == 0:
            print(f"{i}/{len(rows)} requests", flush=True)
    seconds = time.perf_counter() - t0
    audited = [s for s in seen if s["status"] == "audited"]
    clean = [s for s in audited if s["label"] == 0]
    memory = [s for s in audited if s["label"] == 1]
    k = sum(bool(s["memory_flag"]) for s in clean)
    lo, hi = binomial_ci(k, len(clean))
    alpha = prof.verdict.alpha if prof.verdict is not None else None
    statuses: dict[str, int] = {}
    prompts: dict[str, int] = {}
    for s in seen:
        statuses[str(s["status"])] = statuses.get(str(s["status"]), 0) + 1
        prompts[str(s["prompt_status"])] = prompts.get(str(s["prompt_status"]), 0) + 1
    out = {
        **prov,
        "machine": {"load_avg_start": [round(x, 2) for x in load0], "load_avg_end": [round(x, 2) for x in os.getloadavg()]},
        "profile": {"path": str(args.profile), "hash": prof.content_hash, "alpha": alpha, "prompt": app.fingerprint()},
        "sent_prompt": None if args.send_prompt is None else {"file": args.send_prompt, **sent.fingerprint()},
        "n_requests": len(seen),
        "seconds": round(seconds, 1),
        "statuses": statuses,
        "prompt_status": prompts,
        "false_flags": {"k": k, "n": len(clean), "rate": k / len(clean) if clean else None, "ci95": [lo, hi]},
        "alpha_within_ci_or_below": None if alpha is None or hi is None else bool(lo is not None and lo <= alpha),
        "memory_recall": {
            "k": sum(bool(s["memory_flag"]) for s in memory),
            "n": len(memory),
            "rate": sum(bool(s["memory_flag"]) for s in memory) / len(memory) if memory else None,
        },
        "requests": seen,
    }  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(
        json.dumps(
            {k: out[k] for k in ("statuses", "prompt_status", "false_flags", "memory_recall", "seconds")}
        )
    )


if __name__ == "__main__":
    main()
