"""The grounded verdict on real public data: SQuAD passages, entity-swap conflicts, multi-passage items.

Usage:
    python benchmarks/real_data_eval.py --out benchmarks/results/real/smollm2 [--profile DIR]
        [--data benchmarks/data/public] [--split evaluation] [--n 200] [--threads 1] [--batch-size 8]

Reads the public sets built by ``benchmarks/build_public_sets.py`` (docs/data.md, "Real public
data"): ``real.jsonl`` (a real SQuAD paragraph and its question), ``conflicts.jsonl`` (the answer
entity swapped for another of its type, Longpre et al. 2021) and ``multi_passage.jsonl`` (the gold
paragraph among k passages of other articles), the ``evaluation`` split only: no article of it is
in the calibration split that ``calibrate --input shipped:calibration+public`` draws from.

Every item is audited through the library's ``Auditor`` (the profile's own T, passages given as
passages). Its truth comes from the model's own answers, as ``calibrate`` verifies labels
(``mnemoscope.bench.label_check``): memory = answered right closed-book and with the context; context
= answered right only with the context (a followed conflict: the context's answer); an overridden
conflict (the model's own fact against the context) is memory. Items whose label does not verify
are counted and left out. Per set:

* ``n`` answers kept, ``false_flags`` (context answers flagged as memory, Clopper-Pearson 95 % CI),
  ``memory_recall`` (memory answers flagged), ``three_way`` (label == truth);
* ``context_on_contradicted``: answers that state a fact the context contradicts (an overridden
  conflict: the model's own answer, which no passage states) labelled ``context`` -- the target is 0;
* ``passage_top1`` (multi-passage, context answers): the passage the audit traces the answer to is
  the gold one.

Rows are appended to ``OUT/rows.jsonl`` as they are audited (``--resume`` skips done ids), and the
summary with command, git commit, load and threads goes to ``OUT/summary.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SETS = {"real": "real.jsonl", "conflicts": "conflicts.jsonl", "multi_passage": "multi_passage.jsonl"}


def load_set(data: Path, name: str, split: str, n: int) -> list[dict[str, Any]]:
    rows = []
    with (data / SETS[name]).open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                if r.get("split") == split:
                    rows.append(r)
    return rows[:n]


def answer_passage(audit: dict[str, Any], gold: list[str]) -> int | None:
    """The passage the audit traces the answer to: that of the context phrase stating the expected
    answer, else of its first context phrase (``None``: no phrase is traced to a passage)."""
    from mnemoscope.features.attribution import text_terms
    from mnemoscope.features.grounding import states

    words = ((audit.get("evidence") or {}).get("answer_words") or {}).get("words") or []
    traced = [w for w in words if w.get("passage") is not None and w.get("grounded") == "context"]
    for w in traced:
        if any(
            states(text_terms(w["text"]), text_terms(g)) or states(text_terms(g), text_terms(w["text"]))
            for g in gold
        ):
            return int(w["passage"])
    return int(traced[0]["passage"]) if traced else None


def truth_of(item: dict[str, Any], audit: dict[str, Any]) -> tuple[str | None, str]:
    """(``memory`` / ``context`` / ``None`` = dropped, the label check's reason)."""
    from mnemoscope.bench.label_check import check_item

    closed = (audit.get("evidence") or {}).get("closed_book_answer")
    if closed is None:
        return None, "no closed-book answer (the profile does not generate one)"
    d = check_item(item, closed, audit["answer"])
    if d.label is None:
        return None, d.reason
    return ("memory" if d.label == 1 else "context"), d.reason


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    from mnemoscope.audit.validation import binomial_ci

    def rate(k: int, n: int) -> dict[str, Any]:
        lo, hi = binomial_ci(k, n) if n else (None, None)
        return {"k": k, "n": n, "rate": (k / n) if n else None, "ci": [lo, hi]}

    out: dict[str, Any] = {}
    for name in SETS:
        rs = [r for r in rows if r["set"] == name]
        kept = [r for r in rs if r["truth"] in ("memory", "context")]
        ctx = [r for r in kept if r["truth"] == "context"]
        mem = [r for r in kept if r["truth"] == "memory"]
        against = [r for r in mem if r["kind"] == "conflict"]
        multi = [r for r in ctx if r.get("gold_passage") is not None]
        out[name] = {
            "items": len(rs),
            "failed": sum(r["truth"] == "failed" for r in rs),
            "dropped": sum(r["truth"] is None for r in rs),
            "n": len(kept),
            "n_context": len(ctx),
            "n_memory": len(mem),
            "false_flags": rate(sum(r["memory_flag"] for r in ctx), len(ctx)),
            "memory_recall": rate(sum(r["memory_flag"] for r in mem), len(mem)),
            "three_way": rate(sum(r["source"] == r["truth"] for r in kept), len(kept)),
            "labels": {
                t: _count(r["source"] for r in kept if r["truth"] == t) for t in ("memory", "context")
            },
            "context_on_contradicted": {
                "k": sum(r["source"] == "context" for r in against),
                "n": len(against),
            },
            "passage_top1": rate(sum(r.get("passage") == r["gold_passage"] for r in multi), len(multi))
            if multi
            else None,
        }
    return out


def _count(it: Any) -> dict[str, int]:
    d: dict[str, int] = {}
    for x in it:
        d[x] = d.get(x, 0) + 1
    return d


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--profile", default=None, help="profile folder (default: the shipped one)")
    ap.add_argument("--model", default="default")
    ap.add_argument("--data", default=str(ROOT / "benchmarks" / "data" / "public"))
    ap.add_argument("--split", default="evaluation")
    ap.add_argument("--n", type=int, default=200, help="items per set")
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)

    import torch
    from tqdm import tqdm

    from mnemoscope.audit.auditor import AuditFailure, Auditor, AuditRequest
    from mnemoscope.audit.profile import default_profile_path, load_profile
    from mnemoscope.models import load_model
    from mnemoscope.provenance import provenance

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows_path = out / "rows.jsonl"
    done: set[str] = set()
    if args.resume and rows_path.is_file():
        done = {json.loads(line)["id"] for line in rows_path.read_text().splitlines() if line.strip()}
    elif rows_path.exists():
        rows_path.unlink()
    lm = load_model(args.model)
    prof = load_profile(args.profile or default_profile_path(lm.info), model=lm.info)
    auditor = Auditor(lm, prof)
    started = time.time()
    load_start = os.getloadavg()
    items = []
    for name in args.sets.split(","):
        items += [(name, it) for it in load_set(Path(args.data), name, args.split, args.n)]
    todo = [(s, it) for s, it in items if str(it["id"]) not in done]
    bar = tqdm(total=len(todo), disable=args.quiet, desc="audits", file=sys.stderr)
    with rows_path.open("a", encoding="utf-8") as f:
        for b in range(0, len(todo), args.batch_size):
            chunk = todo[b : b + args.batch_size]
            reqs = []
            for _, it in chunk:
                ps = it.get("passages")
                if ps:
                    reqs.append(AuditRequest.from_passages(tuple(ps), it["query"], id=str(it["id"])))
                else:
                    reqs.append(AuditRequest(it["context"], it["query"], id=str(it["id"])))
            for (name, it), res in zip(chunk, auditor.audit(reqs), strict=True):
                row: dict[str, Any] = {"id": str(it["id"]), "set": name, "kind": it.get("kind")}
                if isinstance(res, AuditFailure):
                    row.update(truth="failed", error=res.to_dict())
                else:
                    d = res.to_dict()
                    truth, reason = truth_of(it, d)
                    gold = (
                        [it.get("context_answer")]
                        if truth == "context" and it.get("context_answer")
                        else [
                            it["answer"],
                            *it.get("aliases", []),
                        ]
                    )
                    row.update(
                        truth=truth,
                        reason=reason,
                        source=d["source"],
                        memory_flag=bool(d["memory_flag"]),
                        p_memory=d["p_memory"],
                        answer=d["answer"],
                        closed_book_answer=d["evidence"].get("closed_book_answer"),
                        answer_words=(d["evidence"].get("answer_words") or {}).get("words"),
                        gold_passage=it.get("gold_passage"),
                        passage=answer_passage(d, [g for g in gold if g]),
                    )
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
                f.flush()
            bar.update(len(chunk))
    bar.close()
    rows = [json.loads(line) for line in rows_path.read_text().splitlines() if line.strip()]
    summary = {
        **provenance(),
        "profile": str(prof.path),
        "profile_hash": prof.content_hash,
        "max_new_tokens": prof.header.get("max_new_tokens"),
        "threads": args.threads,
        "batch_size": args.batch_size,
        "split": args.split,
        "wall_seconds": round(time.time() - started, 1),
        "load_start": load_start,
        "load_end": os.getloadavg(),
        "sets": summarise(rows),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    print(json.dumps(summary["sets"], indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
