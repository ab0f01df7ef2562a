"""Three-way source accuracy (issue 27): is ``context`` / ``memory`` / ``mixed`` right where the label is clear?

Two steps, so the same audits can be made by two versions of the code (the "before" is the
committed version before the change, run from a ``git worktree`` with ``PYTHONPATH``; the
script only uses the public audit API both versions share)::

    # 1. audit the items (one JSON line per item: the item, and the audit's source, flag, p_memory, answer)
    python benchmarks/source_eval.py run --out runs/source/after.jsonl
    PYTHONPATH=/tmp/old/src python benchmarks/source_eval.py run --out runs/source/before.jsonl
    # 2. score both, write the result (confusion matrices, accuracy, memory-flag changes)
    python benchmarks/source_eval.py report --before runs/source/before.jsonl --after runs/source/after.jsonl \
        --out benchmarks/results/source/eval.json
    # where a template-less (base) model's answers end under the default stop sequences
    python benchmarks/source_eval.py cuts --model GEMMA.gguf --out benchmarks/results/source/cuts_gemma.json

Items (``run``), with the default model and its shipped profile unless ``--model`` / ``--profile``:

* the **held-out third** of the verified context-reliance items (``results/verdict/split.json``:
  the profile never saw them): memorized facts (verified: answered correctly closed-book and
  with the context) and clean invented facts (verified: not answered closed-book, answered with
  the context);
* **knowledge conflicts** (``--conflicts FILE``, default: the shipped calibration set's
  ``conflict`` items, ``--per-category`` of each category at difficulty 1, in id order): a
  context that contradicts a well-known fact. Their label is which answer the model gives.

Expected source (``report``), only where the label is clear:

* memorized item whose audited answer states the fact -> ``memory``;
* clean item whose audited answer states the (context-given) fact -> ``context``;
* conflict answer that states the context's answer and not the known one (followed) -> ``context``;
* conflict answer that states the known answer and not the context's (overridden) -> ``memory``;
* anything else (an answer stating neither, or both) is not clear and is left out (counted).

Accuracy = share of clear items whose ``source`` equals the expected one; ``mixed`` and
``undetermined`` count as wrong. ``accuracy_where_flag_agrees`` is the same on the items whose
memory flag agrees with the expected source (flagged iff memory expected): the three-way
label's own errors, apart from the flag's (the flag is the verdict, certified separately). The result also counts items whose memory flag differs
between the two runs (the flag must not change with a source-label change).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import sys
import time
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

VERDICT = ROOT / "benchmarks" / "results" / "verdict"
SOURCES = ("context", "memory", "mixed", "undetermined")


def _norm(text: str) -> str:
    t = unicodedata.normalize("NFKC", text).casefold()
    return " " + " ".join(re.findall(r"[^\W_]+", t)) + " "


def states(answer: str, gold: str, aliases: list[str] | None = None) -> bool:
    """Whether an answer states ``gold`` (or an alias): whole-word containment after normalisation."""
    a = _norm(answer)
    return any(_norm(g).strip() and _norm(g) in a for g in [gold, *(aliases or [])])


def held_out() -> list[dict[str, Any]]:
    verified = [json.loads(x) for x in (VERDICT / "verified.jsonl").read_text().splitlines() if x.strip()]
    split = json.loads((VERDICT / "split.json").read_text())
    by_id = {it["id"]: it for it in verified}
    return [
        {
            "set": "verified",
            "id": it["id"],
            "kind": it["kind"],
            "context": it["context"],
            "query": it["query"],
            "answer": it["answer"],
            "aliases": it.get("aliases") or [],
            "closed_book_correct": it.get("closed_book_correct"),
        }
        for it in (by_id[i] for i in split["test_ids"])
    ]


def default_conflicts_path() -> Path:
    return ROOT / "src" / "mnemoscope" / "bench" / "data" / "calibration.jsonl"


def conflicts(path: Path, per_category: int) -> list[dict[str, Any]]:
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    rows = [r for r in rows if r.get("kind") == "conflict" and int(r.get("difficulty", 1)) == 1]
    taken: Counter[str] = Counter()
    out = []
    for r in sorted(rows, key=lambda r: r["id"]):
        if taken[r["category"]] >= per_category:
            continue
        taken[r["category"]] += 1
        out.append(
            {
                "set": "conflict",
                "id": r["id"],
                "kind": "conflict",
                "context": r["context"],
                "query": r["query"],
                "answer": r["answer"],
                "aliases": r.get("aliases") or [],
                "context_answer": r["context_answer"],
                "context_aliases": r.get("context_aliases") or [],
            }
        )
    return out


def run(args: argparse.Namespace) -> None:
    import mnemoscope
    from mnemoscope.audit.auditor import AuditFailure, Auditor, AuditRequest
    from mnemoscope.provenance import provenance

    items = held_out()
    cpath = Path(args.conflicts) if args.conflicts else default_conflicts_path()
    if args.per_category > 0 and cpath.exists():
        items += conflicts(cpath, args.per_category)
    if args.limit:
        items = items[: args.limit]
    auditor = Auditor.from_spec(args.model, profile=args.profile)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with out.open("w", encoding="utf-8") as f:
        head = {
            "provenance": provenance(),
            "mnemoscope_path": str(Path(mnemoscope.__file__).parent),
            "conflicts_file": str(cpath),
            "conflicts_sha256": hashlib.sha256(cpath.read_bytes()).hexdigest() if cpath.exists() else None,
            "n_items": len(items),
            "load_avg_start": list(os.getloadavg()),
        }
        f.write(json.dumps({"header": head}, ensure_ascii=False) + "\n")
        for s in range(0, len(items), args.batch):
            chunk = items[s : s + args.batch]
            res = auditor.audit([AuditRequest(it["context"], it["query"], id=it["id"]) for it in chunk])
            for it, r in zip(chunk, res, strict=True):
                if isinstance(r, AuditFailure):
                    row = {**it, "error": r.message}
                else:
                    d = r.to_dict()
                    row = {
                        **it,
                        "audit": {
                            k: d.get(k)
                            for k in ("source", "memory_flag", "p_memory", "answer", "summary", "answer_cut")
                        },
                        "spans": [(s["text"], s["source"]) for s in d["spans"] if s["source"] != "neutral"],
                    }
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
            f.flush()
            print(
                f"{min(s + args.batch, len(items))}/{len(items)} {time.perf_counter() - t0:.0f} s", flush=True
            )
        foot = {"seconds": time.perf_counter() - t0, "load_avg_end": list(os.getloadavg())}
        f.write(json.dumps({"footer": foot}) + "\n")


def _read(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        lines = [json.loads(x) for x in f if x.strip()]
    head = next((x["header"] for x in lines if "header" in x), {})
    foot = next((x["footer"] for x in lines if "footer" in x), {})
    return head, [x for x in lines if "id" in x], foot


def expected(row: dict[str, Any]) -> tuple[str | None, str]:
    """(expected source or ``None`` when the label is not clear, the reason)."""
    a = (row.get("audit") or {}).get("answer")
    if a is None:
        return None, "not audited"
    gold = states(a, row["answer"], row["aliases"])
    if row["set"] == "verified":
        if not gold:
            return None, "answer does not state the fact"
        if row["kind"] in ("memorized", "memorized_paraphrased"):  # label 1, verified closed-book
            if not row.get("closed_book_correct"):
                return None, "not verified"
            return "memory", "memorized, answered"
        if row["kind"] == "clean":
            return "context", "clean, answered from the context"
        return None, f"unknown kind {row['kind']}"
    ctx = states(a, row["context_answer"], row["context_aliases"])
    if ctx and not gold:
        return "context", "conflict followed"
    if gold and not ctx:
        return "memory", "conflict overridden"
    return None, "conflict: states both" if gold else "conflict: states neither"


def score(rows: list[dict[str, Any]]) -> dict[str, Any]:
    by_set: dict[str, Any] = {}
    for name, sel in (
        ("all", rows),
        ("verified", [r for r in rows if r["set"] == "verified"]),
        ("conflict", [r for r in rows if r["set"] == "conflict"]),
    ):
        clear, reasons = [], Counter()
        for r in sel:
            exp, why = expected(r)
            reasons[why] += 1
            if exp is not None:
                clear.append((exp, r["audit"]["source"], r["id"], bool(r["audit"]["memory_flag"])))
        confusion = {e: {p: 0 for p in SOURCES} for e in ("context", "memory")}
        for e, p, _, _ in clear:
            confusion[e][p if p in SOURCES else "undetermined"] += 1
        right = sum(e == p for e, p, _, _ in clear)
        # the memory flag (the verdict) agrees with the expected source: errors left are the three-way label's
        flag_ok = [(e, p) for e, p, _, f in clear if f == (e == "memory")]
        by_set[name] = {
            "n_items": len(sel),
            "n_clear": len(clear),
            "n_right": right,
            "accuracy": right / len(clear) if clear else None,
            "confusion": confusion,
            "n_flag_agrees": len(flag_ok),
            "accuracy_where_flag_agrees": (sum(e == p for e, p in flag_ok) / len(flag_ok))
            if flag_ok
            else None,
            "label_reasons": dict(sorted(reasons.items())),
            "wrong": [
                {"id": i, "expected": e, "source": p, "memory_flag": f} for e, p, i, f in clear if e != p
            ],
        }
    return by_set


def report(args: argparse.Namespace) -> None:
    from mnemoscope.provenance import provenance

    runs = {}
    for name in ("before", "after"):
        path = getattr(args, name)
        if path is None:
            continue
        head, rows, foot = _read(Path(path))
        runs[name] = {"file": str(path), "header": head, "seconds": foot.get("seconds"), "rows": rows}
    out: dict[str, Any] = {"provenance": provenance(), "target": 0.85}
    for name, r in runs.items():
        out[name] = {
            "file": r["file"],
            "audited_by": r["header"].get("provenance", {}).get("git_commit"),
            "command": r["header"].get("provenance", {}).get("command"),
            "audit_seconds": r["seconds"],
            **score(r["rows"]),
        }
    if "before" in runs and "after" in runs:
        b = {r["id"]: r for r in runs["before"]["rows"]}
        a = {r["id"]: r for r in runs["after"]["rows"]}
        common = [i for i in a if i in b and "audit" in a[i] and "audit" in b[i]]
        flips = [i for i in common if a[i]["audit"]["memory_flag"] != b[i]["audit"]["memory_flag"]]
        answers = [i for i in common if a[i]["audit"]["answer"] != b[i]["audit"]["answer"]]
        dp = [
            abs(a[i]["audit"]["p_memory"] - b[i]["audit"]["p_memory"])
            for i in common
            if a[i]["audit"]["p_memory"] is not None and b[i]["audit"]["p_memory"] is not None
        ]
        moved = Counter(
            f"{b[i]['audit']['source']} -> {a[i]['audit']['source']}"
            for i in common
            if a[i]["audit"]["source"] != b[i]["audit"]["source"]
        )
        out["change"] = {
            "n_common": len(common),
            "memory_flag_changed": flips,
            "answer_changed": answers,
            "p_memory_abs_change_max": max(dp) if dp else None,
            "n_p_memory_changed": sum(d > 1e-9 for d in dp),
            "source_moves": dict(moved.most_common()),
        }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    for name in runs:
        s = out[name]
        print(
            f"{name}: all {s['all']['n_right']}/{s['all']['n_clear']} = {s['all']['accuracy']:.3f}; "
            f"verified {s['verified']['n_right']}/{s['verified']['n_clear']}, "
            f"conflict {s['conflict']['n_right']}/{s['conflict']['n_clear']}"
        )
    if "change" in out:
        c = out["change"]
        print(
            f"memory flag changed on {len(c['memory_flag_changed'])} of {c['n_common']}; moves {c['source_moves']}"
        )


def cuts(args: argparse.Namespace) -> None:
    """Where a template-less model's answers end under the default stop sequences (no profile needed):
    greedy answers of T tokens with the template-less prompt, each cut by ``cut_at_stop`` (the same
    tokens lockstep decoding with the stops keeps: greedy decoding writes the same prefix)."""
    import torch

    from mnemoscope.models import load_model
    from mnemoscope.provenance import provenance
    from mnemoscope.trace.lockstep import trace_lockstep
    from mnemoscope.trace.pair import PairConfig, PairItem, cut_at_stop, prepare_pair
    from mnemoscope.trace.templates import DEFAULT_STOPS, PromptBuilder
    from mnemoscope.trace.tracer import Tracer

    torch.set_num_threads(1)
    items = held_out()[: args.limit]
    lm = load_model(args.model)
    tracer = Tracer(lm, batch_size=args.batch)
    cfg = PairConfig(
        builder=PromptBuilder(template="A", chat=False),
        max_new_tokens=args.T,
        answer_without=False,
        hidden=False,
    )
    t0 = time.perf_counter()
    prepared = [prepare_pair(tracer, PairItem(it["id"], it["context"], it["query"]), cfg) for it in items]
    traces = trace_lockstep(tracer, prepared, cfg)
    secs = time.perf_counter() - t0
    rows, by_stop = [], Counter()
    for it, t in zip(items, traces, strict=True):
        keep, cut = cut_at_stop(tracer.tokenizer, t.answer_ids.tolist(), DEFAULT_STOPS)
        kept = tracer.tokenizer.decode(t.answer_ids[:keep].tolist(), skip_special_tokens=True)
        if cut:
            by_stop[cut["stop"]] += 1
        rows.append(
            {
                "id": it["id"],
                "kind": it["kind"],
                "n_tokens": int(t.n_steps),
                "n_kept": keep,
                "cut": cut,
                "states_fact_uncut": states(t.answer_with, it["answer"], it["aliases"]),
                "states_fact_cut": states(kept, it["answer"], it["aliases"]),
                "answer": t.answer_with,
                "audited": kept,
            }
        )
    n_cut = sum(r["cut"] is not None for r in rows)
    out = {
        "provenance": provenance(),
        "model": lm.info.to_dict(),
        "has_chat_template": bool(lm.info.has_chat_template),
        "stops": list(DEFAULT_STOPS),
        "T": args.T,
        "n": len(rows),
        "n_cut": n_cut,
        "by_stop": dict(by_stop),
        "mean_tokens_uncut": sum(r["n_tokens"] for r in rows) / len(rows),
        "mean_tokens_audited": sum(r["n_kept"] for r in rows) / len(rows),
        "states_fact_uncut": sum(r["states_fact_uncut"] for r in rows),
        "states_fact_cut": sum(r["states_fact_cut"] for r in rows),
        "generation_seconds": secs,
        "load_avg_end": list(os.getloadavg()),
        "rows": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(
        f"{n_cut}/{len(rows)} answers cut {dict(by_stop)}; tokens {out['mean_tokens_uncut']:.1f} -> "
        f"{out['mean_tokens_audited']:.1f}; fact stated {out['states_fact_uncut']} -> {out['states_fact_cut']}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="audit the items, one JSON line each")
    r.add_argument("--out", required=True)
    r.add_argument("--model", default="default")
    r.add_argument("--profile", default=None)
    r.add_argument("--conflicts", default=None, help="JSONL with kind=conflict items (default: shipped set)")
    r.add_argument("--per-category", type=int, default=3, help="conflict items per category (0 = none)")
    r.add_argument("--limit", type=int, default=0)
    r.add_argument("--batch", type=int, default=8)
    s = sub.add_parser("report", help="score one or two runs")
    s.add_argument("--before", default=None)
    s.add_argument("--after", required=True)
    s.add_argument("--out", required=True)
    c = sub.add_parser("cuts", help="where a template-less model's answers end under the default stops")
    c.add_argument("--model", required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--limit", type=int, default=40)
    c.add_argument("--T", type=int, default=32)
    c.add_argument("--batch", type=int, default=8)
    args = p.parse_args()
    if args.cmd == "cuts":
        cuts(args)
    elif args.cmd == "run":
        import torch

        torch.set_num_threads(1)
        run(args)
    else:
        report(args)


if __name__ == "__main__":
    main()
