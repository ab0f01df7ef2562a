"""Prompt templates as data.

A prompt is built in up to three layers:

1. a :class:`TaskTemplate` turns the user's query into the question text
   (CRM appendix T: continuation, summarization, QA; ``"plain"`` keeps the query);
2. a :class:`PromptTemplate` places context and question (CRM appendix D.1, templates A-D);
3. optionally the model's chat template wraps the result as one user turn.

The no-context prompt of a pair is the *same* template with an empty context string,
as in the CRM paper (appendix P/T): only the context differs between the two paths.
The separators the paper typesets as "\\ \\" are blank lines (``"\\n\\n"``), as in its
appendix T template ``"Context: {context}\\n\\nQuestion: ...\\n\\nAnswer:"``.

**Stop sequences** (``PromptBuilder.stop``) end an answer where an application would: a model
without a chat template (a base model) does not stop after its answer, it keeps writing the
next "Question:" or "Context:" block. :data:`DEFAULT_STOPS` are what an app around these
templates would set; :func:`default_stops` gives them to a template-less audit profile (a chat
model stops at its end-of-turn token and gets none). The trace cuts the generated answer at a
token boundary before the first stop (:func:`mnemoscope.trace.pair.cut_at_stop`).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any

from mnemoscope.errors import InputError
from mnemoscope.trace.app_prompt import AppPrompt

__all__ = [
    "DEFAULT_STOPS",
    "PROMPT_TEMPLATES",
    "TASK_TEMPLATES",
    "PromptBuilder",
    "PromptTemplate",
    "TaskTemplate",
    "default_stops",
    "get_template",
    "parse_stop",
]


_SLOT = re.compile(r"\{(context|query)\}")

#: where an app ends a template-less answer: a blank line, or a new line that opens the next block
DEFAULT_STOPS: tuple[str, ...] = ("\n\n", "\nQuestion:", "\nContext:", "\nQ:", "\nA:")


def default_stops(chat: bool) -> tuple[str, ...]:
    """The stop sequences of a prompt layout when none are given: none with a chat template (the
    model ends its turn), :data:`DEFAULT_STOPS` without one."""
    return () if chat else DEFAULT_STOPS


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}


def parse_stop(text: str) -> str:
    """A stop sequence as typed on a command line: ``\\n``, ``\\t``, ``\\r`` and ``\\\\`` are
    unescaped (a shell passes ``'\\n\\n'`` as four characters); anything else is kept as given.

    Raises:
        InputError: an empty stop sequence.

    Example:
        >>> parse_stop("\\n\\n"), parse_stop("\\nQuestion:"), parse_stop("END")
        ('\\n\\n', '\\nQuestion:', 'END')
    """
    out = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and text[i + 1] in _ESCAPES:
            out.append(_ESCAPES[text[i + 1]])
            i += 2
            continue
        out.append(ch)
        i += 1
    stop = "".join(out)
    if not stop:
        raise InputError("a stop sequence must not be empty", field="stop")
    return stop


@dataclass(frozen=True)
class PromptTemplate:
    """An outer template with ``{context}`` and ``{query}`` slots."""

    name: str
    text: str
    description: str = ""

    def render(self, context: str, query: str) -> str:
        # One pass over the template's own slots: user text may contain braces or "{query}".
        values = {"context": context, "query": query}
        return _SLOT.sub(lambda m: values[m.group(1)], self.text)


@dataclass(frozen=True)
class TaskTemplate:
    """Turns a query into the question text; ``max_new_tokens`` is the paper's generation length."""

    name: str
    question: str
    max_new_tokens: int
    uses_query: bool = True

    def render(self, query: str) -> str:
        return self.question.replace("{query}", query)


PROMPT_TEMPLATES: dict[str, PromptTemplate] = {
    "A": PromptTemplate("A", "Context: {context}\n\nQuestion: {query}\n\nAnswer:", "Standard (CRM D.1)"),
    "B": PromptTemplate(
        "B",
        "Based on the following document, answer the question.\n\nDocument: {context}\n\nQuestion: {query}\n\nAnswer:",
        "Document (CRM D.1)",
    ),
    "C": PromptTemplate(
        "C",
        "Reference information: {context}\n\nUsing this reference, answer: {query}\n\nAnswer:",
        "Reference (CRM D.1)",
    ),
    "D": PromptTemplate(
        "D",
        "Read the text below and answer the question.\n\nText: {context}\n\nQuestion: {query}\n\nAnswer:",
        "Instruction (CRM D.1)",
    ),
}
_ALIASES = {"standard": "A", "document": "B", "reference": "C", "instruction": "D"}

TASK_TEMPLATES: dict[str, TaskTemplate] = {
    "plain": TaskTemplate("plain", "{query}", 32),
    "continuation": TaskTemplate("continuation", "Continue the following passage: {query}", 32),
    "summarization": TaskTemplate(
        "summarization", "Summarize the above text in one sentence.", 64, uses_query=False
    ),
    "qa": TaskTemplate(
        "qa",
        "According to the above passage, what specific fact or event is described?",
        64,
        uses_query=False,
    ),
}


def _lookup(table: dict[str, Any], name: str, what: str) -> Any:
    if name in table:
        return table[name]
    close = difflib.get_close_matches(name, list(table), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise InputError(f"unknown {what} '{name}' (known: {', '.join(table)}){hint}")


def get_template(name: str) -> PromptTemplate:
    """A template by name (``A``-``D`` or ``standard``/``document``/``reference``/``instruction``)."""
    return _lookup(
        PROMPT_TEMPLATES, _ALIASES.get(name.lower(), name.upper() if len(name) == 1 else name), "template"
    )


@dataclass(frozen=True)
class PromptBuilder:
    """Builds with-context and no-context prompts from one template.

    ``app``: the application's own prompt (:class:`~mnemoscope.trace.app_prompt.AppPrompt`,
    ``calibrate --prompt FILE``): when set, it replaces the template, the task and the system
    prompt; its messages are wrapped by the chat template (``chat`` is then true), a completion
    prompt is used as it is.

    ``stop``: stop sequences that end a generated answer under this layout (module doc; empty =
    the answer ends at EOS or after T tokens). They change no prompt: ``to_dict`` (the prompt
    settings a profile records) leaves them out, :class:`~mnemoscope.trace.pair.PairConfig`'s
    settings carry them.

    Example:
        >>> b = PromptBuilder(template="A")
        >>> b.render("Paris is in France.", "Where is Paris?")
        'Context: Paris is in France.\\n\\nQuestion: Where is Paris?\\n\\nAnswer:'
        >>> b.render("", "Where is Paris?")
        'Context: \\n\\nQuestion: Where is Paris?\\n\\nAnswer:'
    """

    template: str = "A"
    task: str = "plain"
    chat: bool = False
    system_prompt: str | None = None
    stop: tuple[str, ...] = ()
    app: AppPrompt | None = None
    _resolved: tuple[PromptTemplate, TaskTemplate] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        stop = tuple(self.stop)
        if any(not isinstance(x, str) or not x for x in stop):
            raise InputError(f"stop sequences must be non-empty strings, got {list(stop)!r}", field="stop")
        object.__setattr__(self, "stop", stop)
        if self.app is not None:
            object.__setattr__(self, "chat", self.app.is_chat)
        object.__setattr__(
            self, "_resolved", (get_template(self.template), _lookup(TASK_TEMPLATES, self.task, "task"))
        )

    @property
    def prompt_template(self) -> PromptTemplate:
        return self._resolved[0]

    @property
    def task_template(self) -> TaskTemplate:
        return self._resolved[1]

    def render(self, context: str, query: str) -> str:
        """The prompt text before any chat template (with an application prompt: the text of its
        message holding the query, or its completion prompt)."""
        if self.app is not None:
            out = self.app.render(context, query)
            if isinstance(out, str):
                return out
            qi = self.app.query_message
            assert qi is not None
            return out[qi]["content"]
        return self.prompt_template.render(context, self.task_template.render(query))

    def messages(self, context: str, query: str) -> list[dict[str, str]]:
        """The chat messages a chat template wraps: the application's, or the optional system prompt
        and one user turn with the rendered template."""
        if self.app is not None:
            out = self.app.render(context, query)
            if isinstance(out, str):
                raise InputError("this application prompt is a completion prompt, not chat messages")
            return out
        messages = []
        if self.system_prompt is not None:
            messages.append({"role": "system", "content": self.system_prompt})
        messages.append({"role": "user", "content": self.render(context, query)})
        return messages

    def build(self, context: str, query: str, tokenizer: Any = None) -> str:
        """The final prompt text; with ``chat=True`` wrapped by the tokenizer's chat template."""
        if not self.chat:
            return self.render(context, query)
        if tokenizer is None or not getattr(tokenizer, "chat_template", None):
            raise InputError("chat=True but the model's tokenizer has no chat template")
        return str(
            tokenizer.apply_chat_template(
                self.messages(context, query), tokenize=False, add_generation_prompt=True
            )
        )

    def pair(self, context: str, query: str, tokenizer: Any = None) -> tuple[str, str]:
        """(with-context prompt, no-context prompt): same template, the second with an empty context."""
        return self.build(context, query, tokenizer), self.build("", query, tokenizer)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "template": self.template,
            "task": self.task,
            "chat": self.chat,
            "system_prompt": self.system_prompt,
        }
        if self.app is not None:  # only then: older profiles' prompt blocks hash as before
            out["app"] = self.app.to_dict()
        return out
