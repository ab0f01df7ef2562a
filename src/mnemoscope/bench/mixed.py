"""Token-level ground truth: mixed questions whose answer is half context, half memory.

Each item joins two facts of the context-reliance set (:mod:`mnemoscope.bench.reliance`):
a *clean* fact about an invented entity, which only the context states, and a *memorized*
well-known fact (a capital, an author, a chemical symbol, a common fact), which the context
does not mention. The query asks both; the context is the clean fact's context::

    context: "Brolbryn is the capital of Gonesh, a small island nation ..."
    query:   "What is the capital of Gonesh, and what is the capital of France?"
    answer_context: "Brolbryn"      answer_memory: "Paris"

So the correct answer has one part only the context supplies and one part the model knows.
Three query phrasings are used so that nothing depends on one template. Items are
deterministic (seeded); ``python -m mnemoscope.bench.mixed`` writes
``bench/data/mixed_reliance.jsonl``.

:func:`verify_mixed` keeps an item for a given model only if (1) the memorized fact is one
the model answers closed-book (its id is among ``bench verify``'s kept memorized items),
(2) the open-book answer contains both parts (answer or an alias, whole words) and (3) the
closed-book answer to the combined query does not contain the context part. For every kept
item it records where each part sits in the open-book answer (character offsets), which is
what the token-level evaluation scores.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["MIXED_PATH", "PHRASINGS", "build_mixed", "find_part", "load_mixed", "verify_mixed"]

MIXED_PATH = Path(__file__).parent / "data" / "mixed_reliance.jsonl"
PHRASINGS = (
    "{a}, and {b}",  # "What is the capital of Gonesh, and what is the capital of France?"
    "Two questions. {A} {B}",
    "{A} Also, {b}",
)


def _lower_first(q: str) -> str:
    return q[:1].lower() + q[1:] if q[1:2].islower() or q[1:2] == " " else q


def _join(template: str, qa: str, qb: str) -> str:
    a = qa.rstrip("?").rstrip()
    return template.format(a=a, b=_lower_first(qb), A=qa, B=qb)


def build_mixed(items: Sequence[dict[str, Any]], n: int = 300, seed: int = 7) -> list[dict[str, Any]]:
    """Pair ``n`` clean facts with memorized facts (seeded, categories mixed, no pair twice).

    Args:
        items: context-reliance items (``kind`` clean / memorized; paraphrases are skipped).
        n: items to build (at most one per clean fact and phrasing).
    """
    clean = [it for it in items if it["kind"] == "clean"]
    memo = [it for it in items if it["kind"] == "memorized"]
    if not clean or not memo:
        raise ValueError("need clean and memorized reliance items")
    rng = np.random.default_rng(seed)
    out: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    order = [(ci, ph) for ph in range(len(PHRASINGS)) for ci in range(len(clean))]
    for k in rng.permutation(len(order)):
        if len(out) >= n:
            break
        ci, ph = order[int(k)]
        c = clean[ci]
        for _ in range(20):
            m = memo[int(rng.integers(len(memo)))]
            if (c["id"], m["id"]) not in seen and _norm(m["answer"]) not in _norm(c["context"]):
                break
        else:  # pragma: no cover - 150 memorized facts make this unreachable
            continue
        seen.add((c["id"], m["id"]))
        out.append(
            {
                "id": f"mix-{len(out):03d}",
                "kind": "mixed",
                "expected_source": "mixed",
                "context": c["context"],
                "query": _join(PHRASINGS[ph], c["query"], m["query"]),
                "answer_context": c["answer"],
                "aliases_context": list(c.get("aliases", [])),
                "answer_memory": m["answer"],
                "aliases_memory": list(m.get("aliases", [])),
                "category_context": c.get("category"),
                "category_memory": m.get("category"),
                "phrasing": ph,
                "clean_id": c["id"],
                "memorized_id": m["id"],
            }
        )
    return out


def _norm(s: str) -> str:
    return re.sub(r"\s+", " ", s.lower()).strip()


def load_mixed(path: str | Path = MIXED_PATH) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def _part(item: dict[str, Any], which: str) -> dict[str, Any]:
    return {"answer": item[f"answer_{which}"], "aliases": item.get(f"aliases_{which}", [])}


def find_part(answer: str, part: dict[str, Any]) -> tuple[int, int] | None:
    """Character span of the part's answer (or an alias) in ``answer``, case-insensitive, whole words."""
    for cand in [part["answer"], *part.get("aliases", [])]:
        m = re.search(r"(?<!\w)" + re.escape(cand.strip()) + r"(?!\w)", answer, flags=re.IGNORECASE)
        if m:
            return m.start(), m.end()
    return None


def verify_mixed(
    lm: Any,
    items: Sequence[dict[str, Any]],
    out: str | Path,
    config: Any,
    *,
    memorized_ids: Iterable[str] | None = None,
    batch_size: int = 8,
    progress: bool = True,
) -> dict[str, Any]:
    """Trace every item (resumable, ``OUT/traces``), keep the verified ones (module doc).

    Writes ``OUT/verified.jsonl`` (items plus ``open_book_answer``, ``closed_book_answer``,
    ``span_context``, ``span_memory``) and ``OUT/verify.json`` (counts and the rule).
    """
    from mnemoscope.bench.reliance import answer_matches
    from mnemoscope.trace import PairItem, load_traces
    from mnemoscope.trace.pipeline import run_pairs

    if not config.answer_without:
        raise ValueError("verification needs the closed-book answer: PairConfig(answer_without=True)")
    out = Path(out)
    summary = run_pairs(
        lm,
        [PairItem(it["id"], it["context"], it["query"]) for it in items],
        out / "traces",
        config=config,
        batch_size=batch_size,
        progress=progress,
    )
    by_id = {t.id: t for t in load_traces(out / "traces")}
    known = None if memorized_ids is None else set(memorized_ids)
    reasons: Counter[str] = Counter()
    kept = []
    for it in items:
        t = by_id.get(it["id"])
        if t is None:
            reasons["not traced"] += 1
            continue
        if known is not None and it["memorized_id"] not in known:
            reasons["memorized fact not known closed-book"] += 1
            continue
        ctx, mem = _part(it, "context"), _part(it, "memory")
        if not (answer_matches(t.answer_with, ctx) and answer_matches(t.answer_with, mem)):  # type: ignore[arg-type]
            reasons["open-book answer lacks a part"] += 1
            continue
        if answer_matches(t.answer_without or "", ctx):  # type: ignore[arg-type]
            reasons["context part answered closed-book"] += 1
            continue
        reasons["kept"] += 1
        kept.append(
            {
                **it,
                "open_book_answer": t.answer_with,
                "closed_book_answer": t.answer_without,
                "span_context": find_part(t.answer_with, ctx),
                "span_memory": find_part(t.answer_with, mem),
            }
        )
    with (out / "verified.jsonl").open("w", encoding="utf-8") as f:
        for r in kept:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    result = {
        "model": lm.info.to_dict(),
        "pair_config": config.to_dict(),
        "n_items": len(items),
        "n_kept": len(kept),
        "outcomes": dict(reasons),
        "kept_by_phrasing": dict(Counter(str(r["phrasing"]) for r in kept)),
        "kept_by_memory_category": dict(Counter(str(r["category_memory"]) for r in kept)),
        "trace_errors": summary.errors,
        "rule": "memorized fact verified closed-book by bench verify; open-book answer contains both parts "
        "(answer or alias, whole words, case-insensitive); closed-book answer lacks the context part",
    }
    (out / "verify.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def main() -> None:  # pragma: no cover - data generation entry point
    from mnemoscope.bench.reliance import load_reliance

    rows = build_mixed(load_reliance())
    MIXED_PATH.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    print(f"wrote {len(rows)} items to {MIXED_PATH}")


if __name__ == "__main__":  # pragma: no cover
    main()
