"""A request against the application prompt a profile was calibrated on (``calibrate --prompt``).

With such a profile the proxy finds the retrieved context from the prompt's ``{context}``
placeholder: the application sends its requests unchanged, with no ``mnemoscope`` object. Each
request is compared with the calibrated prompt (:func:`match_prompt`):

* **the same prompt** (every message outside the placeholders as calibrated, no extra turns):
  ``prompt.status = "calibrated"``, audited under the profile's guarantee;
* **a different system prompt, instructions, few-shot turns or extra history**, with the context
  still where the prompt puts it: between the same delimiters (the placeholder's header line,
  e.g. ``Documents:``, and the line after it; :func:`span_by_delimiters`), or found by the
  default rules of :mod:`.layout` in the same layout: ``prompt.status = "different"`` with what
  differs; audited and marked "not the calibrated prompt" (the guarantee was certified on
  another prompt). Delimiters that changed too leave the context unlocated: ``undetermined``,
  with the reason (where the documents begin is then anyone's guess);
* **the context in a layout the profile was never calibrated on**: refused, as without a
  calibrated prompt (:func:`~mnemoscope.audit.layout.check_layout`);
* **no context where the calibrated prompt has one** (the placeholder's place is empty): no
  context can be removed, so the audit is ``undetermined`` with that reason and the answer passes.

:func:`locate_for_profile` is the one function the proxy (and any other caller that audits an
application's raw requests) calls: the calibrated prompt when the profile has one, the layout
rules otherwise.

**The request's skeleton** (:func:`skeleton_of`, ``calibrate --prompt-from-log``): the request's
messages with the located context replaced by ``{context}`` and the question by ``{query}``,
everything else verbatim: an :class:`~mnemoscope.trace.app_prompt.AppPrompt`, the shape of a
``--prompt`` file. The proxy logs it with every audit whose context it located
(``prompt_template``), and :func:`template_groups` groups a log's skeletons by fingerprint. The
context is where the proxy located it (the same :class:`~mnemoscope.audit.layout.Located`); the
question sits in the last ``query_role`` message, and within it:

* when the profile's calibrated prompt fits that message (its text around ``{query}`` is the
  same), where the calibrated prompt has ``{query}``: a request that follows the calibrated
  prompt has the calibrated prompt as its skeleton (the same fingerprint);
* else after the last ``Question:``/``Query:`` line when there is one (to a last ``Answer:``
  line), else the message's text after the context and its closing tag (or, when nothing
  follows the context, the text before it and its opening tag or ``Context:`` label), else the
  whole message; the whitespace around it stays in the skeleton.

Earlier turns (conversation history) stay verbatim, so requests with a history have their own
skeletons (and fingerprints); a request whose fixed text holds a literal ``{context}`` or
``{query}``, or a role a prompt file cannot have, has none.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mnemoscope.audit.layout import Located, locate_context, located_span, message_text
from mnemoscope.errors import InputError
from mnemoscope.trace.app_prompt import PLACEHOLDER, AppPrompt, last_user, parse_app_prompt

__all__ = [
    "NOT_CALIBRATED_NOTE",
    "NO_CONTEXT",
    "TemplateGroup",
    "app_prompt_of",
    "locate_for_profile",
    "match_prompt",
    "skeleton_of",
    "span_by_delimiters",
    "template_groups",
]

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


#: fewest non-space characters a delimiter line needs before the context is located by it alone
MIN_DELIMITER = 3


def _line_starts(text: str, needle: str) -> list[int]:
    """Where ``needle`` occurs in ``text`` at the start of a line."""
    return [
        m.start()
        for m in re.finditer(re.escape(needle), text)
        if m.start() == 0 or text[m.start() - 1] == "\n"
    ]


def span_by_delimiters(template: str, text: str) -> tuple[int, int] | None:
    """Where the context sits in ``text`` by the delimiters right around ``{context}`` in the
    calibrated message ``template``, the rest of the message allowed to differ.

    The delimiters are the placeholder's own line before it (its header, e.g. ``"Documents:\n"``,
    found at the start of a line, its first occurrence) and the line after it (e.g.
    ``"\n</docs>"``, its last occurrence after the header): an application that rewrote its
    instructions but kept how it marks its documents. ``None`` when the message also holds
    ``{query}``, when a delimiter has fewer than :data:`MIN_DELIMITER` non-space characters (too
    weak to trust), or when either is missing from ``text``. An empty side of the template (the
    context at the start or the end of its message) must be empty in ``text`` too.
    """
    parts = PLACEHOLDER.split(template)  # [before, name, after] for one placeholder
    if len(parts) != 3 or parts[1] != "context":
        return None
    before, after = parts[0], parts[2]
    body = before.rstrip("\n")
    pre = body.rsplit("\n", 1)[-1] + before[len(body) :]
    tail = after.lstrip("\n")
    post = after[: len(after) - len(tail)] + tail.split("\n", 1)[0]
    if before.strip():
        if len(pre.strip()) < MIN_DELIMITER:
            return None
        starts = _line_starts(text, pre)
        if not starts:
            return None
        start = starts[0] + len(pre)
    elif text.startswith(before):
        start = len(before)
    else:
        return None
    if after.strip():
        if len(post.strip()) < MIN_DELIMITER:
            return None
        end = text.rfind(post)
        if end < start or not (end + len(post) == len(text) or text[end + len(post)] == "\n"):
            return None
    elif text.endswith(after) and len(text) - len(after) >= start:
        end = len(text) - len(after)
    else:
        return None
    return start, end


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
    differs: list[str] = []
    m_ctx = _pattern(tpl[ci][1]).fullmatch(texts[i])
    if m_ctx is not None:
        span = (m_ctx.start("context"), m_ctx.end("context"))
    else:
        # another system prompt or instructions around the same delimiters ("Documents:\n"):
        # the context is still where those delimiters put it; audited as "different"
        found_span = span_by_delimiters(tpl[ci][1], texts[i])
        if found_span is None:
            return "the text around {context} differs from the calibrated prompt's"
        span = found_span
        differs.append(f"message {i} ({tpl[ci][0]}): the text outside the context's delimiters")
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
    if not texts[i][span[0] : span[1]].strip():
        return NO_CONTEXT
    loc = located_span(body, texts, i, span[0], span[1], "the calibrated prompt's {context}", query_role)
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


# -- the request's skeleton (calibrate --prompt-from-log) -----------------------------------------------

_Q_LABEL = re.compile(r"^[ \t]*(?:question|query)[ \t]*:[ \t]*", re.IGNORECASE | re.MULTILINE)
_A_CUE = re.compile(r"^[ \t]*(?:answer|response)[ \t]*:[ \t]*\Z", re.IGNORECASE | re.MULTILINE)
_CLOSE = re.compile(r"(?:\s*</[^<>\s]+\s*>)+")
_OPEN = re.compile(
    r"(?:(?:<[A-Za-z_][^<>]*>|^[ \t]*(?:context|documents?|sources|reference information|retrieved context)"
    r"[ \t]*:)\s*)+\Z",
    re.IGNORECASE | re.MULTILINE,
)


def _stripped(text: str, s: int, e: int) -> tuple[int, int]:
    """``text[s:e]`` without the whitespace around it."""
    while s < e and text[s].isspace():
        s += 1
    while e > s and text[e - 1].isspace():
        e -= 1
    return s, e


def _trimmed(text: str, s: int, e: int) -> tuple[int, int]:
    """``text[s:e]`` without a last ``Answer:`` line and the whitespace around it."""
    cue = _A_CUE.search(text, s, e)
    return _stripped(text, s, cue.start() if cue is not None else e)


def _question_in(text: str, lo: int, hi: int) -> tuple[int, int]:
    """The question in ``text[lo:hi]``: after its last ``Question:`` line, else all of it (trimmed)."""
    labels = list(_Q_LABEL.finditer(text, lo, hi))
    return _trimmed(text, labels[-1].end() if labels else lo, hi)


def _question_heuristic(text: str, ctx: tuple[int, int] | None) -> tuple[int, int]:
    """The question's span in the query message's ``text`` (the module doc's rules); ``ctx`` is
    the context's span when it is in the same message."""
    if ctx is None:
        return _question_in(text, 0, len(text))
    cs, ce = ctx
    close = _CLOSE.match(text, ce)
    s, e = _question_in(text, close.end() if close else ce, len(text))
    if e > s:
        return s, e
    opening = _OPEN.search(text, 0, cs)
    return _question_in(text, 0, opening.start() if opening else cs)


def _pattern_question(
    app: AppPrompt, roles: list[Any], texts: list[str], ci: int, cs: int, ce: int
) -> tuple[int, int, int] | None:
    """``(message, start, end)`` of the question where the calibrated prompt ``app`` has ``{query}``,
    when the request's query message follows it (and the context is where the prompt has it)."""
    if app.messages is None:
        m = _pattern(app.prompt or "").fullmatch(texts[0])
        return (0, *m.span("query")) if m is not None and m.span("context") == (cs, ce) else None
    tq = app.query_message
    assert tq is not None
    rq = len(texts) - (len(app.messages) - tq)
    if rq < 0 or roles[rq] != app.messages[tq][0]:
        return None
    m = _pattern(app.messages[tq][1]).fullmatch(texts[rq])
    if m is None:
        return None
    if (app.context_message == tq) != (ci == rq):
        return None
    if ci == rq and m.span("context") != (cs, ce):
        return None
    return (rq, *m.span("query"))


def _fill(text: str, spans: list[tuple[int, int, str]]) -> str:
    for s, e, name in sorted(spans, reverse=True):
        text = text[:s] + "{" + name + "}" + text[e:]
    return text


def skeleton_of(
    located: Located, app: AppPrompt | None = None, *, query_role: str = "user"
) -> AppPrompt | str:
    """The request's prompt with ``{context}`` where ``located`` found the context and ``{query}``
    where the question is (module doc), or the reason it has none.

    Args:
        located: where the proxy located the context (:func:`locate_for_profile`).
        app: the profile's calibrated prompt, if any: a request that follows it gets it back.
        query_role: the role of the query's message (the proxy's ``--query-role``).

    Filled with the located context and the question, the skeleton renders the request's
    messages (their roles and text contents) again.
    """
    if located.messages_with is None:
        texts = [str(located.prompt_with)]
        roles: list[Any] = [None]
        qi: int | None = 0
        ci = 0
    else:
        texts = [message_text(m.get("content")) for m in located.messages_with]
        roles = [m.get("role") for m in located.messages_with]
        qi = last_user(located.messages_with, query_role)
        ci = int(located.message if located.message is not None else 0)
    cs, ce = located.start, located.end
    same_kind = app is not None and app.is_chat == (located.messages_with is not None)
    hit = _pattern_question(app, roles, texts, ci, cs, ce) if app is not None and same_kind else None
    if hit is not None:
        qi, qs, qe = hit
    elif qi is None:
        return f"no '{query_role}' message holds a question"
    else:
        # the whitespace around the located context is the application's layout, not the context
        cs, ce = _stripped(texts[ci], cs, ce)
        if ce <= cs:
            return "the located context is empty"
        qs, qe = _question_heuristic(texts[qi], (cs, ce) if qi == ci else None)
    if qe <= qs:
        return "no question besides the context in the query's message"
    out = list(texts)
    if qi == ci:
        out[ci] = _fill(texts[ci], [(cs, ce, "context"), (qs, qe, "query")])
    else:
        out[ci] = _fill(texts[ci], [(cs, ce, "context")])
        out[qi] = _fill(texts[qi], [(qs, qe, "query")])
    obj: Any = (
        {"prompt": out[0]}
        if located.messages_with is None
        else [{"role": r, "content": t} for r, t in zip(roles, out, strict=True)]
    )
    try:
        return parse_app_prompt(obj, source=None)
    except InputError as e:
        return f"the request's prompt cannot be a template: {e}"


@dataclass(frozen=True)
class TemplateGroup:
    """Logged requests that share one skeleton (:func:`template_groups`).

    Attributes:
        app: the skeleton (an application prompt).
        count: requests in the sample with it.
        share: ``count`` over the sample's requests with a skeleton.
        statuses: their audit statuses (audited, refused, failed) and counts.
        newest, oldest: their ``created_at`` (epoch seconds), when logged.
    """

    app: AppPrompt
    count: int
    share: float
    statuses: dict[str, int]
    newest: float | None = None
    oldest: float | None = None

    @property
    def sha256(self) -> str:
        return str(self.app.fingerprint()["sha256"])

    def system_text(self) -> str:
        """The first system (or developer) message's text, or the completion prompt's."""
        if self.app.messages is None:
            return str(self.app.prompt)
        return next((c for r, c in self.app.messages if r in ("system", "developer")), "")


def template_groups(records: Iterable[dict[str, Any]]) -> tuple[list[TemplateGroup], int]:
    """The skeletons of logged proxy records (their ``prompt_template``) grouped by fingerprint,
    the most common first (ties: the most recent first), and how many records carried one that
    is not a valid application prompt or whose fingerprint does not match its text (left out).
    Records without ``prompt_template`` are ignored."""
    apps: dict[str, AppPrompt] = {}
    counts: dict[str, int] = {}
    statuses: dict[str, dict[str, int]] = {}
    times: dict[str, list[float]] = {}
    bad = 0
    for rec in records:
        tpl = rec.get("prompt_template")
        if not isinstance(tpl, dict):
            continue
        try:
            app = AppPrompt.from_dict(tpl)
        except (InputError, KeyError, TypeError):
            bad += 1
            continue
        sha = str(app.fingerprint()["sha256"])
        if (tpl.get("fingerprint") or {}).get("sha256") != sha:
            bad += 1
            continue
        apps.setdefault(sha, app)
        counts[sha] = counts.get(sha, 0) + 1
        st = statuses.setdefault(sha, {})
        st[str(rec.get("status"))] = st.get(str(rec.get("status")), 0) + 1
        if isinstance(rec.get("created_at"), (int, float)):
            times.setdefault(sha, []).append(float(rec["created_at"]))
    n = sum(counts.values())
    groups = [
        TemplateGroup(
            apps[sha],
            counts[sha],
            counts[sha] / n,
            dict(sorted(statuses[sha].items())),
            max(times[sha]) if times.get(sha) else None,
            min(times[sha]) if times.get(sha) else None,
        )
        for sha in apps
    ]
    groups.sort(key=lambda g: (-g.count, -(g.newest or 0.0)))
    return groups, bad
