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

from collections.abc import Sequence

__all__ = ["PASSAGE_SEPARATOR", "join_passages", "passage_spans", "without_passage"]

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
