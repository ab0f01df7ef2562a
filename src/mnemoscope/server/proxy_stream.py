"""Server-sent events of the audit proxy: the answer text of an OpenAI stream, its end, the verdict event.

A streamed answer is relayed to the client chunk by chunk as the upstream sends it (nothing is
buffered before it is passed on). When the upstream's stream ends with ``data: [DONE]``, the
proxy appends one more event, after ``[DONE]``::

    event: mnemoscope
    data: {"id": ..., "status": "audited", "source": "context", "memory_flag": false, ...}

OpenAI's clients stop reading at ``[DONE]`` (the Python client closes the response there), so
they never see it and their time to the last token is not changed; a client that wants the
verdict in band reads the raw stream on (:func:`read_verdict_event`). The verdict is also in
the audit log in every case (``GET /mnemoscope/audits/{id}``, the id is in the
``X-Mnemoscope-Audit-Id`` response header). A stream that ends without ``[DONE]`` (cut by the
upstream) gets no extra event: a client would take any event before the end for a chunk.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["VERDICT_EVENT", "read_verdict_event", "saw_done", "saw_finish", "sse_answer", "verdict_event"]

VERDICT_EVENT = "mnemoscope"


def _data_lines(raw: bytes) -> list[str]:
    out = []
    for line in raw.decode("utf-8", errors="replace").splitlines():
        line = line.strip()
        if line.startswith("data:"):
            out.append(line[len("data:") :].strip())
    return out


def sse_answer(raw: bytes) -> str:
    """The answer text of an OpenAI server-sent-event stream (chat deltas or completion texts)."""
    parts: list[str] = []
    for data in _data_lines(raw):
        if not data or data == "[DONE]":
            continue
        try:
            ev = json.loads(data)
            ch = ev["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            continue
        delta = ch.get("delta")
        if isinstance(delta, dict) and isinstance(delta.get("content"), str):
            parts.append(delta["content"])
        elif isinstance(ch.get("text"), str):
            parts.append(ch["text"])
    return "".join(parts)


def saw_done(raw: bytes) -> bool:
    """Whether the stream ended properly (a ``data: [DONE]`` line)."""
    return any(d == "[DONE]" for d in _data_lines(raw))


def saw_finish(raw: bytes) -> bool:
    """Whether a chunk of the stream carries a ``finish_reason`` (the answer is complete)."""
    for data in _data_lines(raw):
        try:
            ch = json.loads(data)["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            continue
        if isinstance(ch, dict) and ch.get("finish_reason"):
            return True
    return False


def verdict_event(record: dict[str, Any]) -> bytes:
    """The final ``event: mnemoscope`` SSE event carrying an audit record (one JSON line)."""
    return f"event: {VERDICT_EVENT}\ndata: {json.dumps(record, ensure_ascii=True)}\n\n".encode()


def read_verdict_event(raw: bytes) -> dict[str, Any] | None:
    """The audit record of a raw proxied stream's final ``mnemoscope`` event (``None``: none).

    Example:
        >>> read_verdict_event(b'data: [DONE]\\n\\nevent: mnemoscope\\ndata: {"status": "audited"}\\n\\n')
        {'status': 'audited'}
    """
    event = None
    for line in raw.decode("utf-8", errors="replace").splitlines():
        line = line.strip()
        if not line:
            event = None
        elif line.startswith("event:"):
            event = line[len("event:") :].strip()
        elif line.startswith("data:") and event == VERDICT_EVENT:
            try:
                rec = json.loads(line[len("data:") :].strip())
            except ValueError:
                return None
            return rec if isinstance(rec, dict) else None
    return None
