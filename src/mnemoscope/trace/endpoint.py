"""Paired traces of a served model: RePCS's two paths from an OpenAI-compatible server.

For one (context, query) and the prompt builder of a profile:

1. **Generation** (with-context path): ``POST /v1/completions`` with the with-context prompt,
   greedy, ``max_tokens = T``, ``logprobs = k``: the answer, its tokens as the server spells
   them, and per step the top-k log-probabilities. A forced answer (``--answer``) skips it.
2. **Tokenization**: the server tokenizes each prompt and each prompt + answer
   (``/extras/tokenize`` on llama-cpp-python, ``/tokenize`` on llama.cpp's server). The answer
   ids are the tokens after the prompt's; the prompt's tokens must be an exact prefix (no merge
   across the boundary), both paths must give the same answer ids, and those ids must spell the
   generated tokens one for one. Otherwise :class:`TokenAlignmentError`: positions are never
   compared misaligned.
3. **Teacher forcing** (both paths): ``echo: true, logprobs: k, max_tokens: 1`` on
   prompt + answer returns, for every answer position, ``log p(y_t | prefix)`` and the top-k of
   that position's distribution. Each path's first answer position is checked against a
   one-token generation from the bare prompt (same distribution, computed by the server's
   generation code, whose alignment is right by construction): a server that shifts echoed
   log-probs by one position (llama-cpp-python does when the prompt does not begin with the
   model's BOS token) is refused, not silently mis-scored.
4. **EOS**: when the generation stopped on the end-of-sequence token before T tokens, the
   in-process trace counts EOS as a step; here its text (``eos_text``, read from the GGUF or
   the chat template) is appended to the forced answer so that the step is scored too. The
   step is kept only if the with-context path ranks it first there (the greedy generation did
   stop on it); else it is dropped with a note.

The result is a :class:`~mnemoscope.trace.types.PairTrace` whose KL per step is the truncated
top-k estimate (:func:`mnemoscope.detectors.repcs.topk_kl`), whose answer log-probs are exact,
and whose hidden states and entropies are *not measured* (``None`` / NaN). ``trace.backend``
says so.

Top-k entries are keyed by the server's token strings (OpenAI's completions format has no
alternative ids); the answer's own tokens keep their real ids and the other strings get
negative ids, unique per string within a trace, so that both paths share one key space.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mnemoscope.divergence import topk_kl
from mnemoscope.errors import InputError
from mnemoscope.models.endpoint import (
    EndpointCapabilityError,
    EndpointClient,
    EndpointError,
    TokenAlignmentError,
    require_choice_logprobs,
)
from mnemoscope.trace.chat_template import ChatTemplate, load_chat_template
from mnemoscope.trace.endpoint_score import (
    Scored,
    lcp_force_grammar,
    lcp_force_positions,
    lcp_generate,
    lcp_score_after,
    native_force,
    native_generate,
)
from mnemoscope.trace.templates import PromptBuilder
from mnemoscope.trace.types import PairTrace

__all__ = [
    "UNMEASURED",
    "ChatTemplate",
    "EndpointPairConfig",
    "ParsedLogprobs",
    "check_same_distribution",
    "load_chat_template",
    "parse_logprobs",
    "top_k_entries",
    "trace_endpoint_pair",
    "trace_endpoint_prompts",
]

# What a black-box endpoint cannot give: reported, never filled in.
UNMEASURED: tuple[str, ...] = (
    "hidden states (CRM displacement, LTS, crm_probability; SCAR; RADAR)",
    "full-vocabulary KL and entropies (top-k estimate only)",
)


# -- parsing ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParsedLogprobs:
    """OpenAI completions ``logprobs`` (legacy format): one entry per returned token."""

    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[Any, float] | None]


def parse_logprobs(
    choice: dict[str, Any], *, endpoint: str | None = None, what: str = "completion"
) -> ParsedLogprobs:
    """The ``logprobs`` block of a completions choice, in either format
    (:func:`~mnemoscope.models.endpoint.choice_logprobs`); an error when the server ignored
    ``logprobs`` (:class:`EndpointCapabilityError`) or returned a malformed block."""
    lp = require_choice_logprobs(choice, endpoint=endpoint, what=what, missing=EndpointCapabilityError)
    return ParsedLogprobs(lp.tokens, lp.token_logprobs, list(lp.top_logprobs))


def top_k_entries(
    top: dict[Any, float] | None, k: int, *, where: str, endpoint: str | None = None, min_k: int = 1
) -> list[tuple[str, float]]:
    """The (at most) k most probable entries of one position, most probable first.

    Fewer than k distinct entries happen legitimately when two tokens share a spelling (the
    completions format keys alternatives by text: several special tokens all spell ``""``);
    a server that caps top-k below k is caught by :meth:`EndpointClient.require_teacher_forcing`.

    Raises:
        EndpointCapabilityError: fewer than ``min_k`` entries, or a non-finite log-prob.
    """
    if not top:
        raise EndpointCapabilityError(f"no top-k log-probs at {where}", endpoint=endpoint)
    items = sorted(top.items(), key=lambda kv: -kv[1])[:k]
    if len(items) < min_k:
        raise EndpointCapabilityError(
            f"the server returned {len(items)} alternatives at {where}, fewer than {min_k}", endpoint=endpoint
        )
    for tok, v in items:
        if not math.isfinite(v) or v > 1e-4:
            raise EndpointError(f"invalid log-prob {v!r} for {tok!r} at {where}", endpoint=endpoint)
    return items


def check_same_distribution(
    a: dict[str, float], b: dict[str, float], *, tol: float, n_top: int = 3
) -> tuple[bool, float]:
    """(same?, max |diff| over shared tokens): each side's top ``n_top`` tokens are in the other's
    top-k and the shared log-probs agree within ``tol`` nats."""
    for x, y in ((a, b), (b, a)):
        for tok, _ in sorted(x.items(), key=lambda kv: -kv[1])[:n_top]:
            if tok not in y:
                return False, math.inf
    shared = set(a) & set(b)
    worst = max((abs(a[t] - b[t]) for t in shared), default=math.inf)
    return worst <= tol, worst


# -- tracing ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EndpointPairConfig:
    """Settings of an endpoint pair trace.

    Attributes:
        builder: the prompt builder (the profile's; chat prompts are rendered by ``template``).
        template: the chat template (and EOS text).
        max_new_tokens: T.
        top_k: alternatives per position (OpenAI's API allows at most 20 on completions' legacy
            ``logprobs``; llama.cpp and vLLM accept more).
        align_tol: tolerance (nats) of the alignment checks: the echoed first answer position
            against a one-token generation, and each generated token against the with-context
            top-1. llama.cpp's logits depend on how a prompt is batched (a re-used KV-cache prefix
            plus a one-token decode vs one prefill): up to ~0.2 nats on the default Q4_1 model,
            measured; a shifted position gives other top tokens altogether.
    """

    builder: PromptBuilder
    template: ChatTemplate
    max_new_tokens: int = 32
    top_k: int = 20
    align_tol: float = 0.5


def trace_endpoint_pair(
    client: EndpointClient,
    rid: str,
    context: str,
    query: str,
    config: EndpointPairConfig,
    *,
    answer: str | None = None,
    max_new_tokens: int | None = None,
    label: int | None = None,
    closed_book_tokens: int | None = None,
) -> tuple[PairTrace, list[str]]:
    """Trace one pair through the server (module doc). Returns ``(trace, answer pieces)``: the
    pieces are the text each answer token adds, as the server spells it. ``closed_book_tokens``:
    also the model's closed-book greedy answer of that many tokens, in ``trace.answer_without``
    (:func:`trace_endpoint_prompts`).

    Raises:
        EndpointError, EndpointCapabilityError, TokenAlignmentError: naming the endpoint.
        InputError: the prompts cannot be built.
    """
    b = config.builder
    p_with, p_without = b.pair(context, query, config.template if b.chat else None)
    return trace_endpoint_prompts(
        client,
        rid,
        p_with,
        p_without,
        config,
        answer=answer,
        max_new_tokens=max_new_tokens,
        label=label,
        context=context,
        query=query,
        template=b.to_dict(),
        closed_book_tokens=closed_book_tokens,
    )


def trace_endpoint_prompts(
    client: EndpointClient,
    rid: str,
    prompt_with: str,
    prompt_without: str,
    config: EndpointPairConfig,
    *,
    answer: str | None = None,
    max_new_tokens: int | None = None,
    label: int | None = None,
    context: str = "",
    query: str = "",
    template: dict[str, Any] | None = None,
    served: Scored | None = None,
    closed_book_tokens: int | None = None,
) -> tuple[PairTrace, list[str]]:
    """Trace two PRE-RENDERED prompts (an application's own messages, rendered with its chat
    template, with and without the retrieved context): the same checks and trace as
    :func:`trace_endpoint_pair`, which builds the two prompts from (context, query) and calls this.

    ``config.builder`` is not used to build anything here; ``template`` is recorded in the trace
    (default: ``{"prerendered": True}``); ``context``/``query`` are recorded as given.
    The prompts are sent as they are: they must already carry the chat template's own
    special tokens (llama-cpp-python shifts echoed log-probs when a prompt does not begin with
    the model's BOS token; that is detected and refused).

    ``served``: the with-context log-probs of ``answer`` as the upstream served it (the proxy asks
    for them in the application's request, :func:`~mnemoscope.trace.endpoint_score.served_scores`).
    Used by ``grammar``/``positions`` instead of forcing the with-context path when they line up:
    the same prompt length, tokens that spell the answer and number as many as its ids (else they
    are ignored, with a note). The audit then pays for the no-context path only.

    ``closed_book_tokens``: also the model's closed-book greedy answer (no context, that many
    tokens T, cut at the profile's stop sequences) in ``trace.answer_without``, what
    ``closed_book_agreement`` reads. On ``native`` its first tokens are read off the no-context
    pass, which has just scored the answer there: as long as the no-context top-1 is the answer's
    own token, greedy decoding without the context writes that token too. Only the rest is
    generated, from the first position where they differ (the prompt's cache re-used), so a
    closed-book answer that agrees with the answer costs no request at all
    (``backend.closed_book``: tokens read, whether it generated). Other paths generate it whole.
    """
    ep = client.endpoint
    T = max_new_tokens or config.max_new_tokens
    k = config.top_k
    p_with, p_without = prompt_with, prompt_without
    if not p_with:
        raise InputError("the with-context prompt is empty", record=rid, field="prompt_with")
    if not p_without:
        raise InputError("the no-context prompt is empty", record=rid, field="prompt_without")
    caps = client.capabilities()
    chain = caps.fallbacks
    refused: list[str] = []
    fallbacks: list[dict[str, Any]] = []
    for i, path in enumerate(chain):
        try:
            if path in ("grammar", "positions"):
                sc = _positions_scores(
                    client,
                    rid,
                    p_with,
                    p_without,
                    config,
                    answer,
                    T,
                    grammar=path == "grammar",
                    served=served,
                )
            elif path == "native":
                sc = _native_scores(client, rid, p_with, p_without, config, answer, T, served=served)
            else:
                sc = _SCORERS[path](client, rid, p_with, p_without, config, answer, T)
            break
        except EndpointError as e:
            # under auto ANY failure of a path (a refusal, a 4xx, a 5xx after the retries, an
            # unparsable answer) passes the record to the next sound path, with its cause recorded
            if i + 1 == len(chain):
                if refused:
                    raise type(e)(
                        f"{e.reason} (after {'; '.join(refused)})", endpoint=e.endpoint, status=e.status
                    ) from e
                raise
            refused.append(f"{path} refused: {e.reason}")
            fallbacks.append({"path": path, "status": e.status, "message": e.reason})
    if refused:
        sc.notes[:0] = [f"{r}; scored by the next path ({path})" for r in refused]
    ans, e_with, e_without, use_eos, notes = sc.ans, sc.e_with, sc.e_without, sc.use_eos, sc.notes
    # the profile's stop sequences end a generated answer where an app would (trace.pair.cut_pieces_at_stop)
    answer_cut = None
    if answer is None and config.builder.stop:
        from mnemoscope.trace.pair import cut_pieces_at_stop

        texts = list(e_with.tokens)
        if use_eos and texts:
            texts[-1] = ""
        keep, answer_cut = cut_pieces_at_stop(texts, config.builder.stop)
        if answer_cut is not None:
            ans = ans[:keep]
            e_with, e_without = (
                ParsedLogprobs(e.tokens[:keep], e.token_logprobs[:keep], e.top_logprobs[:keep])
                for e in (e_with, e_without)
            )
            use_eos = False
        elif sc.server_stop is not None:
            # the server stopped on the stop sequence: the same cut, where the answer's text ends
            answer_cut = {"at": len("".join(texts)), "stop": sc.server_stop, "token": len(ans)}
            use_eos = False
    n = len(ans)
    bounded = {
        "with-context": [t for t in sc.bounded_with if t < n],
        "no-context": [t for t in sc.bounded_without if t < n],
    }
    if any(bounded.values()):
        notes.append(
            "the answer's token was outside the returned top-k at "
            + "; ".join(f"{p} positions {v}" for p, v in bounded.items() if v)
            + ": its log-prob there is an upper bound (min of the k-th probability and the tail mass, the "
            "value the top-k KL imputes to a missing token), used as such by the top-k KL, the answer's "
            "log-prob and closed_book_logprob"
        )
    intern: dict[str, int] = {}
    for s, i in zip(e_with.tokens, ans, strict=True):
        intern.setdefault(s, int(i))
    neg = [-1]
    padded = [0]

    def key_id(s: Any) -> int:
        if isinstance(s, int):  # native: real token ids
            return s
        if s not in intern:
            intern[s] = neg[0]
            neg[0] -= 1
        return intern[s]

    def arrays(
        e: ParsedLogprobs, path: str
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[Any, float]]]:
        ids = np.zeros((n, k), dtype=np.int64)
        lps = np.zeros((n, k), dtype=np.float32)
        own = np.zeros(n, dtype=np.float32)
        dicts = []
        for t in range(n):
            items = top_k_entries(e.top_logprobs[t], k, where=f"{path} answer step {t}", endpoint=ep)
            row_ids = [key_id(s) for s, _ in items]
            row_lps = [v for _, v in items]
            if len(items) < k:  # spellings collided: repeat the last entry (same key, so no new mass)
                padded[0] += 1
                row_ids += [row_ids[-1]] * (k - len(items))
                row_lps += [row_lps[-1]] * (k - len(items))
            ids[t] = row_ids
            lps[t] = row_lps
            v = e.token_logprobs[t]
            if v is None or not math.isfinite(v):
                raise EndpointError(
                    f"record {rid}: no log-prob for answer step {t} on the {path} path", endpoint=ep
                )
            own[t] = v
            dicts.append(dict(items))
        return ids, lps, own, dicts

    ids_w, lps_w, own_w, d_w = arrays(e_with, "with-context")
    ids_wo, lps_wo, own_wo, d_wo = arrays(e_without, "no-context")
    if padded[0]:
        notes.append(
            f"{padded[0]} answer positions had fewer than k distinct top-k spellings (tokens spelled alike, "
            "e.g. special tokens); their rows repeat the last entry"
        )
    fwd = np.zeros(n, dtype=np.float32)
    rev = np.zeros(n, dtype=np.float32)
    for t in range(n):
        f, r = topk_kl(d_w[t], d_wo[t])
        fwd[t], rev[t] = f, r
    identical = sc.identical
    if identical:
        fwd[:] = 0.0
        rev[:] = 0.0
    pieces = list(e_with.tokens)
    if use_eos:
        pieces[-1] = ""  # special tokens add no text, as answer_pieces does in-process
    answer_without: str | None = None
    closed_book: dict[str, Any] | None = None
    if closed_book_tokens:
        answer_without, closed_book = _closed_book(
            client, p_without, config, closed_book_tokens, sc, ans, e_without.top_logprobs, pieces, use_eos
        )
    nan = np.full(n, np.nan, dtype=np.float32)
    trace = PairTrace(
        id=rid,
        context=context,
        query=query,
        prompt_with=p_with,
        prompt_without=p_without,
        n_prompt_tokens_with=sc.n_prompt_with,
        n_prompt_tokens_without=sc.n_prompt_without,
        h_with=None,
        h_without=None,
        h_with_prenorm=None,
        h_without_prenorm=None,
        answer_ids=np.asarray(ans, dtype=np.int64),
        answer_with="".join(pieces),
        kl_steps=fwd,
        kl_rev_steps=rev,
        entropy_with=nan,
        entropy_without=nan.copy(),
        logprob_answer_with=own_w,
        logprob_answer_without=own_wo,
        topk_ids_with=ids_w,
        topk_logprobs_with=lps_w,
        topk_ids_without=ids_wo,
        topk_logprobs_without=lps_wo,
        stopped_at_eos=bool(use_eos),
        identical_prompts=bool(identical),
        answer_cut=answer_cut,
        answer_without=answer_without,
        label=label,
        template=dict(template) if template is not None else {"prerendered": True},
        backend={
            "kind": "endpoint",
            "endpoint": ep,
            "model": client.model,
            "method": caps.method_name(path),
            "kl_estimator": "topk",
            "k": k,
            "unmeasured": list(UNMEASURED),
            "notes": notes,
            "bounded": any(bounded.values()),
            "bounded_positions": bounded,
            "fallbacks": fallbacks,
            **({"closed_book": closed_book} if closed_book is not None else {}),
        },
    )
    return trace, pieces


# -- the closed-book answer ------------------------------------------------------------------------


def _cut_text_at_stop(text: str, stops: Sequence[str]) -> str:
    """``text`` up to the first of ``stops`` from its first non-blank character on (the earliest
    occurrence; the longest stop on a tie): the search of :func:`~mnemoscope.trace.pair.cut_at_stop`,
    on a text whose tokens are not known (:func:`~mnemoscope.trace.pair.find_stop`; the client-side safety net of a closed-book answer the
    server was asked to stop).

    Example:
        >>> _cut_text_at_stop("\\n\\nParis.\\n\\nQuestion: x", ["\\n\\n"])
        '\\n\\nParis.'
    """
    from mnemoscope.trace.pair import find_stop

    hit = find_stop(text, stops)
    return text if hit is None else text[: hit[0]]


def _closed_book(
    client: EndpointClient,
    p_without: str,
    config: EndpointPairConfig,
    T: int,
    sc: _PairScores,
    ans: Sequence[int],
    tops_without: Sequence[dict[Any, float] | None],
    pieces: Sequence[str],
    use_eos: bool,
) -> tuple[str, dict[str, Any]]:
    """The closed-book greedy answer of ``T`` tokens and how it was made (:func:`trace_endpoint_prompts`).
    The profile's stop sequences are sent to the server; the client-side cut stays the guarantee."""
    stops = [x for x in config.builder.stop if x]
    if sc.ids_without is not None and sc.clean is not None:
        text, read, generated = _native_closed_book(
            client, sc.ids_without, sc.clean, T, ans, tops_without, pieces, use_eos, stops
        )
    else:
        text, read, generated = _generated_closed_book(client, p_without, T, stops), 0, True
    return _cut_text_at_stop(text, stops), {"tokens_read": read, "generated": generated}


def _generated_closed_book(client: EndpointClient, prompt: str, T: int, stops: Sequence[str]) -> str:
    """The closed-book answer generated whole (``POST /v1/completions`` on the no-context prompt)."""
    ch = client.completion(prompt, max_tokens=T, extra={"stop": list(stops)} if stops else None)
    text = str(ch.get("text", ""))
    if stops and not text.strip() and ch.get("finish_reason") == "stop":
        # perhaps a stop before the first non-blank character, which an app's cut ignores: generate on
        text = str(client.completion(prompt, max_tokens=T).get("text", ""))
    return text


def _native_closed_book(
    client: EndpointClient,
    ids_without: Sequence[int],
    clean: Sequence[bool],
    T: int,
    ans: Sequence[int],
    tops_without: Sequence[dict[Any, float] | None],
    pieces: Sequence[str],
    use_eos: bool,
    stops: Sequence[str],
) -> tuple[str, int, bool]:
    """``(closed-book answer, tokens read off the no-context pass, generated?)`` on llama-server.

    Greedy decoding without the context writes the answer's token at position t as long as the
    answer's tokens before t are what it wrote and the no-context top-1 at t (the unconstrained
    distribution the grammar-forced pass reported) is that token. So the first ``d`` tokens are read
    there (up to a top-1 tie, which the server decides, and back to a character boundary); when the
    answer ended on its end token and the no-context path ranks it first too, or ``d`` reaches T,
    that is the whole answer. Otherwise the server generates on from ``d`` (``T - d`` tokens on
    the no-context prompt + the answer's first ``d`` tokens, a prefix of what its cache holds).
    """
    n = len(ans)
    limit = min(n, T)
    d = 0
    while d < limit:
        top = tops_without[d] or {}
        if not top:
            break
        best = max(top.values())
        first = [i for i, v in top.items() if v == best]
        if len(first) != 1 or first[0] != ans[d]:
            break
        d += 1
    while d > 0 and not clean[d - 1]:
        d -= 1
    if use_eos and d == n:  # the no-context path ends where the answer ended
        return "".join(pieces[:n]), d, False
    if d == T:
        return "".join(pieces[:T]), d, False
    prefix = "".join(pieces[:d])
    prompt = [*ids_without, *(int(i) for i in ans[:d])]
    data = client.native_completion(prompt, n_predict=T - d, extra={"stop": list(stops)} if stops else None)
    if stops and data.get("stop_type") == "word" and not (prefix + str(data.get("content", ""))).strip():
        # a stop before the answer's first non-blank character, which an app's cut ignores: generate on
        data = client.native_completion(prompt, n_predict=T - d)
    return prefix + str(data.get("content", "")), d, True


def _echo_scores(
    client: EndpointClient,
    rid: str,
    p_with: str,
    p_without: str,
    config: EndpointPairConfig,
    answer: str | None,
    T: int,
) -> _PairScores:
    """The first mechanism: both paths echoed (``echo: true, logprobs: k``), module doc."""
    ep = client.endpoint
    k = config.top_k
    ids_with = client.tokenize(p_with)
    ids_without = client.tokenize(p_without)
    if not ids_with or not ids_without:
        raise InputError("a prompt tokenizes to 0 tokens", record=rid, field="query")

    n_gen: int | None = None
    stopped_eos = False
    server_stop: str | None = None
    notes: list[str] = []
    if answer is None and config.builder.stop:
        # the profile's stop sequences go to the server; which tokens it generated (a stop's too)
        # says where it stopped, so this generation asks for them (logprobs: 1)
        answer_text, g, stopped_eos, server_stop = _lcp_generated(
            client, rid, p_with, config, T, k=1, ends=(), notes=notes
        )
        n_gen = len(g)
    elif answer is None:
        # greedy generation without logprobs (llama-cpp-python formats generation logprobs slowly);
        # the echo below scores the same tokens and checks they are the greedy ones
        gen = client.completion(p_with, max_tokens=T)
        answer_text = str(gen.get("text", ""))
        c_tok = (gen.get("usage") or {}).get("completion_tokens")
        n_gen = int(c_tok) if isinstance(c_tok, int) else None
        stopped_eos = gen.get("finish_reason") == "stop" and (n_gen is None or n_gen < T)
    else:
        answer_text = answer

    def first_position(prompt: str) -> dict[str, float] | None:
        ch = client.completion(prompt, max_tokens=1, logprobs=k)
        tops = parse_logprobs(ch, endpoint=ep, what="reference generation").top_logprobs
        return tops[0] if tops else None  # None: the first token was EOS (nothing returned)

    ref_with = first_position(p_with)
    ref_without = first_position(p_without)

    eos_text = config.template.eos_text
    use_eos = stopped_eos and bool(eos_text)
    if stopped_eos and not eos_text:
        notes.append(
            "the answer ended on EOS but its text is unknown (--eos-token): the EOS step is not scored"
        )
    suffix = answer_text + ((eos_text or "") if use_eos else "")

    def answer_ids(prompt: str, prompt_ids: list[int], path: str) -> list[int]:
        full = client.tokenize(prompt + suffix)
        if full[: len(prompt_ids)] != prompt_ids:
            raise TokenAlignmentError(
                f"record {rid}: on the {path} path the answer's first token merges with the prompt's last "
                "one when tokenized together; positions cannot be aligned",
                endpoint=ep,
            )
        return full[len(prompt_ids) :]

    ans = answer_ids(p_with, ids_with, "with-context")
    ans0 = answer_ids(p_without, ids_without, "no-context")
    if ans != ans0:
        raise TokenAlignmentError(
            f"record {rid}: the answer tokenizes differently after the two prompts", endpoint=ep
        )
    n_text = len(ans) - (1 if use_eos else 0)
    if use_eos and (n_text < 0 or client.tokenize(str(eos_text))[-1:] != ans[-1:]):
        raise TokenAlignmentError(f"record {rid}: the EOS text {eos_text!r} is not one token", endpoint=ep)
    if n_gen is not None and n_text != n_gen:
        raise TokenAlignmentError(
            f"record {rid}: the server generated {n_gen} tokens but re-tokenizes the answer into "
            f"{n_text}; positions cannot be aligned",
            endpoint=ep,
        )

    def echo(prompt: str, path: str, ref: dict[str, float] | None) -> ParsedLogprobs:
        n = len(ans)
        if n == 0:
            return ParsedLogprobs([], [], [])
        ch = client.completion(prompt + suffix, max_tokens=1, logprobs=k, echo=True)
        lp = parse_logprobs(ch, endpoint=ep, what=f"{path} echo")
        c = (ch.get("usage") or {}).get("completion_tokens")
        if not isinstance(c, int):
            c = 1 if len(str(ch.get("text", ""))) > len(prompt + suffix) else 0
        end = len(lp.tokens) - c
        if end - n < 0:
            raise TokenAlignmentError(
                f"record {rid}: the {path} echo returned {len(lp.tokens)} tokens, fewer than the answer's {n}",
                endpoint=ep,
            )
        sl = ParsedLogprobs(
            lp.tokens[end - n : end], lp.token_logprobs[end - n : end], lp.top_logprobs[end - n : end]
        )
        # a special token (EOS) is spelled "" by some servers (llama-cpp-python), as itself by others
        text_part = sl.tokens[:-1] if use_eos else sl.tokens
        if "".join(text_part) != answer_text or (use_eos and sl.tokens[-1] not in ("", eos_text)):
            raise TokenAlignmentError(
                f"record {rid}: the {path} echo's last {n} tokens spell {''.join(sl.tokens)!r}, not the answer "
                f"{suffix!r}",
                endpoint=ep,
            )
        if ref is not None and sl.top_logprobs[0]:
            ok, worst = check_same_distribution(sl.top_logprobs[0], ref, tol=config.align_tol)
            if not ok:
                raise TokenAlignmentError(
                    f"record {rid}: the {path} echo's log-probs at the first answer position do not match the "
                    f"server's own generation there (max diff {worst:.3f} nats): the echoed log-probs are "
                    "shifted (llama-cpp-python shifts them when the prompt does not start with the model's BOS "
                    "token) -- refusing to compare misaligned positions. Fix: render prompts with the "
                    "model's chat template, `--chat-template default` for the embedded default model or "
                    "`--chat-template MODEL.gguf` for another served model",
                    endpoint=ep,
                )
        return sl

    e_with = echo(p_with, "with-context", ref_with)
    e_without = echo(p_without, "no-context", ref_without)
    if answer is None:
        # the teacher-forced tokens must be the greedy generation: each one is the with-context top-1
        for t in range(n_text):
            top = e_with.top_logprobs[t] or {}
            own = e_with.token_logprobs[t]
            if not top or own is None or own < max(top.values()) - config.align_tol:
                raise TokenAlignmentError(
                    f"record {rid}: answer token {t} ({e_with.tokens[t]!r}) is not the with-context top-1: the "
                    "re-tokenized answer differs from the tokens the server generated",
                    endpoint=ep,
                )
    # EOS step: kept only if the with-context path ranks it first there (greedy stop).
    if use_eos and e_with.top_logprobs:
        last = e_with.top_logprobs[-1] or {}
        if not last or max(last, key=lambda t: last[t]) != e_with.tokens[-1]:
            notes.append(
                "the EOS text is not the with-context top-1 after the answer: the EOS step is dropped"
            )
            ans = ans[:-1]
            e_with = ParsedLogprobs(e_with.tokens[:-1], e_with.token_logprobs[:-1], e_with.top_logprobs[:-1])
            e_without = ParsedLogprobs(
                e_without.tokens[:-1], e_without.token_logprobs[:-1], e_without.top_logprobs[:-1]
            )
            use_eos = False
    sc = _PairScores(
        ans, e_with, e_without, use_eos, notes, len(ids_with), len(ids_without), ids_with == ids_without
    )
    sc.server_stop = server_stop
    return sc


@dataclass
class _PairScores:
    """What a scoring mechanism gives the trace builder (both paths at the answer positions)."""

    ans: list[int]
    e_with: ParsedLogprobs
    e_without: ParsedLogprobs
    use_eos: bool
    notes: list[str]
    n_prompt_with: int
    n_prompt_without: int
    identical: bool
    # positions whose answer log-prob is an upper bound (its token outside the top-k), per path
    bounded_with: list[int] = field(default_factory=list)
    bounded_without: list[int] = field(default_factory=list)
    # the profile's stop sequence the server stopped the generation on (it then holds no stop text)
    server_stop: str | None = None
    # native: the no-context prompt's ids, and per answer position whether the answer's text up to
    # and including that token ends on a character boundary (the closed-book answer is read off the
    # no-context pass up to such a position: _native_closed_book)
    ids_without: list[int] | None = None
    clean: list[bool] | None = None


def _as_parsed(s: Scored) -> ParsedLogprobs:
    return ParsedLogprobs(list(s.pieces), [float(v) for v in s.own], [dict(t) for t in s.tops])


def _scored_pair(
    ans: list[int],
    with_s: Scored,
    without_s: Scored,
    use_eos: bool,
    notes: list[str],
    ids_with: list[int],
    ids_without: list[int],
) -> _PairScores:
    """The per-position paths' (``positions``, ``native``) result: both scored paths and the prompts' ids."""
    return _PairScores(
        ans,
        _as_parsed(with_s),
        _as_parsed(without_s),
        use_eos,
        notes,
        len(ids_with),
        len(ids_without),
        ids_with == ids_without,
        list(with_s.bounded),
        list(without_s.bounded),
    )


def _piece_texts(pieces: Sequence[bytes]) -> list[str]:
    """The text each token adds: a character split over tokens belongs to the token that completes
    it (the others add ""), so that the texts join into the answer."""
    import codecs

    dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
    return [dec.decode(b, final=t == len(pieces) - 1) for t, b in enumerate(pieces)]


def _cut_at_end_texts(text: str, ends: Sequence[str]) -> tuple[str, bool]:
    """``text`` up to the first end-of-generation text, and whether one was found."""
    cut = min((text.index(e) for e in ends if e and e in text), default=None)
    return (text, False) if cut is None else (text[:cut], True)


def _single_token_ids(client: EndpointClient, texts: Sequence[str]) -> list[int]:
    """The ids of the texts that the server tokenizes into one token (after a BOS it adds)."""
    bos = client.tokenize("")
    out: list[int] = []
    for t in texts:
        ids = client.tokenize(t)
        ids = ids[len(bos) :] if ids[: len(bos)] == bos else ids
        if len(ids) == 1 and ids[0] not in out:
            out.append(int(ids[0]))
    return out


def _answer_ids(
    client: EndpointClient, rid: str, prompt: str, prompt_ids: list[int], text: str, path: str
) -> list[int]:
    full = client.tokenize(prompt + text)
    if full[: len(prompt_ids)] != prompt_ids:
        raise TokenAlignmentError(
            f"record {rid}: on the {path} path the answer's first token merges with the prompt's last "
            "one when tokenized together; positions cannot be aligned",
            endpoint=client.endpoint,
        )
    return full[len(prompt_ids) :]


def _served_mismatch(served: Scored, answer_text: str, n_prompt: int, n_ans: int) -> str | None:
    """Why the served with-context log-probs cannot stand for the forced ones (``None``: they can)."""
    if served.n_prompt is not None and served.n_prompt != n_prompt:
        return f"the upstream counted {served.n_prompt} prompt tokens, the audited prompt has {n_prompt}"
    acc, keep = "", 0
    while keep < len(served) and len(acc) < len(answer_text):
        acc += served.pieces[keep]
        keep += 1
    if acc != answer_text:
        return "its tokens do not spell the answer on a token boundary"
    if keep != n_ans:
        return f"{keep} served tokens for the answer's {n_ans} token ids"
    if any(len(t) == 0 for t in served.tops[:keep]):
        return "no top log-probs"
    return None


def _stop_hit(text: str, full: str, stops: Sequence[str]) -> str | None:
    """The stop sequence a server ended the answer ``text`` at: the one of ``stops`` that the generated
    tokens' text ``full`` continues ``text`` with (``None``: the server did not stop on one of them)."""
    if len(full) <= len(text) or not full.startswith(text):
        return None
    hits = [x for x in stops if x and full.startswith(x, len(text))]
    return max(hits, key=len) if hits else None


def _lcp_generated(
    client: EndpointClient,
    rid: str,
    prompt: str,
    config: EndpointPairConfig,
    T: int,
    *,
    k: int,
    ends: Sequence[str],
    notes: list[str],
) -> tuple[str, Scored, bool, str | None]:
    """The with-context answer generated greedily on an OpenAI completions server with ``logprobs: k``:
    ``(answer text, its scored tokens, stopped on EOS, the profile's stop sequence the server stopped on)``.

    ``ends`` (the template's end-of-turn texts) and the profile's stop sequences are sent as ``stop``:
    the server stops there instead of generating on. It reports every token it generated, a stop's
    too. On an end text the answer is the tokens that spell the text before it. On a profile stop
    sequence the answer keeps every generated token: the client-side cut
    (:func:`trace_endpoint_prompts`) ends it at a token boundary exactly as in process (and as
    before the stop was sent, when the server generated all T tokens). A profile stop before the
    answer's first non-blank character, which that cut ignores, makes it generate again without them.
    """
    stops = [x for x in config.builder.stop if x and x not in ends]
    text, gen, finish, _n = lcp_generate(client, prompt, max_tokens=T, k=k, stop=[*ends, *stops])
    server_stop = _stop_hit(text, "".join(gen.pieces), stops)
    if server_stop is not None and not text.strip():
        text, gen, finish, _n = lcp_generate(client, prompt, max_tokens=T, k=k, stop=list(ends))
        server_stop = None
    if server_stop is not None:
        return "".join(gen.pieces), gen, False, server_stop
    answer_text, cut = _cut_at_end_texts(text, ends)
    # keep the tokens that spell the answer (a stop text generated as ordinary pieces is cut off,
    # never part of the answer)
    acc, keep = "", 0
    while keep < len(gen) and len(acc) < len(answer_text):
        acc += gen.pieces[keep]
        keep += 1
    if acc != answer_text:
        raise TokenAlignmentError(
            f"record {rid}: the generated tokens spell {''.join(gen.pieces)!r}, which does not split at the "
            f"answer {answer_text!r} on a token boundary",
            endpoint=client.endpoint,
        )
    spelled_stop = keep < len(gen) or cut
    while len(gen) > keep:
        gen.drop_last()
    stopped_eos = finish == "stop" and len(gen) < T and not spelled_stop
    if spelled_stop:
        notes.append(
            "the model wrote the end-of-turn text as ordinary tokens; the answer ends before it and no "
            "EOS step is scored"
        )
    return answer_text, gen, stopped_eos, None


def _grammar_scores(
    client: EndpointClient,
    rid: str,
    p_with: str,
    p_without: str,
    config: EndpointPairConfig,
    answer: str | None,
    T: int,
) -> _PairScores:
    """``grammar`` (llama-cpp-python): as ``positions``, but a forced answer costs ONE request per
    path (a grammar of its token ids, endpoint_score.lcp_force_grammar) and the no-context path is
    forced on the with-context answer's ids (no piecewise re-tokenization)."""
    return _positions_scores(client, rid, p_with, p_without, config, answer, T, grammar=True)


def _positions_scores(
    client: EndpointClient,
    rid: str,
    p_with: str,
    p_without: str,
    config: EndpointPairConfig,
    answer: str | None,
    T: int,
    *,
    grammar: bool = False,
    served: Scored | None = None,
) -> _PairScores:
    """``positions`` (llama-cpp-python and OpenAI completions servers): the with-context answer
    generated with log-probs, the rest forced one position per request (endpoint_score); with
    ``grammar`` the forced answers are one request each (``grammar`` path)."""
    force = lcp_force_grammar if grammar else lcp_force_positions
    ep = client.endpoint
    k = config.top_k
    ends = config.template.end_texts
    notes: list[str] = []
    ids_with = client.tokenize(p_with)
    ids_without = client.tokenize(p_without)
    if not ids_with or not ids_without:
        raise InputError("a prompt tokenizes to 0 tokens", record=rid, field="query")
    stopped_eos = False
    gen: Scored | None = None
    server_stop: str | None = None
    if answer is None:
        answer_text, gen, stopped_eos, server_stop = _lcp_generated(
            client, rid, p_with, config, T, k=k, ends=ends, notes=notes
        )
    else:
        answer_text, cut = _cut_at_end_texts(answer, ends)
        if cut:
            notes.append("the given answer contained an end-of-turn text: it is cut there")
    ans = _answer_ids(client, rid, p_with, ids_with, answer_text, "with-context")
    # positions re-tokenizes prompt + answer prefix as text on the no-context path: the answer must
    # tokenize alike there; grammar forces the with-context ids themselves (as in process)
    if not grammar and _answer_ids(client, rid, p_without, ids_without, answer_text, "no-context") != ans:
        raise TokenAlignmentError(
            f"record {rid}: the answer tokenizes differently after the two prompts", endpoint=ep
        )
    if gen is not None and len(ans) != len(gen):
        raise TokenAlignmentError(
            f"record {rid}: the server generated {len(gen)} tokens but re-tokenizes the answer into {len(ans)}; "
            "positions cannot be aligned",
            endpoint=ep,
        )
    pieces = list(gen.pieces) if gen is not None else None
    if pieces is None and served is not None:
        why = _served_mismatch(served, answer_text, len(ids_with), len(ans))
        if why is None:
            gen = Scored(
                list(served.pieces[: len(ans)]),
                None,
                list(served.own[: len(ans)]),
                list(served.tops[: len(ans)]),
            )
            pieces = list(gen.pieces)
            notes.append(
                "with-context log-probs: from the served response (the proxy asked the upstream for them)"
            )
        else:
            notes.append(
                f"the served response's log-probs are not used ({why}): the with-context path is forced"
            )
    if pieces is None:
        # spell the given answer's tokens as the server does: force them on the with-context path
        with_s = force(client, rid, p_with, len(ids_with), ans, None, k=k, path="with-context")
        pieces = with_s.pieces
        if "".join(pieces) != answer_text:
            raise TokenAlignmentError(
                f"record {rid}: the answer's tokens are spelled {''.join(pieces)!r} by the server, not {answer_text!r}",
                endpoint=ep,
            )
    else:
        assert gen is not None
        with_s = gen
    without_s = force(client, rid, p_without, len(ids_without), ans, pieces, k=k, path="no-context")
    use_eos = False
    if stopped_eos and not ends:
        notes.append(
            "the answer ended on EOS but its text is unknown (--eos-token): the EOS step is not scored"
        )
    elif stopped_eos:
        eos_ids = _single_token_ids(client, ends)
        eos_keys = ("", *ends)  # llama-cpp-python spells special tokens ""
        d_with = lcp_score_after(
            client, p_with + answer_text, k=k, ban_ids=eos_ids, where="with-context EOS step"
        )
        top1 = max(d_with, key=lambda x: d_with[x]) if d_with else None
        if top1 not in eos_keys:
            notes.append(
                "the end-of-turn token is not the with-context top-1 after the answer: the EOS step is dropped"
            )
        elif len(d_with) < k:
            notes.append(
                'the with-context top-k at the EOS step has tokens spelled alike (special tokens all spell "" '
                "on llama-cpp-python): its log-prob cannot be read exactly, the EOS step is dropped"
            )
        else:
            d_wo = lcp_score_after(
                client, p_without + answer_text, k=k, ban_ids=eos_ids, where="no-context EOS step"
            )
            own_wo = d_wo.get(top1)
            own_wo_bounded = own_wo is None
            if own_wo is None or len(d_wo) < k:
                # not in the no-context top-k (or merged with another special token): the truncated
                # estimator's bound, as topk_kl imputes a token missing from a top-k
                vals = np.exp(np.array(sorted(d_wo.values(), reverse=True)[:k]))
                tail = max(1.0 - float(vals.sum()), 1e-12)
                own_wo = float(min(np.log(vals[-1]), np.log(tail))) if own_wo is None else own_wo
                notes.append(
                    "EOS step: the end-of-turn token's no-context log-prob is outside the top-k (or merged "
                    "with another special token): the truncated estimate (min of the k-th log-prob and the "
                    "tail mass) is used"
                )
            eos_id = eos_ids[0] if eos_ids else -1
            ans = [*ans, eos_id]
            with_s.pieces.append("")
            with_s.own.append(d_with[top1])
            with_s.tops.append(d_with)
            without_s.pieces.append("")
            if own_wo_bounded:
                without_s.bounded.append(len(without_s.own))
            without_s.own.append(own_wo)
            without_s.tops.append(d_wo)
            use_eos = True
    sc = _scored_pair(ans, with_s, without_s, use_eos, notes, ids_with, ids_without)
    sc.server_stop = server_stop
    return sc


def _native_scores(
    client: EndpointClient,
    rid: str,
    p_with: str,
    p_without: str,
    config: EndpointPairConfig,
    answer: str | None,
    T: int,
    *,
    served: Scored | None = None,
) -> _PairScores:
    """``native`` (llama.cpp's llama-server): ids in, ids out; a given answer is forced by a grammar
    (or, with ``served`` log-probs whose ids are the answer's, only on the no-context path)."""
    k = config.top_k
    notes: list[str] = []
    ids_with = client.tokenize(p_with)
    ids_without = client.tokenize(p_without)
    if not ids_with or not ids_without:
        raise InputError("a prompt tokenizes to 0 tokens", record=rid, field="query")
    end_ids = _single_token_ids(client, config.template.end_texts)
    use_eos = False
    pieces: list[bytes] | None = None
    server_stop: str | None = None
    if answer is None:
        # the profile's stop sequences go to the server, which stops there instead of generating on
        # (the end-of-turn token ends a generation by itself); the client-side cut stays the guarantee
        stop = list(config.builder.stop)
        with_s, stopped, hidden_text, server_stop = native_generate(
            client, ids_with, max_tokens=T, k=k, stop=stop
        )
        if server_stop is not None and (hidden_text is not None or not "".join(with_s.pieces).strip()):
            # generate on without server stops, and the client-side cut decides as in process: an app's
            # cut ignores a stop before the answer's first non-blank character; and when the steps the
            # server reports do not spell the text before the stop (it drops as many steps as the stop
            # has tokens, whatever tokens held it, e.g. one that began before the stop), which tokens
            # end before the stop is not known
            with_s, stopped, hidden_text, server_stop = native_generate(client, ids_with, max_tokens=T, k=k)
        assert with_s.ids is not None
        if hidden_text is not None:
            # the server hid tokens inside a character: score the answer's text as a given answer
            notes.append(
                "the generation has tokens inside a UTF-8 character, whose probabilities llama-server does "
                "not report: the answer's text is re-tokenized and forced on both paths"
            )
            answer = hidden_text
        else:
            # an end-of-turn token of the template ends the answer even if the GGUF does not mark it EOG
            for t, tid in enumerate(with_s.ids):
                if tid in end_ids:
                    while len(with_s) > t + 1:
                        with_s.drop_last()
                    stopped = True
                    break
            use_eos = stopped and bool(with_s.ids)
            ans = list(with_s.ids)
    if answer is not None:
        answer_text, cut = _cut_at_end_texts(answer, config.template.end_texts)
        if cut:
            notes.append("the given answer contained an end-of-turn text: it is cut there")
        full = client.tokenize_pieces(p_with + answer_text)
        if [i for i, _ in full[: len(ids_with)]] != ids_with:
            raise TokenAlignmentError(
                f"record {rid}: on the with-context path the answer's first token merges with the prompt's last "
                "one when tokenized together; positions cannot be aligned",
                endpoint=client.endpoint,
            )
        ans = [i for i, _ in full[len(ids_with) :]]
        pieces = [b for _, b in full[len(ids_with) :]]
        why = None
        if served is not None:
            if served.ids is None or served.ids[: len(ans)] != ans:
                why = "its token ids are not the answer's"
            elif served.n_prompt is not None and served.n_prompt != len(ids_with):
                why = f"the upstream counted {served.n_prompt} prompt tokens, the audited prompt has {len(ids_with)}"
            elif any(not t for t in served.tops[: len(ans)]):
                why = "no top log-probs"
            else:
                n = len(ans)
                with_s = Scored(
                    list(served.pieces[:n]), list(ans), list(served.own[:n]), list(served.tops[:n])
                )
                notes.append(
                    "with-context log-probs: from the served response (the proxy asked the upstream for them)"
                )
            if why is not None:
                notes.append(
                    f"the served response's log-probs are not used ({why}): the with-context path is forced"
                )
        if served is None or why is not None:
            with_s = native_force(client, rid, ids_with, ans, k=k, path="with-context", pieces=pieces)
        with_s.pieces = _piece_texts(pieces)
    if use_eos:
        with_s.pieces[-1] = ""
    without_s = native_force(
        client, rid, ids_without, ans, k=k, path="no-context", ends_on_eog=use_eos, pieces=pieces
    )
    if use_eos:
        without_s.pieces[-1] = ""
    sc = _scored_pair(ans, with_s, without_s, use_eos, notes, ids_with, ids_without)
    sc.server_stop = server_stop
    sc.ids_without = list(ids_without)
    # a generation reported one for one ends every token on a character boundary (llama-server
    # hides the others); a given answer's token bytes say where its characters end
    sc.clean = [True] * len(ans) if pieces is None else _char_ends(pieces, len(ans))
    return sc


def _char_ends(pieces: Sequence[bytes], n: int) -> list[bool]:
    """Per answer position (``n`` of them; the ones after ``pieces``, e.g. an end token, count as
    boundaries), whether the answer's bytes up to and including that token end on a character
    boundary."""
    import codecs

    dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
    out = []
    for b in pieces[:n]:
        dec.decode(b, final=False)
        out.append(dec.getstate()[0] == b"")
    return out + [True] * (n - len(out))


_SCORERS = {
    "echo": _echo_scores,
    "positions": _positions_scores,
    "grammar": _grammar_scores,
    "native": _native_scores,
}
