"""A retrieved context as a list of passages: the one rule that joins them into the context a
prompt shows, and finds them again in it.

A RAG application retrieves several passages; the model sees them joined. Every entry point that
takes ``passages`` (the Python API, ``audit`` JSONL, the server, the proxy, the integrations) joins
them here, so the context the model saw and the passages a phrase is traced to always agree.

Example:
    >>> ctx = join_passages(["Paris is the capital of France.", "Lyon is on the Rhone."])
    >>> ctx
    'Paris is the capital of France.\\n\\nLyon is on the Rhone.'
    >>> passage_spans(["Paris is the capital of France.", "Lyon is on the Rhone."])
    [(0, 31), (33, 54)]
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = [
    "PASSAGE_SEPARATOR",
    "join_passages",
    "passage_spans",
    "split_passage_spans",
    "split_passages",
    "without_passage",
]

#: what stands between two passages in the context the model reads
PASSAGE_SEPARATOR = "\n\n"


def join_passages(passages: Sequence[str]) -> str:
    """The context the model reads: the passages in order, each stripped, separated by a blank line."""
    return PASSAGE_SEPARATOR.join(p.strip() for p in passages)


def passage_spans(passages: Sequence[str]) -> list[tuple[int, int]]:
    """Character ``(start, end)`` of each passage in :func:`join_passages` of ``passages``."""
    out, pos = [], 0
    for p in passages:
        n = len(p.strip())
        out.append((pos, pos + n))
        pos += n + len(PASSAGE_SEPARATOR)
    return out


def without_passage(passages: Sequence[str], j: int) -> str:
    """The context with passage ``j`` left out (leave-one-passage-out scoring)."""
    return join_passages([p for i, p in enumerate(passages) if i != j])


# -- a context found in an application's prompt, split back into its passages ---------------------

#: a labelled document's first line: ``[1] ...`` (group 1: its number)
_BRACKET = re.compile(r"^[ \t]*\[(\d+)\]", re.M)
#: ``Document 1: ...``, ``Doc #2 ...``, ``Passage 3 ...``, ``Source 4 ...``, ``Chunk 5 ...``
_LABEL = re.compile(r"^[ \t]*(document|doc|passage|source|chunk)[ \t]*#?[ \t]*(\d+)\b", re.M | re.I)
#: ``1. ...`` / ``1) ...`` at the start of a line
_NUMBERED = re.compile(r"^(\d+)[.)][ \t]", re.M)
#: ``- ...`` / ``* ...`` / ``\u2022 ...`` at the start of a line (not indented)
_BULLET = re.compile(r"^[-*\u2022][ \t]", re.M)
#: one or more blank lines (whitespace only)
_BLANK = re.compile(r"\n[ \t\r\f\v]*\n\s*")


def _numbered_starts(context: str, pattern: re.Pattern[str], group: int) -> list[int]:
    """Starts of the lines ``pattern`` marks whose numbers run on by one from the first such line
    (a marker out of sequence, e.g. a citation ``[7]`` inside a document, starts nothing)."""
    starts: list[int] = []
    word = None
    nxt = None
    for m in pattern.finditer(context):
        n = int(m.group(group))
        w = m.group(1).lower() if group == 2 else None
        if nxt is None:
            nxt, word = n, w
        if n == nxt and w == word:
            starts.append(m.start())
            nxt = n + 1
    return starts


def _spans_from_starts(context: str, starts: Sequence[int]) -> list[tuple[int, int]]:
    out = []
    for a, b in zip(starts, [*starts[1:], len(context)], strict=True):
        text = context[a:b]
        lead = len(text) - len(text.lstrip())
        out.append((a + lead, a + len(text.rstrip())))
    return [(a, b) for a, b in out if b > a]


def split_passage_spans(context: str) -> list[tuple[int, int]]:
    """Character ``(start, end)`` of each passage of ``context`` (see :func:`split_passages`)."""
    if not context.strip():
        return []
    for pattern, group in ((_BRACKET, 1), (_LABEL, 2)):  # labelled documents, anywhere
        starts = _numbered_starts(context, pattern, group)
        if len(starts) >= 2:
            return _spans_from_starts(context, starts)
    first = len(context) - len(context.lstrip())
    starts = _numbered_starts(context, _NUMBERED, 1)  # a numbered list the context is
    if len(starts) >= 2 and starts[0] == first and re.match(r"1\D", context[first:]):
        return _spans_from_starts(context, starts)
    starts = [m.start() for m in _BULLET.finditer(context)]  # a bulleted list the context is
    if len(starts) >= 2 and starts[0] == first:
        return _spans_from_starts(context, starts)
    spans, pos = [], 0  # blocks between blank lines
    for m in _BLANK.finditer(context):
        spans.append((pos, m.start()))
        pos = m.end()
    spans.append((pos, len(context)))
    return _spans_from_starts(context, [a for a, b in spans if context[a:b].strip()])


def split_passages(context: str) -> list[str]:
    """The passages a context found in an application's prompt is made of: the one split rule
    (the audit proxy's; :func:`join_passages` is its converse for contexts mnemoscope builds).

    Every passage is a verbatim slice of ``context`` (stripped of surrounding whitespace), in
    order, without overlap, so the context itself stays exactly as found. The first rule that
    finds at least two passages decides:

    1. **labelled documents** -- lines starting ``[1]``, ``[2]``, ... or ``Document 1``,
       ``Document 2``, ... (also ``Doc``, ``Passage``, ``Source``, ``Chunk``; any case, an
       optional ``#``), numbered on by one from the first; a passage runs from its label to the
       next one. A marker out of sequence (a citation ``[7]`` inside a document) starts nothing;
       text before the first label (a heading such as ``Documents:``) is in no passage;
    2. **a numbered list** -- the context starts with ``1.`` or ``1)`` and more lines start
       ``2.``, ``3.``, ... (same sequence rule);
    3. **a bulleted list** -- the context starts with a line ``- ``, ``* `` or ``\u2022 `` (not
       indented) and more lines do; an indented line continues the item;
    4. **blocks between blank lines** (one or more lines holding only whitespace);

    else the whole context is one passage. A blank context has none.

    >>> split_passages("[1] Paris is in France.\\n[2] Lyon is on the Rhone.")
    ['[1] Paris is in France.', '[2] Lyon is on the Rhone.']
    >>> split_passages("Documents:\\nDocument 1: Paris.\\nDocument 2: Lyon.")
    ['Document 1: Paris.', 'Document 2: Lyon.']
    >>> split_passages("Paris is in France.\\n\\n\\nLyon is on the Rhone.\\n")
    ['Paris is in France.', 'Lyon is on the Rhone.']
    >>> split_passages("One passage,\\non two lines.")
    ['One passage,\\non two lines.']
    """
    return [context[a:b] for a, b in split_passage_spans(context)]
