"""A request against the application prompt a profile was calibrated on (``calibrate --prompt``).

With such a profile the proxy finds the retrieved context from the prompt's ``{context}``
placeholder: the application sends its requests unchanged, with no ``mnemoscope`` object. Each
request is compared with the calibrated prompt (:func:`match_prompt`):

* **the same prompt** (every message outside the placeholders as calibrated, no extra turns):
  ``prompt.status = "calibrated"``, audited under the profile's guarantee;
* **a different system prompt, instructions, few-shot turns or extra history**, with the context
  still where the prompt puts it (or found by the default rules of :mod:`.layout` in the same
  layout): ``prompt.status = "different"`` with what differs; audited and marked "not the
  calibrated prompt" (the guarantee was certified on another prompt);
* **the context in a layout the profile was never calibrated on**: refused, as without a
  calibrated prompt (:func:`~mnemoscope.audit.layout.check_layout`);
* **no context where the calibrated prompt has one** (the placeholder's place is empty): no
  context can be removed, so the audit is ``undetermined`` with that reason and the answer passes.

:func:`locate_for_profile` is the one function the proxy (and any other caller that audits an
application's raw requests) calls: the calibrated prompt when the profile has one, the layout
rules otherwise.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from mnemoscope.audit.layout import Located, locate_context, located_span, message_text
from mnemoscope.trace.app_prompt import PLACEHOLDER, AppPrompt

__all__ = ["NOT_CALIBRATED_NOTE", "NO_CONTEXT", "app_prompt_of", "locate_for_profile", "match_prompt"]

#: the reason given when the placeholder's place in a matching request is empty
NO_CONTEXT = (
    "the request carries no context where the calibrated prompt has one (its {context} place is empty)"
)
NOT_CALIBRATED_NOTE = "not the calibrated prompt"


def app_prompt_of(header: dict[str, Any]) -> AppPrompt | None:
    """The application prompt a profile header was calibrated on (``None``: the template)."""
    app = (header.get("prompt") or {}).get("app")
    return AppPrompt.from_dict(app) if isinstance(app, dict) else None


def _pattern(template: str) -> re.Pattern[str]:
    """A message's fixed text with named groups at its placeholders: the context greedy (a context
    may contain the separator that follows it; the question rarely does), the query lazy."""
    out, last = [], 0
    for m in PLACEHOLDER.finditer(template):
        out.append(re.escape(template[last : m.start()]))
        out.append("(?P<context>.*)" if m.group(1) == "context" else "(?P<query>.*?)")
        last = m.end()
    out.append(re.escape(template[last:]))
    return re.compile("".join(out), re.DOTALL)


def match_prompt(body: dict[str, Any], app: AppPrompt, *, query_role: str = "user") -> Located | str:
    """Locate the context of ``body`` by the calibrated prompt's placeholder.

    Returns:
        :class:`~mnemoscope.audit.layout.Located` with ``prompt`` = ``{"status": "calibrated" |
        "different", "differs": [...], "sha256": ...}``, :data:`NO_CONTEXT` when the request
        follows the prompt but its context is empty, or another reason (a string) when the
        request does not follow the prompt where the context sits (the caller then tries the
        layout rules).
    """
    fp = app.fingerprint()
    record: dict[str, Any] = {"sha256": fp["sha256"]}
    if app.messages is None:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            return "the calibrated prompt is a completion prompt; this request has none"
        m = _pattern(app.prompt or "").fullmatch(prompt)
        if m is None:
            return "the prompt's text around {context} differs from the calibrated prompt's"
        if not m.group("context").strip():
            return NO_CONTEXT
        loc = located_span({"prompt": prompt}, [prompt], 0, m.start("context"), m.end("context"),
                           "the calibrated prompt's {context}", query_role)  # fmt: skip
        return dataclasses.replace(loc, prompt={**record, "status": "calibrated", "differs": []})

    msgs = body.get("messages")
    if not isinstance(msgs, list) or not all(isinstance(x, dict) for x in msgs):
        return "the calibrated prompt is chat messages; this request has none"
    tpl = list(app.messages)
    ci, qi = app.context_message, app.query_message
    assert ci is not None and qi is not None
    # the messages before the query's (system prompt, instructions, few-shot turns) are matched
    # from the start, the query's and those after it from the end: conversation history sits
    # between them, as applications append it
    head = qi
    n_tail = len(tpl) - head
    if len(msgs) < len(tpl):
        return f"the request has {len(msgs)} messages, fewer than the calibrated prompt's {len(tpl)}"
    texts = [message_text(x.get("content")) for x in msgs]
    offset = len(msgs) - n_tail  # request index of template message `head`
    pairs = [(j, j) for j in range(head)] + [(head + k, offset + k) for k in range(n_tail)]
    wrong_roles = [(t, r) for t, r in pairs if msgs[r].get("role") != tpl[t][0]]
    if wrong_roles:
        t, r = wrong_roles[0]
        return (
            f"message {r} is '{msgs[r].get('role')}' where the calibrated prompt has '{tpl[t][0]}' "
            "(the request does not follow the calibrated prompt's turns)"
        )
    i = ci if ci < head else offset + ci - head  # the request's message holding the context
    m_ctx = _pattern(tpl[ci][1]).fullmatch(texts[i])
    if m_ctx is None:
        return "the text around {context} differs from the calibrated prompt's"
    differs: list[str] = []
    for t, r in pairs:
        if t == ci:
            continue
        if t == qi:
            if _pattern(tpl[t][1]).fullmatch(texts[r]) is None:
                differs.append(f"message {r} ({tpl[t][0]}): the text around {{query}}")
        elif texts[r] != tpl[t][1]:
            kind = "system prompt" if tpl[t][0] in ("system", "developer") else "fixed turn"
            differs.append(f"message {r} ({tpl[t][0]}): the {kind}")
    if offset > head:
        differs.append(f"{offset - head} turns of history the calibrated prompt does not have")
    if not m_ctx.group("context").strip():
        return NO_CONTEXT
    loc = located_span(body, texts, i, m_ctx.start("context"), m_ctx.end("context"),
                       "the calibrated prompt's {context}", query_role)  # fmt: skip
    status = "different" if differs else "calibrated"
    return dataclasses.replace(loc, prompt={**record, "status": status, "differs": differs})


def locate_for_profile(
    body: dict[str, Any],
    header: dict[str, Any],
    spec: Any = None,
    *,
    context_role: str | None = None,
    query_role: str = "user",
) -> Located | str:
    """Where the context of ``body`` is, for a profile (module doc): the calibrated prompt's
    placeholder when the profile has one (and the caller gave no explicit spec), else the layout
    rules (:func:`~mnemoscope.audit.layout.locate_context`). A request located by the layout rules
    under a calibrated prompt is marked ``prompt.status = "different"``.

    Raises:
        InputError: a malformed ``spec``.
    """
    app = app_prompt_of(header)
    if app is None:
        return locate_context(body, spec, context_role=context_role, query_role=query_role)
    why = ""
    if spec is None and not context_role:
        found = match_prompt(body, app, query_role=query_role)
        if not isinstance(found, str) or found == NO_CONTEXT:
            return found
        why = found
    loc = locate_context(body, spec, context_role=context_role, query_role=query_role)
    if isinstance(loc, str):
        return f"{why}; and by the layout rules: {loc}" if why else loc
    how = why or "the request named where its context is"
    return dataclasses.replace(
        loc, prompt={"sha256": app.fingerprint()["sha256"], "status": "different", "differs": [how]}
    )
