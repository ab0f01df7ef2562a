"""Where the paired traces of an audit come from: one small interface, two backends.

A backend turns checked requests into ``(PairTrace, answer pieces)``; everything after that
(signals, attribution, the verdict, hooks) is the same for all backends and lives in
:class:`mnemoscope.audit.auditor.Auditor`.

* :class:`LocalBackend`: the model in this process; the answer is decoded once with the context
  while the no-context path is fed the same tokens (:func:`mnemoscope.trace.lockstep.trace_lockstep`),
  with hidden states (CRM). Caps in tokens of the model's tokenizer.
* :class:`EndpointBackend`: a model behind an OpenAI-compatible server
  (:func:`mnemoscope.trace.endpoint.trace_endpoint_pair`), records traced concurrently, the
  black-box signals only. Caps in characters (the server enforces its own window).

**Passages** (``AuditRequest.passages``): the context is their join
(:func:`~mnemoscope.trace.passages.join_passages`) and the trace carries them
(``PairTrace.passages``). In process, an audit of two or more passages also scores the answer
with each passage that states an answer-bearing phrase left out
(:func:`~mnemoscope.features.facts.passages_to_ablate`, at most ``max_ablations`` of them), all
audits of a run in one batch (:func:`~mnemoscope.trace.ablation.score_ablations`):
``PairTrace.passage_ablated`` / ``passage_logprobs``, and ``trace.backend["passage_ablation"]``
says what was done. Over an endpoint the passages are carried but not ablated
(``passage_ablation: "not measured on this backend"`` in the result).

The interface (:class:`Backend`): ``prepare(i, request)`` checks a request (text, caps) and
returns what ``run`` needs or an :class:`~mnemoscope.audit.requests.AuditFailure`;
``run(prepared)`` returns, aligned, a ``(trace, pieces)`` or a failure per item; ``pieces(trace)``
decodes an answer; ``model_info``, ``identity_settings``, ``limits``, ``result_fields(trace)`` and
``notes(trace)`` describe the backend in identities and results.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from mnemoscope.audit.profile import AuditProfile, ProfileError
from mnemoscope.audit.requests import AuditFailure, AuditRequest, check_request
from mnemoscope.audit.signals import answer_pieces
from mnemoscope.errors import InputError, InputTooLongError, MnemoscopeError
from mnemoscope.models.endpoint import (
    EndpointClient,
    EndpointError,
    EndpointFingerprint,
    TokenAlignmentError,
    compare_fingerprints,
    map_concurrently,
)
from mnemoscope.trace.endpoint import UNMEASURED, trace_endpoint_pair, trace_endpoint_prompts
from mnemoscope.trace.passages import join_passages
from mnemoscope.trace.types import PairTrace

__all__ = [
    "Backend",
    "EndpointBackend",
    "LocalBackend",
    "Traced",
    "check_endpoint_identity",
    "failure_of",
]

#: one item of :meth:`Backend.run`: the paired trace and the text each answer token adds, or why not
Traced = tuple[PairTrace, list[str]] | AuditFailure

#: what an endpoint result says of passages it carried (leave-one-passage-out needs the model in process)
NOT_MEASURED = "not measured on this backend"
#: why an in-process audit of the caller's own prompts leaves no passage out
SKIPPED_PROMPTS = "the prompts were rendered by the caller: passages cannot be left out of them"


def request_passages(req: AuditRequest) -> tuple[str, ...] | None:
    """The request's passages (``None`` when it gave one context string)."""
    passages = getattr(req, "passages", None)
    return None if passages is None else tuple(str(p) for p in passages)


def request_context(req: AuditRequest) -> str:
    """The context the model reads: the join of the passages when given, else ``req.context``; with
    the caller's own prompts (``req.prompts``) always ``req.context``, the text located in them."""
    passages = request_passages(req)
    return join_passages(passages) if passages is not None and req.prompts is None else req.context


class Backend(Protocol):
    name: str
    profile: AuditProfile
    hidden_states: bool
    batch_size: int

    @property
    def model_info(self) -> dict[str, Any]: ...

    @property
    def identity_settings(self) -> dict[str, Any]: ...

    @property
    def limits(self) -> dict[str, int]: ...

    def prepare(self, i: int, req: AuditRequest) -> Any: ...

    def run(self, prepared: Sequence[Any]) -> list[Traced]: ...

    def pieces(self, trace: PairTrace) -> list[str]: ...

    def result_fields(self, trace: PairTrace) -> dict[str, Any]: ...

    def notes(self, trace: PairTrace) -> list[str]: ...


def failure_of(e: BaseException) -> AuditFailure:
    """The :class:`AuditFailure` of an error raised while tracing or scoring one request."""
    kind = type(e).__name__
    if isinstance(e, InputTooLongError):
        return AuditFailure(413, e.reason, e.field, kind=kind)
    if isinstance(e, TokenAlignmentError):
        return AuditFailure(422, str(e), kind=kind)
    if isinstance(e, EndpointError):
        return AuditFailure(502, str(e), kind=kind)
    if isinstance(e, InputError):
        return AuditFailure(422, e.reason, e.field, kind=kind)
    if isinstance(e, MnemoscopeError):
        return AuditFailure(422, str(e), kind=kind)
    return AuditFailure(500, f"{kind}: {e}", kind=kind)


# -- in process ------------------------------------------------------------------------------------


def prepare_prompts(tracer: Any, rid: str, req: AuditRequest, T: int) -> Any:
    """A :class:`~mnemoscope.trace.pair.PreparedPair` from two pre-rendered prompts (with the context,
    without it): tokenized as chat-rendered text (it already holds its special tokens when it was
    rendered with a chat template), checked against the model's window."""
    from mnemoscope.trace.pair import PairItem, PreparedPair

    assert req.prompts is not None
    p_with, p_without = req.prompts
    chat = bool((req.prompt_info or {}).get("chat", True))
    ids_with = tracer.encode(p_with, chat=chat)
    ids_without = tracer.encode(p_without, chat=chat)
    tracer.check_length(len(ids_with), record=rid, field="prompts", extra=T)
    tracer.check_length(len(ids_without), record=rid, field="prompts", extra=T)
    return PreparedPair(PairItem(rid, req.context, req.query), p_with, p_without, ids_with, ids_without)


class LocalBackend:
    """The model in this process (module doc).

    Args:
        lm: the loaded model (must be the profile's model).
        profile: a verified in-process profile.
        max_context_tokens, max_query_tokens, max_answer_tokens: input caps in tokens (413 above).
        batch_size: pairs decoded together.
        hidden: trace the hidden states (CRM's signals read them); default: when the profile holds
            CRM. :class:`~mnemoscope.audit.auditor.Auditor` passes
            :meth:`~mnemoscope.audit.profile.AuditProfile.needs_hidden_states`.
        max_ablations: at most this many passages left out per audit (module doc); when more state
            an answer-bearing phrase, the first ``max_ablations`` of
            :func:`~mnemoscope.features.facts.passages_to_ablate` are scored and the trace says
            which were not (``backend["passage_ablation"]["dropped"]``, and a note).
    """

    name = "local"
    hidden_states = True
    #: the closed-book greedy answer is decoded in lockstep when the profile reads it
    closed_book_answer = True

    def __init__(
        self,
        lm: Any,
        profile: AuditProfile,
        *,
        max_context_tokens: int = 2048,
        max_query_tokens: int = 256,
        max_answer_tokens: int = 256,
        batch_size: int = 8,
        hidden: bool | None = None,
        max_ablations: int = 8,
    ):
        from mnemoscope.trace.tracer import Tracer

        if max_ablations < 0:
            raise InputError("max_ablations must be >= 0", field="max_ablations")
        self.max_ablations = int(max_ablations)

        profile.check_model(lm.info)
        #: whether this backend traces hidden states (the CRM signals and rule read them)
        self.hidden = profile.crm is not None if hidden is None else bool(hidden and profile.crm is not None)
        self.lm = lm
        self.profile = profile
        self.max_context_tokens = max_context_tokens
        self.max_query_tokens = max_query_tokens
        self.max_answer_tokens = max_answer_tokens
        self.batch_size = batch_size
        self.tracer = Tracer(lm, batch_size=batch_size)

    @property
    def model_info(self) -> dict[str, Any]:
        return dict(self.lm.info.to_dict())

    @property
    def identity_settings(self) -> dict[str, Any]:
        return {}

    @property
    def limits(self) -> dict[str, int]:
        return {
            "max_context_tokens": self.max_context_tokens,
            "max_query_tokens": self.max_query_tokens,
            "max_answer_tokens": self.max_answer_tokens,
        }

    def _count(self, text: str) -> int:
        return len(self.tracer.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prepare(
        self, i: int, req: AuditRequest
    ) -> tuple[Any, list[int] | None, int, tuple[str, ...] | None] | AuditFailure:
        from mnemoscope.trace.pair import PairItem, prepare_pair

        rid = req.id if req.id is not None else str(i)
        bad = check_request(req, self.profile.max_new_tokens)
        if bad is not None:
            return bad
        T = req.max_new_tokens or self.profile.max_new_tokens
        passages = request_passages(req)
        context = request_context(req)
        for text, name, cap in (
            (context, "context", self.max_context_tokens),
            (req.query, "query", self.max_query_tokens),
        ):
            n = self._count(text)
            if n > cap:
                return AuditFailure(
                    413, f"{name} has {n} tokens; the limit is {cap}", name, kind="InputTooLongError"
                )
        forced = None
        if req.answer is not None:
            forced = list(self.tracer.tokenizer(req.answer, add_special_tokens=False)["input_ids"])
            if len(forced) > self.max_answer_tokens:
                return AuditFailure(
                    413,
                    f"answer has {len(forced)} tokens; the limit is {self.max_answer_tokens}",
                    "answer",
                    kind="InputTooLongError",
                )
            T = len(forced)
        try:
            if req.prompts is not None:  # an application's own prompts (the integrations): traced as given
                prepared = prepare_prompts(self.tracer, rid, req, T)
            else:
                prepared = prepare_pair(
                    self.tracer,
                    PairItem(rid, context, req.query),
                    self.profile.pair_config(T, hidden=self.hidden),
                )
        except InputError as e:
            return failure_of(e)
        return prepared, forced, T, passages

    def trace(self, prepared: Sequence[Any], forced: Sequence[list[int] | None], T: int) -> list[PairTrace]:
        """Decode a group of prepared pairs in lockstep (both paths, one generation)."""
        from mnemoscope.trace.lockstep import trace_lockstep

        return trace_lockstep(
            self.tracer, prepared, self.profile.pair_config(T, hidden=self.hidden), forced_answers=forced
        )

    def run(
        self, prepared: Sequence[tuple[Any, list[int] | None, int, tuple[str, ...] | None]]
    ) -> list[Traced]:
        """Trace the prepared pairs, grouped by answer length and forced/generated answers, in
        batches of ``batch_size`` (the grouping decides the padding, so it is kept stable); then
        the passages' leave-one-out scoring of every trace of two or more passages, in one batch
        (:meth:`ablate`)."""
        out: list[Traced | None] = [None] * len(prepared)
        groups: dict[tuple[int, bool], list[tuple[int, Any, list[int] | None]]] = {}
        for j, (p, forced, T, _) in enumerate(prepared):
            groups.setdefault((T, forced is not None), []).append((j, p, forced))
        for (T, _), group in groups.items():
            for start in range(0, len(group), self.batch_size):
                chunk = group[start : start + self.batch_size]
                try:
                    traces = self.trace([p for _, p, _ in chunk], [f for _, _, f in chunk], T)
                except InputTooLongError as e:
                    bad = AuditFailure(413, e.reason, e.field, kind=type(e).__name__)
                except MnemoscopeError as e:
                    bad = AuditFailure(422, str(e), kind=type(e).__name__)
                else:
                    for (j, _, _), t in zip(chunk, traces, strict=True):
                        out[j] = (t, self.pieces(t))
                    continue
                for j, _, _ in chunk:
                    out[j] = bad
        done = [o if o is not None else AuditFailure(500, "not traced") for o in out]
        return self.ablate(done, [(p, ps) for p, _, _, ps in prepared])

    def passages_to_ablate(self, trace: PairTrace, pieces: Sequence[str]) -> list[int]:
        """The passages of ``trace`` that state an answer-bearing phrase (pure: the facts of the
        traced answer found as the audit finds them, with the profile's selection,
        :func:`~mnemoscope.features.facts.passages_to_ablate`), before the cap."""
        from mnemoscope.audit.signals import answer_facts, selection_of
        from mnemoscope.features.facts import passages_to_ablate

        facts = answer_facts(
            trace, pieces, margin=self.profile.token_margin, selection=selection_of(self.profile)
        )
        return [int(j) for j in passages_to_ablate(facts)]

    def ablate(
        self, traced: list[Traced], prepared: Sequence[tuple[Any, tuple[str, ...] | None]]
    ) -> list[Traced]:
        """Each trace with its passages (``PairTrace.passages``) and, for two or more, the answer scored
        with each selected passage left out (module doc): ``passage_ablated``, ``passage_logprobs`` and
        ``backend["passage_ablation"]`` = ``{"candidates", "ablated", "dropped", "max_ablations"}``, or
        ``{"skipped": why}`` (the caller's own prompts), or ``{"error": ...}``. All traces' ablated
        prompts are scored together; when that batch fails each trace is scored alone, and one that
        still fails keeps its trace with the error recorded."""
        from mnemoscope.trace.ablation import AblationJob, score_ablations
        from mnemoscope.trace.pair import PreparedPair

        out = list(traced)
        jobs: list[tuple[int, AblationJob, dict[str, Any]]] = []
        for j, (res, (p, passages)) in enumerate(zip(traced, prepared, strict=True)):
            if isinstance(res, AuditFailure) or passages is None:
                continue
            t, pieces = res
            t = dataclasses.replace(t, passages=passages)
            out[j] = (t, pieces)
            if len(passages) < 2:  # leaving the one passage out is the no-context path, traced already
                continue
            # the caller's own prompts (req.prompts): no renderer of ours can leave a passage out of them
            rendered = self.profile.builder.build(join_passages(passages), t.query, self.tracer.tokenizer)
            if not isinstance(p, PreparedPair) or p.prompt_with != rendered:
                out[j] = (_with_ablation(t, {"skipped": SKIPPED_PROMPTS}), pieces)
                continue
            try:
                candidates = self.passages_to_ablate(t, pieces)
            except MnemoscopeError as e:
                out[j] = (_with_ablation(t, {"error": f"{type(e).__name__}: {e}"}), pieces)
                continue
            keep = candidates[: self.max_ablations]
            info = {
                "candidates": candidates,
                "ablated": keep,
                "dropped": candidates[len(keep) :],
                "max_ablations": self.max_ablations,
            }
            out[j] = (_with_ablation(t, info), pieces)
            if keep:
                job = AblationJob(
                    query=t.query,
                    passages=passages,
                    ablate=tuple(keep),
                    answer_ids=t.answer_ids,
                    no_context=t.logprob_answer_without,
                    id=t.id,
                )
                jobs.append((j, job, info))
        if not jobs:
            return out
        builder = self.profile.builder
        scored: list[Any]
        try:
            scored = score_ablations(self.tracer, builder, [job for _, job, _ in jobs])
        except MnemoscopeError:
            scored = []
            for _, job, _ in jobs:  # one at a time: one bad job does not cost the others theirs
                try:
                    scored.append(score_ablations(self.tracer, builder, [job])[0])
                except MnemoscopeError as e:
                    scored.append(e)
        for (j, job, info), lp in zip(jobs, scored, strict=True):
            res = out[j]
            assert not isinstance(res, AuditFailure)
            t, pieces = res
            if isinstance(lp, BaseException):
                out[j] = (
                    _with_ablation(t, {**info, "ablated": [], "error": f"{type(lp).__name__}: {lp}"}),
                    pieces,
                )
            else:
                out[j] = (dataclasses.replace(t, passage_ablated=job.ablate, passage_logprobs=lp), pieces)
        return out

    def pieces(self, trace: PairTrace) -> list[str]:
        return answer_pieces(self.tracer.tokenizer, trace.answer_ids.tolist())

    def result_fields(self, trace: PairTrace) -> dict[str, Any]:
        # an audit of passages says which were left out and scored (none otherwise: results as before)
        info = _backend_of(trace).get("passage_ablation")
        return {"passage_ablation": dict(info)} if info is not None else {}

    def notes(self, trace: PairTrace) -> list[str]:
        info = _backend_of(trace).get("passage_ablation") or {}
        out = []
        if info.get("dropped"):
            out.append(
                f"{len(info['candidates'])} passages state an answer-bearing phrase; only the first "
                f"{info['max_ablations']} were left out and scored (max_ablations), not passages {info['dropped']}"
            )
        if info.get("error"):
            out.append(f"the passages could not be left out and scored: {info['error']}")
        if info.get("skipped"):
            out.append(f"passages not left out: {info['skipped']}")
        return out


def _backend_of(trace: PairTrace) -> dict[str, Any]:
    return dict(trace.backend) if isinstance(trace.backend, dict) else {}


def _with_ablation(trace: PairTrace, info: dict[str, Any]) -> PairTrace:
    """``trace`` with ``backend["passage_ablation"] = info``."""
    return dataclasses.replace(trace, backend={**_backend_of(trace), "passage_ablation": info})


# -- over an endpoint ------------------------------------------------------------------------------


def check_endpoint_identity(
    client: EndpointClient, fp: EndpointFingerprint, what: str
) -> EndpointFingerprint:
    """Fingerprint the server and refuse when it is not the model ``fp`` was taken from."""
    now = client.fingerprint()
    why = compare_fingerprints(fp, now)
    if why is not None:
        raise ProfileError(
            f"{what} was calibrated against {fp.model_id} (fingerprint {fp.digest[:12]}), but the model served "
            f"at {client.endpoint} ({now.model_id}, fingerprint {now.digest[:12]}) differs: {why}; calibrate "
            "against this server with `mnemoscope calibrate --endpoint`"
        )
    return now


class EndpointBackend:
    """A model behind an OpenAI-compatible server (module doc).

    Args:
        client: the server's client (its ``concurrency`` bounds the requests in flight).
        profile: an endpoint profile (``mnemoscope calibrate --endpoint``).
        check_identity: fingerprint the server and refuse another model than the profile's.
        max_context_chars, max_query_chars: input caps in characters (413 above them).
        batch_size: records per batch of a batch file.
    """

    name = "endpoint"
    hidden_states = False
    #: the closed-book greedy answer can be generated (one more completion request per audit)
    closed_book_answer = True

    def __init__(
        self,
        client: EndpointClient,
        profile: AuditProfile,
        *,
        check_identity: bool = True,
        max_context_chars: int = 32_000,
        max_query_chars: int = 4_000,
        batch_size: int = 8,
    ):
        if profile.endpoint is None:
            raise ProfileError(
                f"{profile.path} is an in-process profile: over an endpoint, calibrate one against the server "
                "with `mnemoscope calibrate --endpoint URL --out DIR`"
            )
        self.client = client
        self.profile = profile
        self.settings = profile.endpoint
        self.caps = client.require_teacher_forcing()
        client.require_top_k(self.settings.pair_config.top_k)
        self.served = (
            check_endpoint_identity(client, self.settings.fingerprint, f"the endpoint profile {profile.path}")
            if check_identity
            else None
        )
        self.max_context_chars = max_context_chars
        self.max_query_chars = max_query_chars
        self.batch_size = batch_size

    @classmethod
    def open(
        cls, client: EndpointClient, profile: AuditProfile | str | Path, *, rule: str = "combined", **kw: Any
    ) -> EndpointBackend:
        """The backend of an endpoint profile (a loaded one or its folder), refusing a ``rule`` it cannot
        run before any request to the server; ``kw``: the constructor's keyword arguments."""
        from mnemoscope.audit.profile import load_profile
        from mnemoscope.audit.verdict import get_rule

        prof = profile if isinstance(profile, AuditProfile) else load_profile(profile, backend="endpoint")
        get_rule(rule).check(prof, hidden_states=False)
        return cls(client, prof, **kw)

    @property
    def model_info(self) -> dict[str, Any]:
        return dict(self.profile.model)

    @property
    def identity_settings(self) -> dict[str, Any]:
        return {
            "backend": "endpoint",
            "endpoint_method": self.caps.method,
            "top_k": self.settings.pair_config.top_k,
        }

    @property
    def limits(self) -> dict[str, int]:
        return {"max_context_chars": self.max_context_chars, "max_query_chars": self.max_query_chars}

    def prepare(self, i: int, req: AuditRequest) -> tuple[str, AuditRequest] | AuditFailure:
        bad = check_request(req, self.profile.max_new_tokens)
        if bad is not None:
            return bad
        for text, name, cap in (
            (request_context(req), "context", self.max_context_chars),
            (req.query, "query", self.max_query_chars),
        ):
            if len(text) > cap:
                return AuditFailure(
                    413,
                    f"{name} has {len(text)} characters; the limit is {cap}",
                    name,
                    kind="InputTooLongError",
                )
        return (req.id if req.id is not None else str(i)), req

    def trace_one(self, rid: str, req: AuditRequest) -> tuple[PairTrace, list[str]]:
        """Trace one request; a profile that reads the closed-book answer gets it with the trace (of the
        profile's T tokens, made as calibration made it: :func:`~mnemoscope.audit.tracing.trace_records`
        with ``closed_book``), so the audits' signal is the one the threshold was certified on.
        Passages are carried on the trace, not left out (:data:`NOT_MEASURED`)."""
        t, pieces = self._trace_one(rid, req)
        passages = request_passages(req)
        if passages is None:
            return t, pieces
        backend = _backend_of(t)
        if len(passages) >= 2:
            backend["passage_ablation"] = {"skipped": NOT_MEASURED}
        return dataclasses.replace(t, passages=passages, backend=backend), pieces

    def _trace_one(self, rid: str, req: AuditRequest) -> tuple[PairTrace, list[str]]:
        cb = self.profile.max_new_tokens if self.profile.reads_closed_book else None
        if req.prompts is not None:
            p_with, p_without = req.prompts
            return trace_endpoint_prompts(
                self.client,
                rid,
                p_with,
                p_without,
                self.settings.pair_config,
                answer=req.answer,
                max_new_tokens=req.max_new_tokens,
                context=request_context(req),
                query=req.query,
                template={"prerendered": True, **(req.prompt_info or {})},
                served=req.served_logprobs,
                closed_book_tokens=cb,
            )
        return trace_endpoint_pair(
            self.client,
            rid,
            request_context(req),
            req.query,
            self.settings.pair_config,
            answer=req.answer,
            max_new_tokens=req.max_new_tokens,
            closed_book_tokens=cb,
        )

    def run(self, prepared: Sequence[tuple[str, AuditRequest]]) -> list[Traced]:
        """Trace concurrently (``client.config.concurrency``); a failing record gets its own failure.
        A profile that reads the closed-book answer gets it with the trace (:meth:`trace_one`)."""
        got = map_concurrently(lambda p: self.trace_one(*p), list(prepared), self.client.config.concurrency)
        return [failure_of(r) if isinstance(r, BaseException) else (r[0], list(r[1])) for r in got]

    def pieces(self, trace: PairTrace) -> list[str]:
        raise InputError("over an endpoint the answer pieces come with the trace (the server's own tokens)")

    def result_fields(self, trace: PairTrace) -> dict[str, Any]:
        backend = trace.backend if isinstance(trace.backend, dict) else {}
        return {
            "backend": "endpoint",
            # the path that scored THIS record (under auto, a fallback when the first one refused it)
            "endpoint_method": str(backend.get("method") or self.caps.method),
            "endpoint": self.client.endpoint,
            "unavailable": list(UNMEASURED),
            # the paths that failed this record before the one that scored it (auto), with the cause
            "fallbacks": [dict(f) for f in backend.get("fallbacks", [])],
            # answer positions whose log-prob is an upper bound (the token was outside the top-k)
            "bounded": bool(backend.get("bounded", False)),
            "bounded_positions": dict(backend.get("bounded_positions") or {}),
            # passages are not left out over an endpoint (module doc): said, not silent
            **(
                {"passage_ablation": NOT_MEASURED}
                if trace.passages is not None and len(trace.passages) >= 2
                else {}
            ),
        }

    def notes(self, trace: PairTrace) -> list[str]:
        backend = trace.backend if isinstance(trace.backend, dict) else {}
        ablation = (
            ["over an endpoint: the passages are not left out one by one (passage_ablation not measured)"]
            if trace.passages is not None and len(trace.passages) >= 2
            else []
        )
        return [
            *[str(n) for n in backend.get("notes", [])],
            "over an endpoint: hidden-state signals (CRM, SCAR, RADAR) are not measured",
            *ablation,
        ]
