"""An application's own prompt, with a ``{context}`` and a ``{query}`` placeholder.

``mnemoscope calibrate --prompt FILE`` traces the calibration records in the prompt the
application actually sends (its system prompt, instructions, few-shot turns, and the context
wherever it puts it), so that the profile's guarantee is certified on that prompt rather than on
the project's template. FILE is JSON, one of:

* a list of chat messages ``[{"role": ..., "content": ...}, ...]`` (or ``{"messages": [...]}``);
* ``{"prompt": "..."}``: a completion prompt.

``{context}`` and ``{query}`` must each occur exactly once in the whole prompt (in one message or
two). No other brace is special: ``{"a": 1}`` in an instruction stays as it is. The no-context
prompt is the same messages with only the context removed (``{context}`` replaced by the empty
string; a message that held only the context stays, empty), as the proxy and the integrations
remove a located context.

The prompt's *fingerprint* is what the profile records and the proxy compares requests with: the
roles and the text outside the placeholders (its SHA-256), and the *layout*: where the context
sits, in the vocabulary of :mod:`mnemoscope.audit.layout` (``"user"``: the last user message,
``"system"``, ``"message:<role>"``, ``"prompt"``).

Example:
    >>> p = parse_app_prompt([{"role": "system", "content": "Answer from the documents.\\n{context}"},
    ...                       {"role": "user", "content": "{query}"}], source="app.json")
    >>> p.layout, p.render("Paris is in France.", "Where is Paris?")[0]["content"]
    ('system', 'Answer from the documents.\\nParis is in France.')
    >>> p.render("", "Where is Paris?")[0]["content"]
    'Answer from the documents.\\n'
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mnemoscope.errors import InputError

__all__ = ["PLACEHOLDER", "AppPrompt", "last_user", "layout_of", "load_app_prompt", "parse_app_prompt"]

#: the two placeholders (nothing else in braces is special)
PLACEHOLDER = re.compile(r"\{(context|query)\}")
_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def last_user(messages: Sequence[dict[str, Any]], query_role: str = "user") -> int | None:
    """The index of the last message of ``query_role`` (``None`` when there is none)."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == query_role:
            return i
    return None


def layout_of(messages: Sequence[dict[str, Any]], i: int, query_role: str = "user") -> str:
    """Where message ``i`` sits: ``"system"`` (a system or developer message), ``"user"`` (the last
    message of ``query_role``), else ``"message:<role>"`` (``"message:user-history"`` for an
    earlier user turn)."""
    role = str(messages[i].get("role", ""))
    if role in ("system", "developer"):
        return "system"
    if i == last_user(messages, query_role):
        return "user"
    return f"message:{role}" if role != query_role else f"message:{role}-history"


def _sub(text: str, context: str, query: str) -> str:
    """One pass: a context that itself contains ``{query}`` is not substituted again."""
    return PLACEHOLDER.sub(lambda m: context if m.group(1) == "context" else query, text)


@dataclass(frozen=True)
class AppPrompt:
    """An application's prompt with its two placeholders (module doc).

    Attributes:
        messages: ``(role, content)`` pairs of a chat prompt (``None`` for a completion prompt).
        prompt: a completion prompt (``None`` for chat messages).
        source: where it was read from (a file name), for messages only.
    """

    messages: tuple[tuple[str, str], ...] | None = None
    prompt: str | None = None
    source: str | None = None

    @property
    def is_chat(self) -> bool:
        return self.messages is not None

    def _texts(self) -> list[str]:
        return [c for _, c in self.messages] if self.messages is not None else [str(self.prompt)]

    def _where(self, name: str) -> int:
        return next(i for i, t in enumerate(self._texts()) if "{" + name + "}" in t)

    @property
    def context_message(self) -> int | None:
        """The index of the message holding ``{context}`` (``None`` for a completion prompt)."""
        return self._where("context") if self.is_chat else None

    @property
    def query_message(self) -> int | None:
        return self._where("query") if self.is_chat else None

    @property
    def layout(self) -> str:
        """Where the context sits (module doc)."""
        if self.messages is None:
            return "prompt"
        msgs = [{"role": r} for r, _ in self.messages]
        i = self.context_message
        assert i is not None
        return layout_of(msgs, i)

    def render(self, context: str, query: str) -> list[dict[str, str]] | str:
        """The messages (or the completion prompt) with both placeholders filled."""
        if self.messages is None:
            return _sub(str(self.prompt), context, query)
        return [{"role": r, "content": _sub(c, context, query)} for r, c in self.messages]

    def fixed_text(self) -> str:
        """The text outside the placeholders, with the roles: what the fingerprint hashes."""
        if self.messages is None:
            return PLACEHOLDER.sub(lambda m: "\x00" + m.group(1) + "\x00", str(self.prompt))
        return "\x01".join(
            r + "\x02" + PLACEHOLDER.sub(lambda m: "\x00" + m.group(1) + "\x00", c) for r, c in self.messages
        )

    def fingerprint(self) -> dict[str, Any]:
        """The prompt's identity as a profile records it (no context, no query)."""
        return {
            "sha256": hashlib.sha256(self.fixed_text().encode("utf-8")).hexdigest(),
            "layout": self.layout,
            "roles": [r for r, _ in self.messages] if self.messages is not None else None,
            "context_message": self.context_message,
            "query_message": self.query_message,
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: the prompt itself (its fixed text is the application's, no user data) and its
        fingerprint."""
        out: dict[str, Any] = {"fingerprint": self.fingerprint(), "source": self.source}
        if self.messages is not None:
            out["messages"] = [{"role": r, "content": c} for r, c in self.messages]
        else:
            out["prompt"] = self.prompt
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AppPrompt:
        obj: Any = d["messages"] if "messages" in d else {"prompt": d.get("prompt")}
        return parse_app_prompt(obj, source=d.get("source"))


def parse_app_prompt(obj: Any, *, source: str | None = None) -> AppPrompt:
    """Validate a parsed ``--prompt`` file (module doc).

    Raises:
        InputError: naming ``source`` and what is wrong: not a list of messages nor a prompt, a
            message without a role or a string content, a placeholder missing or given twice.
    """
    where = source or "the prompt"
    if isinstance(obj, dict) and "messages" in obj:
        obj = obj["messages"]
    if isinstance(obj, dict) and "prompt" in obj:
        if not isinstance(obj["prompt"], str):
            raise InputError(f"{where}: 'prompt' must be a string", field="prompt")
        p = AppPrompt(prompt=obj["prompt"], source=source)
    elif isinstance(obj, list):
        if not obj:
            raise InputError(f"{where}: the message list is empty", field="prompt")
        msgs = []
        for i, m in enumerate(obj):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or m["role"] not in _ROLES:
                raise InputError(
                    f"{where}: message {i} needs a 'role' (one of {', '.join(sorted(_ROLES))})",
                    field="prompt",
                )
            if not isinstance(m.get("content"), str):
                raise InputError(
                    f"{where}: message {i} ({m['role']}) needs a string 'content'", field="prompt"
                )
            msgs.append((m["role"], m["content"]))
        p = AppPrompt(messages=tuple(msgs), source=source)
    else:
        raise InputError(
            f'{where}: expected a JSON list of chat messages, {{"messages": [...]}} or {{"prompt": "..."}}',
            field="prompt",
        )
    found = [m.group(1) for t in p._texts() for m in PLACEHOLDER.finditer(t)]
    for name in ("context", "query"):
        n = found.count(name)
        if n != 1:
            what = "has no" if n == 0 else f"has {n} times the"
            raise InputError(
                f"{where} {what} {{{name}}} placeholder: it needs exactly one {{context}} and one {{query}} "
                "(where the application puts the retrieved documents and the user's question)",
                field="prompt",
            )
    return p


def load_app_prompt(path: str | Path) -> AppPrompt:
    """Read and validate a ``--prompt`` file.

    Raises:
        InputError: the file cannot be read, is not valid JSON (with the line and column), or
            :func:`parse_app_prompt` refuses it.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"--prompt {p}: cannot read it ({e.strerror or e})", field="prompt") from e
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(
            f"--prompt {p}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})", field="prompt"
        ) from e
    return parse_app_prompt(obj, source=p.name)
