"""Verify context-reliance labels against the model in use.

A *memorized* item (or its paraphrase) is kept only if the model answers it correctly
closed-book; a *clean* item only if the model answers it wrongly closed-book and correctly
open-book. Closed-book = greedy answer on the no-context prompt (same template, empty
context); open-book = greedy answer with the context. Both come from one paired trace with
``answer_without=True``, so the traces can be reused by ``repcs eval``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mnemoscope.models.loader import LoadedModel
from mnemoscope.trace import PairConfig, PairItem, load_traces
from mnemoscope.trace.pipeline import run_pairs

__all__ = ["verify_reliance"]


def verify_reliance(
    lm: LoadedModel,
    items: Sequence[dict[str, Any]],
    out: str | Path,
    config: PairConfig,
    *,
    batch_size: int = 8,
    progress: bool = True,
) -> dict[str, Any]:
    """Trace every item, check answers, write ``OUT/verified.jsonl`` + ``OUT/verify.json``.

    Returns the summary (counts per kind before and after verification).
    """
    from mnemoscope.bench.reliance import answer_matches

    if not config.answer_without:
        raise ValueError("verification needs the closed-book answer: PairConfig(answer_without=True)")
    out = Path(out)
    traces_dir = out / "traces"
    pair_items = [PairItem(it["id"], it["context"], it["query"], it["label"]) for it in items]
    summary = run_pairs(lm, pair_items, traces_dir, config=config, batch_size=batch_size, progress=progress)
    by_id = {t.id: t for t in load_traces(traces_dir)}
    total: Counter[str] = Counter()
    kept: Counter[str] = Counter()
    rows = []
    for it in items:
        total[it["kind"]] += 1
        t = by_id.get(it["id"])
        if t is None:
            continue
        closed_ok = answer_matches(t.answer_without or "", it)
        open_ok = answer_matches(t.answer_with, it)
        keep = closed_ok if it["label"] == 1 else (not closed_ok and open_ok)
        if keep:
            kept[it["kind"]] += 1
            rows.append(
                {
                    **it,
                    "closed_book_answer": t.answer_without,
                    "open_book_answer": t.answer_with,
                    "closed_book_correct": closed_ok,
                    "open_book_correct": open_ok,
                }
            )
    with (out / "verified.jsonl").open("w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    result = {
        "model": lm.info.to_dict(),
        "pair_config": config.to_dict(),
        "n_items": len(items),
        "n_kept": len(rows),
        "by_kind": {k: {"total": total[k], "kept": kept[k]} for k in sorted(total)},
        "trace_errors": summary.errors,
        "rule": "memorized / paraphrased kept if correct closed-book; clean kept if wrong closed-book and "
        "right open-book (answer or alias as a whole word, case-insensitive)",
    }
    (out / "verify.json").write_text(json.dumps(result, indent=1) + "\n")
    return result
