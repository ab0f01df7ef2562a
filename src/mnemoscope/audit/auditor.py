"""The audit pipeline: one (context, query) in, a verdict on where the answer came from out.

This module is the only place an audit verdict is decided. The CLI (``mnemoscope audit``),
the server (``/v1/audit``), the integrations and the benchmarks all call :class:`Auditor`::

    >>> # auditor = Auditor.from_spec("default")                 # shipped profile for the default model
    >>> # r = auditor.audit_one("Quenmar lies on the Zorblat.", "Which river is Quenmar on?")
    >>> # r.source, r.p_memory, [s.text for s in r.spans if s.source == "context"]

For each request the answer is decoded once with the context while the no-context path is
fed the same tokens (:func:`mnemoscope.trace.lockstep.trace_lockstep`), which gives per answer
token ``log p(y_t | c, q)``, ``log p(y_t | q)`` and the KL between the two next-token
distributions, plus CRM's last-prompt-token states. From those:

* **signals** (:func:`mnemoscope.audit.signals.measure`, once per audit): RePCS's Z, the
  closed-book log-probability of the answer, the share of context-supported words, CRM's LTS
  anomaly score; **token attribution**: every token context / memory / neutral, merged into spans;
* **the verdict** (:func:`mnemoscope.audit.verdict.decide`, pure): p_memory from the
  profile's :class:`~mnemoscope.detectors.verdict.VerdictModel`, the rule's memory flag with
  its guarantee, and the source (``context``, ``memory``, ``mixed`` or ``undetermined``) with a
  sentence saying why.

Where the traces come from is the backend's business (:mod:`mnemoscope.audit.backends`:
in process, or a model behind an OpenAI-compatible server); :meth:`Auditor.audit` is the one
audit path for both: checks, the backend, the scoring, and :data:`AUDIT_HOOKS` (the
OpenTelemetry span), whoever calls it (CLI, server, proxy, integrations, Ray).

Rules (``rule=``): ``"combined"`` (default: the verdict model's conformal flag), ``"repcs"``
(the RePCS paper: memory iff Z < tau), ``"crm-anomaly"`` (CRM appendix V.1's LTS rule; measured
weak, kept for reproduction). Whatever the rule, an empty context is never flagged.
Batch files go to one results folder (:mod:`mnemoscope.audit.results`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mnemoscope.audit.backends import Backend, LocalBackend, failure_of
from mnemoscope.audit.profile import AuditProfile
from mnemoscope.audit.requests import (
    AuditFailure,
    AuditRequest,
    AuditResult,
    Source,
    check_request,
    check_text,
    input_error_row,
    parse_audit_lines,
    passages_too_long,
    read_audit_inputs,
)
from mnemoscope.audit.results import RESULTS_FORMAT, EarlyStop, ResultsFolder, row_fields
from mnemoscope.audit.signals import answer_pieces, measure, query_match_of, selection_of, trace_signals
from mnemoscope.audit.verdict import RULES, Rule, decide, decide_source, get_rule, unmeasurable_signals
from mnemoscope.detectors.repcs import RePCS
from mnemoscope.errors import InputError, InputTooLongError, MnemoscopeError
from mnemoscope.trace.types import PairTrace

__all__ = [
    "AUDIT_HOOKS",
    "RESULTS_FORMAT",
    "RULES",
    "AuditFailure",
    "AuditRequest",
    "AuditResult",
    "Auditor",
    "Rule",
    "Source",
    "answer_pieces",
    "audit_batch",
    "check_request",
    "check_text",
    "decide_source",
    "input_error_row",
    "parse_audit_lines",
    "read_audit_inputs",
    "run_audit_file",
    "trace_signals",
]

log = logging.getLogger(__name__)

#: Called as ``hook(auditor, requests, results, start_ns)`` after every :meth:`Auditor.audit` batch,
#: whatever the backend (the OpenTelemetry spans of :mod:`mnemoscope.integrations.otel` register
#: here); empty by default.
AUDIT_HOOKS: list[Callable[..., None]] = []


class Auditor:
    """Audits (context, query) pairs with one backend and one verified profile.

    ``Auditor(lm, profile, ...)`` audits in process (a :class:`LocalBackend` is built from the
    keyword arguments below); ``Auditor(backend)`` audits with any backend (e.g. an
    :class:`~mnemoscope.audit.backends.EndpointBackend`).

    Args:
        lm: the loaded model (must be the profile's model), or a backend.
        profile: a verified :class:`~mnemoscope.audit.profile.AuditProfile` (the backend's own
            when a backend is given).
        rule: the memory rule (module doc).
        max_context_tokens, max_query_tokens, max_answer_tokens: input caps (413 above them).
        batch_size: pairs decoded together.
        crm_probability: also compute CRM's supervised classifier (secondary; needs a
            profile with a classifier and a backend with hidden states). Off by default: an
            in-process audit traces hidden states only when an output it was asked for reads
            them (:meth:`~mnemoscope.audit.profile.AuditProfile.needs_hidden_states`: this, the
            ``crm-anomaly`` rule, or a verdict combining a CRM signal); otherwise its ``crm``
            block is empty and the trace keeps no hidden state.
        layout: what the caller asks for besides the profile (``max_new_tokens``, ``stop``, ...):
            refused when it differs from the profile's layout
            (:func:`~mnemoscope.audit.profile.check_layout`, with the backend's own layout).
    """

    def __init__(
        self,
        lm: Any,
        profile: AuditProfile | None = None,
        *,
        rule: Rule = "combined",
        max_context_tokens: int = 2048,
        max_query_tokens: int = 256,
        max_answer_tokens: int = 256,
        batch_size: int = 8,
        crm_probability: bool = False,
        layout: dict[str, Any] | None = None,
    ):
        from mnemoscope.audit.profile import check_layout
        from mnemoscope.audit.validation import profile_status

        rule_obj = get_rule(rule)
        if hasattr(lm, "run") and hasattr(lm, "prepare"):
            backend: Backend = lm
        else:
            if profile is None:
                raise InputError("an in-process Auditor needs a profile (or use Auditor.from_spec)")
            # hidden states only when an output asked for reads them (CRM's signals and rule)
            hidden = profile.needs_hidden_states(rule, crm_probability=crm_probability)
            backend = LocalBackend(
                lm,
                profile,
                max_context_tokens=max_context_tokens,
                max_query_tokens=max_query_tokens,
                max_answer_tokens=max_answer_tokens,
                batch_size=batch_size,
                hidden=hidden,
            )
        prof = backend.profile
        check_layout(prof, {**_backend_layout(backend), **(layout or {})})
        rule_obj.check(prof, hidden_states=backend.hidden_states)
        if rule_obj.needs_hidden_states and prof.crm is None:  # it would never flag: refused, not silent
            raise InputError(
                f"the {rule} rule reads CRM, and the profile {prof.path} was calibrated without it: "
                "calibrate with `mnemoscope calibrate --with-crm`",
                field="rule",
            )
        if prof.verdict is not None:
            missing = unmeasurable_signals(
                prof.verdict.selected_,
                hidden_states=backend.hidden_states,
                closed_book_answer=bool(getattr(backend, "closed_book_answer", backend.hidden_states)),
            )
            if missing:
                raise InputError(
                    f"the profile {prof.path} combines "
                    + ", ".join(f"{k} (needs {v})" for k, v in missing.items())
                    + f", which the {type(backend).__name__} cannot measure: calibrate a profile for this backend",
                    field="profile",
                )
        #: is the profile fit to back a guarantee (pipelines.validation.profile_status); every result says
        self.profile_status = profile_status(prof)
        self.backend = backend
        self.profile = prof
        self.rule: Rule = rule
        self._rule = rule_obj
        self._repcs = RePCS.from_calibration(prof.header["repcs"])
        crm = prof.crm
        needed = prof.verdict is not None and "crm_probability" in prof.verdict.selected_
        self._crm_probability = bool(
            backend.hidden_states
            and getattr(backend, "hidden", True)
            and (crm_probability or needed)
            and crm is not None
            and crm.classifier != "none"
        )

    @classmethod
    def for_model(cls, lm: Any, profile: str | Path | AuditProfile | None = None, **kw: Any) -> Auditor:
        """An in-process auditor of a loaded model with its profile (a folder, a loaded profile, or
        ``None``: the shipped one for the default model); another model's profile is refused."""
        from mnemoscope.audit.profile import default_profile_path, load_profile

        if not isinstance(profile, AuditProfile):
            path = profile if profile is not None else default_profile_path(lm.info)
            profile = load_profile(path, model=lm.info, backend="local")
        return cls(lm, profile, **kw)

    @classmethod
    def from_spec(
        cls,
        model: str = "default",
        *,
        adapter: str | Path | None = None,
        profile: str | Path | None = None,
        device: str | None = None,
        dtype: str | None = None,
        cache_dir: str | None = None,
        **kw: Any,
    ) -> Auditor:
        """Load the model and its profile (the shipped one for the default model when ``profile`` is None)."""
        from mnemoscope.models import load_model

        lm = load_model(model, adapter=adapter, device=device, dtype=dtype, cache_dir=cache_dir)
        return cls.for_model(lm, profile, **kw)

    @classmethod
    def from_endpoint(
        cls, client: Any, profile: str | Path | AuditProfile, *, rule: Rule = "combined", **kw: Any
    ) -> Auditor:
        """An auditor of the model served behind ``client`` (an ``EndpointClient``) with an endpoint
        profile (a folder from ``mnemoscope calibrate --endpoint`` or a loaded profile); ``kw``:
        :class:`~mnemoscope.audit.backends.EndpointBackend`'s options (``check_identity``,
        ``max_context_chars``, ``max_query_chars``, ``batch_size``)."""
        from mnemoscope.audit.backends import EndpointBackend

        return cls(EndpointBackend.open(client, profile, rule=rule, **kw), rule=rule)

    # -- what the backend is --------------------------------------------------------------------

    @property
    def batch_size(self) -> int:
        return int(self.backend.batch_size)

    @property
    def lm(self) -> Any:
        """The in-process model (``None`` over an endpoint)."""
        return getattr(self.backend, "lm", None)

    @property
    def tracer(self) -> Any:
        """The in-process tracer (``None`` over an endpoint: no local tokenizer)."""
        return getattr(self.backend, "tracer", None)

    @property
    def limits(self) -> dict[str, int]:
        """The input caps, named for their unit (tokens in process, characters over an endpoint)."""
        return dict(self.backend.limits)

    @property
    def max_context_tokens(self) -> int | None:
        return self.backend.limits.get("max_context_tokens")

    @property
    def max_query_tokens(self) -> int | None:
        return self.backend.limits.get("max_query_tokens")

    @property
    def max_answer_tokens(self) -> int | None:
        return self.backend.limits.get("max_answer_tokens")

    @property
    def max_context_chars(self) -> int | None:
        return self.backend.limits.get("max_context_chars")

    @property
    def max_query_chars(self) -> int | None:
        return self.backend.limits.get("max_query_chars")

    @property
    def model_info(self) -> dict[str, Any]:
        return self.backend.model_info

    @property
    def identity(self) -> dict[str, Any]:
        """What makes two audits comparable: the model, the profile and the settings; plus, under
        ``"run"``, what a results folder records of this run only and never compares (the
        profile's path: the same profile at another path is the same profile)."""
        info = self.model_info
        return {
            "model": {k: info.get(k) for k in ("name", "spec", "fingerprint", "adapter")},
            "profile_hash": self.profile.content_hash,
            "settings": {
                "rule": self.rule,
                "max_new_tokens": self.profile.max_new_tokens,
                "prompt": self.profile.header["prompt"],
                **self.backend.identity_settings,
            },
            "run": {
                "profile": {"path": str(Path(self.profile.path).resolve()), "hash": self.profile.content_hash}
            },
        }

    # -- auditing -------------------------------------------------------------------------------

    def audit(self, requests: Sequence[AuditRequest]) -> list[AuditResult | AuditFailure]:
        """Audit a batch; the result list is aligned with ``requests``. A bad request gets its own
        :class:`AuditFailure` and the others are still audited. Runs :data:`AUDIT_HOOKS`."""
        started = time.time_ns() if AUDIT_HOOKS else 0
        out: list[AuditResult | AuditFailure | None] = [None] * len(requests)
        todo: list[tuple[int, Any]] = []
        for i, req in enumerate(requests):
            # a request given as passages that does not fit is refused naming the longest passage
            p = passages_too_long(req, self.backend.prepare(i, req))
            if isinstance(p, AuditFailure):
                out[i] = p
            else:
                todo.append((i, p))
        traced = self.backend.run([p for _, p in todo]) if todo else []
        for (i, _), res in zip(todo, traced, strict=True):
            if isinstance(res, AuditFailure):
                out[i] = passages_too_long(requests[i], res)
                continue
            try:
                out[i] = self.score(*res)
            except MnemoscopeError as e:
                out[i] = failure_of(e)
        results = [o if o is not None else AuditFailure(500, "not audited") for o in out]
        for hook in AUDIT_HOOKS:
            hook(self, requests, results, started)
        return results

    def audit_one(self, context: str, query: str, *, answer: str | None = None) -> AuditResult:
        """Audit one pair; raises :class:`InputError` (``InputTooLongError`` for 413) on bad input."""
        (res,) = self.audit([AuditRequest(context, query, answer=answer)])
        if isinstance(res, AuditFailure):
            cls = InputTooLongError if res.status == 413 else InputError
            raise cls(res.message, field=res.field)
        return res

    def score(self, t: PairTrace, pieces: Sequence[str] | None = None) -> AuditResult:
        """Everything after the model call: signals, attribution, verdict (no model call here).

        ``pieces``: the text each answer token adds (default: the backend decodes them).
        """
        prof = self.profile
        if pieces is None:
            pieces = self.backend.pieces(t)
        m = measure(
            t,
            pieces,
            margin=prof.token_margin,
            query_match=query_match_of(prof),
            selection=selection_of(prof),
            repcs=self._repcs,
            crm=prof.crm,
            anomaly=prof.anomaly,
            crm_probability=self._crm_probability,
        )
        v = decide(m, prof, self._rule, self._repcs)
        st = self.profile_status
        notes = list(v.notes)
        if not st["ok"]:
            notes.insert(0, "the profile behind this audit is marked: " + "; ".join(st["reasons"]))
        # stop sequences in effect (both backends' traces cut at them): say where the answer was cut
        cuts = bool(prof.builder.stop)
        return AuditResult(
            source=v.source,
            p_memory=v.p_memory,
            answer=m.answer,
            summary=v.summary,
            rule=self.rule,
            evidence=v.evidence,
            guarantee={**v.guarantee, "profile": st},
            tokens=m.tokens,
            spans=m.spans,
            repcs=v.repcs,
            crm=v.crm,
            n_steps=int(t.n_steps),
            identical_prompts=bool(t.identical_prompts),
            notes=[*notes, *self.backend.notes(t)],
            memory_flag=v.memory_flag,
            # with stop sequences in effect: where the answer was cut (``null``: it ended by itself)
            extra={
                **self.backend.result_fields(t),
                **({"answer_cut": t.answer_cut} if cuts else {}),
            },
        )


def _backend_layout(backend: Any) -> dict[str, Any]:
    """The layout a backend audits with, beyond the profile's own prompt settings: the in-process
    model's chat template (an endpoint backend renders the profile's template by construction)."""
    from mnemoscope.audit.profile import chat_template_sha256

    lm = getattr(backend, "lm", None)
    prompt = backend.profile.header.get("prompt") or {}
    if lm is None or not prompt.get("chat"):
        return {}
    return {"chat_template_sha256": chat_template_sha256(getattr(lm.tokenizer, "chat_template", None))}


# -- batch files -----------------------------------------------------------------------------------


def audit_batch(
    auditor: Auditor, chunk: Sequence[tuple[int, AuditRequest]], *, store_context: bool = False
) -> tuple[list[str], list[dict[str, Any]]]:
    """Audit one batch of ``(line number, request)``: the ``results.jsonl`` lines and the error rows.

    A line is ``{"id", "query", "context_sha256", **AuditResult.to_dict()}``
    (:func:`~mnemoscope.audit.results.row_fields`; ``"context"`` too with ``store_context``).
    The one per-batch step of :func:`run_audit_file`; the Ray engine's actors call it too, so
    both engines write the same bytes for the same batch.
    """
    results = auditor.audit([r for _, r in chunk])
    lines: list[str] = []
    errors: list[dict[str, Any]] = []
    for (lineno, req), res in zip(chunk, results, strict=True):
        if isinstance(res, AuditFailure):
            errors.append({"id": req.id, "line": lineno, **res.to_dict()})
        else:
            row = {"id": req.id, **row_fields(req, store_context=store_context), **res.to_dict()}
            lines.append(json.dumps(row, ensure_ascii=False))
    return lines, errors


def note_outcomes(stop: EarlyStop, n_ok: int, failures: Sequence[dict[str, Any] | AuditFailure]) -> None:
    """Feed a batch's outcomes to an :class:`EarlyStop` (successes first: any success disarms it)."""
    for _ in range(n_ok):
        stop.ok()
    for f in failures:
        if isinstance(f, AuditFailure):
            stop.failed(f.message, kind=f.kind, status=f.status)
        else:
            stop.failed(str(f.get("message")), status=f.get("status"))


def run_audit_file(
    auditor: Auditor,
    input_path: str | Path,
    out_dir: str | Path,
    *,
    progress: bool = True,
    overwrite: bool = False,
    early_stop: int = 8,
    command: Sequence[str] | None = None,
    store_context: bool = False,
) -> dict[str, Any]:
    """Audit every record of a JSONL file into ``out_dir`` (resumable), with any backend.

    Writes a :class:`~mnemoscope.audit.results.ResultsFolder`: ``results.jsonl``
    (``{"id", "query", "context_sha256", **AuditResult.to_dict()}`` per record, appended and
    fsynced batch by batch; the context itself with ``store_context``), ``errors.jsonl``
    (``{"id", "line", "field", "message", "status"}`` per bad record; rewritten each run) and
    ``meta.json`` (the auditor's identity: a folder refuses results of another model, profile or
    rule; and one record per run: ``command`` (default ``sys.argv``), commit, profile path,
    start and end time, rows appended, outcome). A re-run skips ids already in ``results.jsonl``.

    Raises:
        EarlyStopError: the first ``early_stop`` audited records all failed for the same cause
            (``0`` disables it); ``errors.jsonl`` is written first.
    """
    from tqdm.auto import tqdm

    folder = ResultsFolder(out_dir, auditor.identity, overwrite=overwrite, command=command)
    done = folder.done_ids
    todo: list[tuple[int, AuditRequest]] = []
    errors: list[dict[str, Any]] = []
    n_lines = 0
    for lineno, item in read_audit_inputs(input_path):
        n_lines += 1
        if isinstance(item, InputError):
            errors.append(input_error_row(lineno, item))
        elif item.id not in done:
            todo.append((lineno, item))
    n_ok = 0
    stop = EarlyStop(early_stop, what="audit")
    with (
        folder.recording(errors, stopped_by=MnemoscopeError),
        tqdm(total=len(todo), disable=not progress, unit="audit", desc="audit") as bar,
    ):
        for start in range(0, len(todo), auditor.batch_size):
            chunk = todo[start : start + auditor.batch_size]
            lines, failed = audit_batch(auditor, chunk, store_context=store_context)
            errors.extend(failed)
            n_ok += folder.append(lines)
            bar.update(len(chunk))
            note_outcomes(stop, len(lines), failed)
    summary = {
        "records": n_lines,
        "audited": n_ok,
        "skipped_done": len(done),
        "errors": len(errors),
        "out": str(folder.out),
    }
    log.info("audit: %s", summary)
    return summary
