"""Verify context-reliance labels against the model in use (``mnemoscope bench verify``).

The rule is :func:`mnemoscope.bench.label_check.verify_labels` (the one ``mnemoscope
calibrate`` applies): a *memorized* item (or its paraphrase) is kept only if the model answers
it correctly closed-book and with the context; a *clean* item only if the model answers it
wrongly closed-book and correctly open-book; a knowledge-conflict item is labelled by the
answer it gives with the context. Closed-book = greedy answer on the no-context prompt (same
template, empty context); open-book = greedy answer with the context. Both come from one paired
trace with ``answer_without=True``, so the traces can be reused by ``repcs eval``.
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
    from mnemoscope.bench.label_check import LABEL_RULE, verify_labels

    if not config.answer_without:
        raise ValueError("verification needs the closed-book answer: PairConfig(answer_without=True)")
    out = Path(out)
    traces_dir = out / "traces"
    pair_items = [PairItem(it["id"], it["context"], it["query"], it["label"]) for it in items]
    summary = run_pairs(lm, pair_items, traces_dir, config=config, batch_size=batch_size, progress=progress)
    by_id = {t.id: t for t in load_traces(traces_dir)}
    check = verify_labels(
        items, {i: (t.answer_with, t.answer_without) for i, t in by_id.items()}, mode="verify"
    )
    dec = {d.id: d for d in check.decisions}
    total: Counter[str] = Counter(it["kind"] for it in items)
    kept: Counter[str] = Counter()
    rows = []
    for it in items:
        d = dec.get(it["id"])
        if d is None or not d.keep:
            continue
        kept[it["kind"]] += 1
        t = by_id[it["id"]]
        rows.append(
            {
                **it,
                "label": d.label,
                "closed_book_answer": t.answer_without,
                "open_book_answer": t.answer_with,
                "closed_book_correct": d.closed_book_correct,
                "open_book_correct": d.open_book_correct,
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
        "rule": LABEL_RULE,
        "dropped_reasons": check.reasons,
    }
    (out / "verify.json").write_text(json.dumps(result, indent=1) + "\n")
    return result
