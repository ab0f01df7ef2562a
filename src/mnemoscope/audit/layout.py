"""Where the retrieved context sits in an application's own prompt, and that prompt without it.

An audit compares the answer's distribution *with* the retrieved context and *without* it. When
the audit renders (context, query) with the profile's template, both prompts are the profile's.
When it audits what an application actually sent (the audit proxy, the integrations), the
with-context prompt is the application's messages as they were (system prompt, few-shot turns,
history) and the no-context prompt is the same messages with **only the retrieved context
removed** (its characters replaced by the empty string, as the templates do: CRM's no-context
prompt is the same template with an empty context).

This module is pure (no model, no server): it locates the context from a *layout spec*, returns
the messages (or the completion prompt) without it, and checks that a profile was calibrated for
the layout it is asked to audit (the only decision here, hence in ``pipelines/``).

**Layout specs** (the ``context`` member of the proxy's ``mnemoscope`` request object):

* a string: the retrieved text itself, found verbatim (its last occurrence) in the last user
  message, else a system message, else any other message (or in the completion prompt);
* ``{"message": i}``: the whole content of message ``i`` (negative indices count from the end);
* ``{"message": i, "start": S, "end": E}``: the text between delimiters ``S`` and ``E`` (the
  delimiters stay) in message ``i``; without ``"message"``, searched in the default order;
* no spec (the default, for the common RAG layouts): the text inside ``<context>...</context>``
  (also ``<documents>``, ``<document>``, ``<docs>``, ``<sources>``, ``<retrieved_context>``), else a
  block that starts with a line ``Context:`` (``Documents:``, ``Sources:``, ``Reference
  information:``) and runs to the next ``Question:``/``Query:`` line (or the end), searched in
  the last user message, then the system messages, then the prompt of a completion request.

The layout of a located context is where it sits: ``"user"`` (the last user message),
``"system"`` (a system message), ``"message:<role>"`` (another message, e.g. a separate context
turn) or ``"prompt"`` (a ``/v1/completions`` prompt). A profile records the layout it was
calibrated with (``profile.json`` ``"layout": {"context_in": ...}``); profiles without it were
calibrated on the template layout (context and query in one user turn, or a plain prompt).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mnemoscope.errors import InputError
from mnemoscope.trace.app_prompt import last_user, layout_of

__all__ = [
    "DEFAULT_TAGS",
    "LayoutMismatch",
    "Located",
    "check_layout",
    "locate_context",
    "locate_documents",
    "located_span",
    "message_text",
    "profile_layout",
]

DEFAULT_TAGS: tuple[str, ...] = (
    "context",
    "documents",
    "document",
    "docs",
    "sources",
    "retrieved_context",
)
_LABELS = r"(?:context|documents?|sources|reference information|retrieved context)"
_LABEL_RE = re.compile(rf"^[ \t]*{_LABELS}[ \t]*:[ \t]*", re.IGNORECASE | re.MULTILINE)
_QUESTION_RE = re.compile(r"^[ \t]*(?:question|query)[ \t]*:", re.IGNORECASE | re.MULTILINE)


def message_text(content: Any) -> str:
    """The text of an OpenAI message content: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


@dataclass(frozen=True)
class Located:
    """A context located in a request.

    Attributes:
        context: the retrieved text (what is removed on the no-context path).
        query: the last user message with the context removed (stripped), for the record.
        layout: where the context sits (module doc).
        how: how it was found (the spec or the default rule that matched), for the record.
        message: the message index holding it (``None`` for a completion prompt).
        start, end: the context's character offsets in that message's text (or the prompt).
        messages_with, messages_without: the messages as sent (text contents) and with the
            context removed (``None`` for a completion prompt).
        prompt_with, prompt_without: the completion prompt as sent and without the context
            (``None`` for chat messages).
        prompt: with a profile calibrated on the application's prompt
            (:mod:`mnemoscope.audit.prompt_match`): how the request compares with it
            (``status``: ``"calibrated"`` or ``"different"``, and what differs).
    """

    context: str
    query: str
    layout: str
    how: str
    message: int | None
    start: int
    end: int
    messages_with: list[dict[str, Any]] | None = None
    messages_without: list[dict[str, Any]] | None = None
    prompt_with: str | None = None
    prompt_without: str | None = None
    prompt: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The record of where the context was (no message contents)."""
        out: dict[str, Any] = {
            "layout": self.layout,
            "how": self.how,
            "message": self.message,
            "start": self.start,
            "end": self.end,
            "context_chars": len(self.context),
        }
        if self.prompt is not None:
            out["prompt"] = dict(self.prompt)
        return out


def _search_order(messages: Sequence[dict[str, Any]], query_role: str) -> list[int]:
    """The last user message, then system messages, then every other message (latest first)."""
    order: list[int] = []
    lu = last_user(messages, query_role)
    if lu is not None:
        order.append(lu)
    order += [i for i, m in enumerate(messages) if m.get("role") in ("system", "developer")]
    order += [i for i in range(len(messages) - 1, -1, -1) if i not in order]
    return order


def _default_span(text: str) -> tuple[int, int, str] | None:
    """The default rule's span in ``text``: tagged block, else a labelled block (module doc)."""
    for tag in DEFAULT_TAGS:
        m = re.search(rf"<{tag}(?:\s[^>]*)?>(.*?)</{tag}\s*>", text, re.IGNORECASE | re.DOTALL)
        if m and m.group(1).strip():
            return m.start(1), m.end(1), f"default: <{tag}> tags"
    labels = list(_LABEL_RE.finditer(text))  # the last one: an inlined history keeps earlier ones
    lab = labels[-1] if labels else None
    if lab is not None:
        start = lab.end()
        q = _QUESTION_RE.search(text, start)
        end = q.start() if q else len(text)
        while end > start and text[end - 1] in "\n\r \t":
            end -= 1  # keep the separators: only the retrieved text goes
        if end > start:
            label = lab.group(0).strip().rstrip(":").strip()
            return start, end, f"default: '{label}:' block"
    return None


def _delimited(text: str, start: str, end: str) -> tuple[int, int] | None:
    i = text.rfind(start)
    if i < 0:
        return None
    j = text.find(end, i + len(start))
    if j < 0:
        return None
    return i + len(start), j


def _spec_error(msg: str) -> InputError:
    return InputError(msg, field="mnemoscope.context")


def _find(texts: list[str], order: list[int], spec: Any) -> tuple[int, int, int, str] | str:
    """``(index, start, end, how)`` in ``texts`` (searched in ``order``) or the reason it is not there."""
    if spec is None:
        for i in order:
            hit = _default_span(texts[i])
            if hit is not None:
                return i, hit[0], hit[1], hit[2]
        return (
            "the context could not be located: no <context>...</context> tags and no 'Context:' block "
            "in the last user message or the system messages; name it in the request's mnemoscope object "
            "(docs/proxy.md: a message index, delimiters or the context text)"
        )
    if isinstance(spec, str):
        if not spec.strip():
            return "mnemoscope.context is empty: there is no retrieved context to audit"
        for i in order:
            j = texts[i].rfind(spec)
            if j >= 0:
                return i, j, j + len(spec), "mnemoscope.context text"
        return "the mnemoscope.context text does not occur verbatim in the request's messages"
    if not isinstance(spec, dict):
        raise _spec_error(
            f"mnemoscope.context must be a string, or an object with 'message' and/or 'start'/'end', "
            f"got {type(spec).__name__}"
        )
    unknown = sorted(set(spec) - {"message", "start", "end"})
    if unknown:
        raise _spec_error(f"mnemoscope.context has unknown keys {unknown} (allowed: message, start, end)")
    has_delims = "start" in spec or "end" in spec
    if has_delims and not (isinstance(spec.get("start"), str) and isinstance(spec.get("end"), str)):
        raise _spec_error("mnemoscope.context delimiters need both 'start' and 'end' as non-empty strings")
    if has_delims and not (spec["start"] and spec["end"]):
        raise _spec_error("mnemoscope.context delimiters need both 'start' and 'end' as non-empty strings")
    if "message" in spec:
        mi = spec["message"]
        if isinstance(mi, bool) or not isinstance(mi, int):
            raise _spec_error(f"mnemoscope.context.message must be an integer index, got {mi!r}")
        if not -len(texts) <= mi < len(texts):
            return f"mnemoscope.context.message {mi} is out of range: the request has {len(texts)} messages"
        idx = mi % len(texts)
        if not has_delims:
            return idx, 0, len(texts[idx]), f"message {mi}"
        span = _delimited(texts[idx], spec["start"], spec["end"])
        if span is None:
            return f"the delimiters {spec['start']!r} ... {spec['end']!r} are not in message {mi}"
        return idx, span[0], span[1], f"message {mi} between delimiters"
    if not has_delims:
        raise _spec_error("mnemoscope.context object needs 'message' and/or 'start' and 'end'")
    for i in order:
        span = _delimited(texts[i], spec["start"], spec["end"])
        if span is not None:
            return i, span[0], span[1], "between delimiters"
    return f"the delimiters {spec['start']!r} ... {spec['end']!r} occur in no message"


def locate_context(
    body: dict[str, Any], spec: Any = None, *, context_role: str | None = None, query_role: str = "user"
) -> Located | str:
    """Locate the retrieved context in an OpenAI request ``body`` (``messages`` or ``prompt``).

    Args:
        body: the request body as the application sent it.
        spec: the layout spec (module doc); ``None``: the default rule.
        context_role: every message of this role is context (the proxy's ``--context-role``;
            used only when ``spec`` is ``None``).
        query_role: the role of the query's message (its last message is "the user message").

    Returns:
        :class:`Located`, or the reason the context cannot be located (the audit is then
        ``undetermined`` with that reason and the answer passes through).

    Raises:
        InputError: a malformed spec (naming the field ``mnemoscope.context``).
    """
    msgs = body.get("messages")
    if isinstance(msgs, list):
        if not msgs or not all(isinstance(m, dict) for m in msgs):
            return "the request's messages are not a list of message objects"
        texts = [message_text(m.get("content")) for m in msgs]
        if spec is None and context_role:
            idx = [i for i, m in enumerate(msgs) if m.get("role") == context_role and texts[i].strip()]
            if not idx:
                return f"no '{context_role}' message (--context-role) holds any text"
            if len(idx) > 1:
                return (
                    f"{len(idx)} '{context_role}' messages (--context-role): name the one holding the "
                    "retrieved context with mnemoscope.context.message"
                )
            found: tuple[int, int, int, str] | str = (idx[0], 0, len(texts[idx[0]]), f"role {context_role}")
        else:
            found = _find(texts, _search_order(msgs, query_role), spec)
        if isinstance(found, str):
            return found
        i, s, e, how = found
        return located_span(body, texts, i, s, e, how, query_role)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        if isinstance(spec, dict) and "message" in spec:
            raise _spec_error(
                "mnemoscope.context.message applies to chat messages; this request has a prompt"
            )
        found = _find([prompt], [0], spec)
        if isinstance(found, str):
            return found.replace("in the last user message or the system messages", "in the prompt")
        _, s, e, how = found
        return located_span({"prompt": prompt}, [prompt], 0, s, e, how, query_role)
    return "the request has neither chat messages nor a single string prompt"


def locate_documents(
    body: dict[str, Any], documents: Sequence[str], *, query_role: str = "user"
) -> Located | str:
    """Locate retrieved ``documents`` (their texts) in a request: every document must occur
    verbatim in one message (searched in the default order) or in the prompt; the context is the
    span from the first document's start to the last one's end (the separators the application
    put between them go with it). Returns the reason when they are not all there."""
    docs = [d for d in documents if d.strip()]
    if not docs:
        return "no retrieved document has any text"
    msgs = body.get("messages")
    if isinstance(msgs, list) and msgs and all(isinstance(m, dict) for m in msgs):
        texts = [message_text(m.get("content")) for m in msgs]
        order = _search_order(msgs, query_role)
    elif isinstance(body.get("prompt"), str):
        texts, order = [str(body["prompt"])], [0]
    else:
        return "the request has neither chat messages nor a single string prompt"
    for i in order:
        spans = [(texts[i].rfind(d), len(d)) for d in docs]
        if all(s >= 0 for s, _ in spans):
            start = min(s for s, _ in spans)
            end = max(s + n for s, n in spans)
            spec: dict[str, Any] = {"message": i} if msgs is not None and isinstance(msgs, list) else {}
            found = (
                locate_context(body, {**spec, "start": texts[i][:start][-0:] or "", "end": ""})
                if False
                else None
            )
            del found
            return located_span(body, texts, i, start, end, "the retrieved documents' text", query_role)
    return "the retrieved documents do not all occur verbatim in one message of the prompt the LLM received"


def located_span(
    body: dict[str, Any], texts: list[str], i: int, s: int, e: int, how: str, query_role: str
) -> Located:
    """The :class:`Located` of the context at characters ``s:e`` of message ``i`` (of the prompt,
    for a completion request) of ``body``, whose message texts are ``texts``."""
    msgs = body.get("messages")
    if isinstance(msgs, list):
        with_ = [{**m, "content": texts[j]} for j, m in enumerate(msgs)]
        without = [dict(m) for m in with_]
        without[i]["content"] = texts[i][:s] + texts[i][e:]
        lu = last_user(msgs, query_role)
        return Located(
            context=texts[i][s:e],
            query="" if lu is None else str(without[lu]["content"]).strip(),
            layout=layout_of(msgs, i, query_role),
            how=how,
            message=i,
            start=s,
            end=e,
            messages_with=with_,
            messages_without=without,
        )
    prompt = texts[0]
    without_p = prompt[:s] + prompt[e:]
    return Located(
        context=prompt[s:e],
        query=without_p.strip()[-500:],
        layout="prompt",
        how=how,
        message=None,
        start=s,
        end=e,
        prompt_with=prompt,
        prompt_without=without_p,
    )


# -- what a profile was calibrated for ---------------------------------------------------------------


def profile_layout(header: dict[str, Any]) -> str:
    """The layout a profile was calibrated with: its ``layout.context_in``, else the application
    prompt's (``calibrate --prompt``), else the template
    layout it was calibrated on (``"user"`` for chat prompts: context and query in one user turn;
    ``"prompt"`` for plain prompts)."""
    lay = header.get("layout")
    if isinstance(lay, dict) and isinstance(lay.get("context_in"), str):
        return str(lay["context_in"])
    prompt = header.get("prompt") or {}
    app = prompt.get("app")
    if isinstance(app, dict) and isinstance((app.get("fingerprint") or {}).get("layout"), str):
        return str(app["fingerprint"]["layout"])
    return "user" if prompt.get("chat") else "prompt"


class LayoutMismatch(InputError):
    """The request's context sits where the profile was not calibrated for."""


def check_layout(header: dict[str, Any], located: Located, *, profile_name: str = "the profile") -> None:
    """Refuse a located context whose layout the profile was not calibrated for.

    RePCS's threshold and the verdict model are calibrated on one layout (where the context is
    removed from); the no-context distribution of another layout is not the one they were
    fitted on, so its verdict would not carry the profile's guarantee.

    Raises:
        LayoutMismatch: naming both layouts and what to do.
    """
    want = profile_layout(header)
    if located.layout == want:
        return
    where = {
        "user": "in the last user message",
        "system": "in a system message",
        "prompt": "in a completion prompt",
    }
    have = where.get(located.layout, f"in a separate '{located.layout.split(':', 1)[-1]}' message")
    raise LayoutMismatch(
        f"{profile_name} was calibrated with the context {where.get(want, want)} (layout {want!r}), but this "
        f"request has it {have} (layout {located.layout!r}, found by {located.how}); its verdict would not "
        f"carry the profile's guarantee. Calibrate a profile on this layout, or start the proxy with "
        f"--accept-layout {located.layout} to audit it anyway (recorded as uncalibrated)",
        field="mnemoscope.context",
    )
