"""Reading the log-probabilities a server returns, in whichever format it uses.

One parser for every endpoint path (generation, forced positions, grammar, echo, the fingerprint,
the proxy's served log-probs): the legacy completions format and the chat-style ``content`` list
(which llama.cpp's ``llama-server`` also uses on ``/v1/completions``, with token ids).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mnemoscope.models.endpoint.transport import EndpointError

__all__ = ["ChoiceLogprobs", "choice_logprobs", "first_top_logprobs", "require_choice_logprobs"]


@dataclass(frozen=True)
class ChoiceLogprobs:
    """The per-token log-probs of one completions choice, whatever format the server used.

    ``ids`` / ``top_ids``: the token ids, when the server gives them (llama.cpp's ``llama-server``
    does in the chat-style format); ``None`` otherwise.
    """

    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    ids: list[int] | None = None
    top_ids: list[dict[int, float]] | None = None


def _top_map(entry: Any) -> dict[str, float] | None:
    if entry is None:
        return None
    if isinstance(entry, Mapping):
        return {str(a): float(b) for a, b in entry.items()}
    if isinstance(entry, list):  # [{"token": ..., "logprob": ...}, ...]
        out: dict[str, float] = {}
        for e in entry:
            out.setdefault(str(e["token"]), float(e["logprob"]))
        return out
    raise ValueError("a top_logprobs entry is not a token -> logprob map")


def choice_logprobs(choice: Mapping[str, Any]) -> ChoiceLogprobs | None:
    """Parse a completions (or chat) choice's ``logprobs`` block, in either format servers use.

    * the legacy completions format (OpenAI, llama-cpp-python, vLLM): ``tokens``,
      ``token_logprobs`` and ``top_logprobs`` (a ``{token: logprob}`` map, or a list of
      ``{token, logprob}``, per position);
    * the chat-style format (OpenAI chat; llama.cpp's ``llama-server`` on ``/v1/completions``
      too): ``content`` = a list of ``{token, logprob, id?, top_logprobs: [{token, logprob,
      id?}, ...]}``.

    Within one position, a spelling that several alternatives share keeps its most probable
    (first listed) log-prob. The one parser every endpoint path uses (generation, forced
    positions, grammar, echo, the fingerprint, the proxy's served log-probs).

    Returns:
        ``None`` when the choice has no log-probs block in either format.

    Raises:
        ValueError: a block in one of the formats whose lists disagree in length or whose
            entries are malformed.

    Example:
        >>> choice_logprobs({"logprobs": {"tokens": [" Paris"], "token_logprobs": [-0.1],
        ...     "top_logprobs": [{" Paris": -0.1, " London": -4.3}]}}).top_logprobs
        [{' Paris': -0.1, ' London': -4.3}]
        >>> lp = choice_logprobs({"logprobs": {"content": [{"token": " Paris", "logprob": -0.1, "id": 7,
        ...     "top_logprobs": [{"token": " Paris", "logprob": -0.1, "id": 7}]}]}})
        >>> lp.tokens, lp.ids, lp.top_ids
        ([' Paris'], [7], [{7: -0.1}])
        >>> choice_logprobs({"text": "Paris"}) is None
        True
    """
    lp = choice.get("logprobs")
    if not isinstance(lp, Mapping):
        return None
    if isinstance(lp.get("tokens"), list):
        toks = [str(t) for t in lp["tokens"]]
        own = lp.get("token_logprobs") or [None] * len(toks)
        tops = lp.get("top_logprobs") or [None] * len(toks)
        if not (len(toks) == len(own) == len(tops)):
            raise ValueError(
                "the logprobs lists (tokens, token_logprobs, top_logprobs) have different lengths"
            )
        return ChoiceLogprobs(
            toks, [None if v is None else float(v) for v in own], [_top_map(t) for t in tops]
        )
    content = lp.get("content")
    if isinstance(content, list):
        toks, own_c, tops_c = [], [], []
        ids: list[int] | None = []
        top_ids: list[dict[int, float]] | None = []
        for e in content:
            if not isinstance(e, Mapping) or "token" not in e:
                raise ValueError("a logprobs.content entry has no token")
            toks.append(str(e["token"]))
            v = e.get("logprob")
            own_c.append(None if v is None else float(v))
            alts = e.get("top_logprobs") or []
            tops_c.append(_top_map(list(alts)))
            if ids is not None and top_ids is not None and "id" in e and all("id" in x for x in alts):
                ids.append(int(e["id"]))
                top_ids.append({int(x["id"]): float(x["logprob"]) for x in alts})
            else:
                ids, top_ids = None, None
        return ChoiceLogprobs(toks, own_c, tops_c, ids, top_ids)
    return None


def require_choice_logprobs(
    choice: Mapping[str, Any],
    *,
    endpoint: str | None,
    what: str,
    missing: type[EndpointError] = EndpointError,
) -> ChoiceLogprobs:
    """:func:`choice_logprobs`, or an error naming ``what``: :class:`EndpointError` for a
    malformed block, ``missing`` (default :class:`EndpointError`) when the server sent none."""
    try:
        lp = choice_logprobs(choice)
    except (ValueError, KeyError, TypeError) as e:
        raise EndpointError(f"the {what}'s logprobs are malformed: {e}", endpoint=endpoint) from e
    if lp is None:
        raise missing(f"the {what} has no logprobs (the server ignores `logprobs`?)", endpoint=endpoint)
    return lp


def first_top_logprobs(choice: Mapping[str, Any]) -> dict[str, float]:
    """The first position's top-k log-probs of a completions choice, ``{token: logprob}``, in either
    format (:func:`choice_logprobs`); ``{}`` when there is none or the block is malformed.

    Example:
        >>> first_top_logprobs({"logprobs": {"top_logprobs": [{" Paris": -0.1, " London": -4.3}], "tokens": [" Paris"]}})
        {' Paris': -0.1, ' London': -4.3}
        >>> first_top_logprobs({"logprobs": {"content": [{"token": " Paris", "logprob": -0.1,
        ...     "top_logprobs": [{"token": " Paris", "logprob": -0.1}, {"token": " London", "logprob": -4.3}]}]}})
        {' Paris': -0.1, ' London': -4.3}
    """
    try:
        lp = choice_logprobs(choice)
    except (ValueError, KeyError, TypeError):
        return {}
    if lp is None or not lp.top_logprobs:
        return {}
    return dict(lp.top_logprobs[0] or {})
