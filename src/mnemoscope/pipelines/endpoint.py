"""Auditing a model behind an OpenAI-compatible server: profiles, the endpoint auditor, RePCS files.

The verdict is still decided by :class:`mnemoscope.pipelines.audit.Auditor` (``score``,
``trace_signals``, ``decide_source``); this module only supplies the traces
(:func:`mnemoscope.trace.endpoint.trace_endpoint_pair`) and a profile whose signals are all
measurable over an endpoint:

* **Endpoint profile** (``mnemoscope calibrate --endpoint URL``): ``profile.json`` with
  ``"backend": "endpoint"``: the served model's identity (reported id + probe fingerprint,
  :class:`~mnemoscope.models.endpoint.EndpointFingerprint`), the prompt settings and the chat
  template used, T and k, RePCS's tau on the top-k estimate of Z, the token margin, and a
  verdict model over black-box signals only (``repcs_z`` from top-k, ``closed_book_logprob``,
  ``context_token_fraction``). No CRM: hidden states are not available over HTTP.
* **EndpointAuditor**: the same ``audit`` / ``audit_one`` / ``identity`` surface as
  :class:`Auditor` (so ``run_audit_file`` and the server use it unchanged); each result adds
  ``backend: "endpoint"``, ``endpoint_method`` and ``unavailable`` (what was not measured).
  Records are traced concurrently (``concurrency``); a failing record becomes an
  :class:`AuditFailure` naming the endpoint and the others go on.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from mnemoscope.detectors.crm_artifact import FittedCRM
from mnemoscope.detectors.repcs import RePCS
from mnemoscope.errors import InputError, InputTooLongError, MnemoscopeError
from mnemoscope.models.endpoint import (
    EndpointClient,
    EndpointError,
    EndpointFingerprint,
    TokenAlignmentError,
    compare_fingerprints,
    map_concurrently,
)
from mnemoscope.pipelines.audit import (
    RULES,
    AuditFailure,
    Auditor,
    AuditRequest,
    AuditResult,
    Rule,
    check_request,
)
from mnemoscope.pipelines.profile import AnomalyRule, AuditProfile, ProfileError
from mnemoscope.trace.endpoint import (
    UNMEASURED,
    ChatTemplate,
    EndpointPairConfig,
    trace_endpoint_pair,
)
from mnemoscope.trace.templates import PromptBuilder
from mnemoscope.trace.types import PairTrace

__all__ = [
    "BLACK_BOX_SIGNALS",
    "ENDPOINT_PROFILE_FORMAT",
    "EndpointAuditResult",
    "EndpointAuditor",
    "EndpointCalibrationConfig",
    "EndpointProfile",
    "calibrate_endpoint_profile",
    "endpoint_model_info",
    "load_endpoint_profile",
    "score_file_endpoint",
    "trace_records",
]

log = logging.getLogger(__name__)
ENDPOINT_PROFILE_FORMAT = "mnemoscope-endpoint-profile/1"
BLACK_BOX_SIGNALS: tuple[str, ...] = ("repcs_z", "closed_book_logprob", "context_token_fraction")


def endpoint_model_info(client: EndpointClient, fp: EndpointFingerprint) -> dict[str, Any]:
    """A model identity dict shaped like ``ModelInfo.to_dict()`` for a served model."""
    return {
        "name": client.model,
        "spec": "endpoint",
        "source": "endpoint",
        "fingerprint": f"endpoint:{fp.digest}",
        "endpoint": client.endpoint,
        "endpoint_fingerprint": fp.to_dict(),
        "adapter": None,
    }


def _empty_crm(model: dict[str, Any]) -> FittedCRM:
    """CRM without layers: what an endpoint profile holds (no hidden states over HTTP)."""
    return FittedCRM(
        layers=np.zeros(0, dtype=np.int64),
        directions=np.zeros((0, 0), dtype=np.float32),
        lts_mean=np.zeros(0),
        lts_std=np.zeros(0),
        surface_names=(),
        scaler_mean=None,
        scaler_scale=None,
        classifier="none",
        model=model,
        settings={"note": "endpoint profile: hidden states are not available, no CRM"},
    )


# -- profiles --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EndpointCalibrationConfig:
    """Settings of ``mnemoscope calibrate --endpoint`` (see :class:`CalibrationConfig` for the shared ones)."""

    template: str = "A"
    task: str = "plain"
    chat_template: str | None = "none"
    eos_text: str | None = None
    max_new_tokens: int = 32
    top_k: int = 20
    repcs_alpha: float = 0.05
    verdict_alpha: float = 0.05
    verdict_candidates: tuple[str, ...] = BLACK_BOX_SIGNALS
    conformal_fraction: float = 0.5
    token_margin_quantile: float = 0.9
    seed: int = 42

    def __post_init__(self) -> None:
        bad = sorted(set(self.verdict_candidates) - set(BLACK_BOX_SIGNALS))
        if bad:
            raise InputError(
                f"verdict signals {bad} need hidden states, unavailable over an endpoint; "
                f"choose among {list(BLACK_BOX_SIGNALS)}",
                field="verdict_candidates",
            )


@dataclass
class EndpointProfile:
    """A loaded, verified endpoint profile: the :class:`AuditProfile` the auditor scores with
    (no CRM) plus what it takes to trace the same way again."""

    audit: AuditProfile
    pair_config: EndpointPairConfig
    fingerprint: EndpointFingerprint

    @property
    def header(self) -> dict[str, Any]:
        return self.audit.header

    @property
    def path(self) -> Path:
        return self.audit.path


def _hash_header(header: dict[str, Any]) -> str:
    import hashlib

    from mnemoscope.io import canonical_json

    return hashlib.sha256(
        canonical_json({k: v for k, v in header.items() if k != "profile_hash"})
    ).hexdigest()


def load_endpoint_profile(path: str | Path) -> EndpointProfile:
    """Read and verify an endpoint profile folder (hash over ``profile.json``).

    Raises:
        ProfileError: missing, not an endpoint profile, or altered.
    """
    from mnemoscope.detectors.verdict import VerdictModel

    path = Path(path)
    hp = path / "profile.json" if path.is_dir() else path
    if not hp.is_file():
        raise ProfileError(
            f"no endpoint profile at {path}; run `mnemoscope calibrate --endpoint URL --out DIR`"
        )
    try:
        header = json.loads(hp.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ProfileError(f"{hp} is not valid JSON ({e.msg})") from e
    if header.get("format") != ENDPOINT_PROFILE_FORMAT:
        raise ProfileError(
            f"{hp} is not an endpoint profile (format {header.get('format')!r}): profiles calibrated "
            "in-process need hidden states and the in-process model's weights; calibrate one against the "
            "server with `mnemoscope calibrate --endpoint URL --out DIR`"
        )
    got = _hash_header(header)
    if got != header.get("profile_hash"):
        raise ProfileError(f"{hp}: profile hash mismatch (profile.json altered after calibration)")
    p = header["prompt"]
    builder = PromptBuilder(
        template=p["template"], task=p["task"], chat=bool(p["chat"]), system_prompt=p.get("system_prompt")
    )
    tpl = ChatTemplate.from_dict(header["chat_template"])
    audit = AuditProfile(
        path=hp.parent,
        header=header,
        crm=_empty_crm(header["model"]),
        anomaly=AnomalyRule(),
        repcs_tau=float(header["repcs"]["tau"]),
        repcs_params=dict(header["repcs"]["params"]),
        content_hash=got,
        model=header["model"],
        verdict=None if header.get("verdict") is None else VerdictModel.from_dict(header["verdict"]),
        token_margin=float(header["token_attribution"]["margin"]),
    )
    cfg = EndpointPairConfig(
        builder=builder,
        template=tpl,
        max_new_tokens=int(header["max_new_tokens"]),
        top_k=int(header["top_k"]),
    )
    return EndpointProfile(audit, cfg, EndpointFingerprint.from_dict(header["model"]["endpoint_fingerprint"]))


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


# -- tracing many records --------------------------------------------------------------------------


@dataclass
class TracedRecords:
    traces: list[PairTrace] = field(default_factory=list)
    pieces: list[list[str]] = field(default_factory=list)
    records: list[Any] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0


def trace_records(
    client: EndpointClient,
    records: Sequence[Any],
    config: EndpointPairConfig,
    *,
    progress: bool = False,
    on_error: str = "skip",
) -> TracedRecords:
    """Trace ``records`` (objects with id/context/query/label) through the server, concurrently.

    A record that fails is listed in ``failures`` (id, line, message) and the batch goes on;
    ``on_error="raise"`` re-raises the first failure.
    """
    from tqdm.auto import tqdm

    client.require_teacher_forcing()
    client.require_top_k(config.top_k)
    out = TracedRecords()
    t0 = time.perf_counter()
    bar = tqdm(total=len(records), disable=not progress, desc="endpoint trace", unit="pair")

    def one(r: Any) -> tuple[PairTrace, list[str]]:
        try:
            return trace_endpoint_pair(client, str(r.id), r.context, r.query, config, label=r.label)
        finally:
            bar.update(1)

    results = map_concurrently(one, list(records), client.config.concurrency)
    bar.close()
    for r, res in zip(records, results, strict=True):
        if isinstance(res, BaseException):
            if on_error == "raise":
                raise res
            if not isinstance(res, MnemoscopeError):
                log.debug("endpoint trace of %s failed", r.id, exc_info=res)
            out.failures.append(
                {"id": r.id, "line": getattr(r, "line", None), "message": f"{type(res).__name__}: {res}"}
            )
            continue
        t, pc = res
        out.traces.append(t)
        out.pieces.append(pc)
        out.records.append(r)
    out.seconds = time.perf_counter() - t0
    return out


def calibrate_endpoint_profile(
    client: EndpointClient,
    records: Sequence[Any],
    out: str | Path,
    config: EndpointCalibrationConfig | None = None,
    *,
    progress: bool = True,
    input_errors: Sequence[Any] = (),
) -> EndpointProfile:
    """Trace ``records`` through the server and fit RePCS's tau (top-k Z), the token margin and the
    black-box verdict model; write ``out/profile.json``.

    Raises:
        InputError: too few traced records or no clean one.
        EndpointCapabilityError: the server cannot teacher-force (no prompt log-probs, no tokenizer).
    """
    from mnemoscope.io import atomic_write
    from mnemoscope.pipelines.profile import data_hash, fit_verdict
    from mnemoscope.trace.endpoint import load_chat_template

    c = config or EndpointCalibrationConfig()
    caps = client.require_teacher_forcing()
    tpl = load_chat_template(c.chat_template, eos_text=c.eos_text)
    builder = PromptBuilder(template=c.template, task=c.task, chat=tpl.chat_template is not None)
    pcfg = EndpointPairConfig(builder=builder, template=tpl, max_new_tokens=c.max_new_tokens, top_k=c.top_k)
    fp = client.fingerprint()
    traced = trace_records(client, records, pcfg, progress=progress)
    pairs, pieces = traced.traces, traced.pieces
    n = len(pairs)
    if n < 4:
        why = "; ".join(f["message"] for f in traced.failures[:3])
        raise InputError(
            f"calibration needs at least 4 traced records, got {n}" + (f" ({why})" if why else "")
        )
    labels_list = [t.label for t in pairs]
    labels = None if any(v is None for v in labels_list) else np.array(labels_list, dtype=int)
    clean = np.ones(n, bool) if labels is None else labels == 0
    if int(clean.sum()) < 2:
        raise InputError(
            "calibration needs at least 2 clean records (label 0, or unlabelled input)", field="label"
        )
    repcs = RePCS(alpha=c.repcs_alpha, max_steps=c.max_new_tokens, estimator="topk", k=c.top_k)
    repcs.fit(pairs, labels)
    from mnemoscope.pipelines.profile import CalibrationConfig

    vc = CalibrationConfig(
        verdict_alpha=c.verdict_alpha,
        verdict_candidates=c.verdict_candidates,
        conformal_fraction=c.conformal_fraction,
        token_margin_quantile=c.token_margin_quantile,
        seed=c.seed,
    )
    margin, verdict = fit_verdict(None, pairs, labels, repcs, vc, None, pieces=pieces)
    outp = Path(out)
    outp.mkdir(parents=True, exist_ok=True)
    header: dict[str, Any] = {
        "format": ENDPOINT_PROFILE_FORMAT,
        "backend": "endpoint",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "model": endpoint_model_info(client, fp),
        "endpoint": client.config.to_dict(),
        "endpoint_method": caps.method,
        "capabilities": caps.to_dict(),
        "prompt": builder.to_dict(),
        "chat_template": tpl.to_dict(),
        "max_new_tokens": c.max_new_tokens,
        "top_k": c.top_k,
        "config": asdict(c),
        "repcs": repcs.calibration_record(kl_source=f"endpoint top-k estimate (k={c.top_k})"),
        "token_attribution": {
            "margin": margin,
            "quantile": c.token_margin_quantile,
            "note": "a word is context-supported when log p(word | c, q) - log p(word | q) exceeds the margin",
        },
        "verdict": None if verdict is None else verdict.to_dict(),
        "unavailable": list(UNMEASURED),
        "data": {
            "sha256": data_hash(records),
            "n_records": len(records) + len(input_errors),
            "n_traced": n,
            "n_clean": int(clean.sum()),
            "n_memory": None if labels is None else int((labels == 1).sum()),
            "n_errors": len(traced.failures) + len(input_errors),
            "failures": traced.failures[:50],
            "seconds": round(traced.seconds, 1),
        },
    }
    header["profile_hash"] = _hash_header(header)
    atomic_write(outp / "profile.json", json.dumps(header, indent=1, default=str))
    return load_endpoint_profile(outp)


# -- the auditor -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class EndpointAuditResult(AuditResult):
    """An :class:`AuditResult` measured over an endpoint: the same fields, plus ``backend``,
    ``endpoint_method`` and ``unavailable`` (signals not measured, never filled in)."""

    backend: str = "endpoint"
    endpoint_method: str = ""
    endpoint: str = ""
    unavailable: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        d.update(
            backend=self.backend,
            endpoint_method=self.endpoint_method,
            endpoint=self.endpoint,
            unavailable=list(self.unavailable),
        )
        return d


def _failure_of(e: BaseException) -> AuditFailure:
    if isinstance(e, InputTooLongError):
        return AuditFailure(413, e.reason, e.field)
    if isinstance(e, TokenAlignmentError):
        return AuditFailure(422, str(e))
    if isinstance(e, EndpointError):
        return AuditFailure(502, str(e))
    if isinstance(e, InputError):
        return AuditFailure(422, e.reason, e.field)
    return AuditFailure(500, f"{type(e).__name__}: {e}")


class EndpointAuditor(Auditor):
    """:class:`Auditor` over a served model (module doc). Scores with :meth:`Auditor.score`.

    Args:
        client: the server's client.
        profile: an endpoint profile (:func:`load_endpoint_profile`).
        rule: ``"combined"`` or ``"repcs"`` (``"crm-anomaly"`` needs hidden states).
        check_identity: fingerprint the server and refuse another model than the profile's.
        max_context_chars, max_query_chars: input caps in characters (413 above; the server
            enforces its own window).
    """

    def __init__(
        self,
        client: EndpointClient,
        profile: EndpointProfile,
        *,
        rule: Rule = "combined",
        batch_size: int = 8,
        check_identity: bool = True,
        max_context_chars: int = 32_000,
        max_query_chars: int = 4_000,
    ):
        if rule not in RULES:
            raise InputError(f"unknown rule {rule!r}; choose one of {list(RULES)}", field="rule")
        if rule == "crm-anomaly":
            raise InputError(
                "the crm-anomaly rule needs hidden states, unavailable over an endpoint", field="rule"
            )
        if rule == "combined" and profile.audit.verdict is None:
            raise InputError(
                f"the endpoint profile {profile.path} has no verdict model (calibrated without both labels); "
                "use rule='repcs'",
                field="rule",
            )
        self.client = client
        self.endpoint_profile = profile
        self.caps = client.require_teacher_forcing()
        client.require_top_k(profile.pair_config.top_k)
        self.served = check_identity_or_none(client, profile, check_identity)
        self.profile = profile.audit
        self.rule = rule
        self.batch_size = batch_size
        self.max_context_chars = max_context_chars
        self.max_query_chars = max_query_chars
        self.max_context_tokens = max_context_chars
        self.max_query_tokens = max_query_chars
        self.max_answer_tokens = 256
        self._repcs = RePCS.from_calibration(profile.header["repcs"])
        self._crm_probability = False

    @property
    def model_info(self) -> dict[str, Any]:
        return dict(self.profile.model)

    @property
    def identity(self) -> dict[str, Any]:
        info = self.model_info
        return {
            "model": {k: info.get(k) for k in ("name", "spec", "fingerprint", "adapter")},
            "profile_hash": self.profile.content_hash,
            "settings": {
                "rule": self.rule,
                "max_new_tokens": self.profile.max_new_tokens,
                "prompt": self.profile.header["prompt"],
                "backend": "endpoint",
                "endpoint_method": self.caps.method,
                "top_k": self.endpoint_profile.pair_config.top_k,
            },
        }

    def _check(self, i: int, req: AuditRequest) -> AuditFailure | None:
        bad = check_request(req, self.profile.max_new_tokens)
        if bad is not None:
            return bad
        for text, name, cap in (
            (req.context, "context", self.max_context_chars),
            (req.query, "query", self.max_query_chars),
        ):
            if len(text) > cap:
                return AuditFailure(413, f"{name} has {len(text)} characters; the limit is {cap}", name)
        return None

    def trace_one(self, i: int, req: AuditRequest) -> tuple[PairTrace, list[str]]:
        return trace_endpoint_pair(
            self.client,
            req.id if req.id is not None else str(i),
            req.context,
            req.query,
            self.endpoint_profile.pair_config,
            answer=req.answer,
            max_new_tokens=req.max_new_tokens,
        )

    def score_endpoint(self, t: PairTrace, pieces: Sequence[str]) -> EndpointAuditResult:
        """:meth:`Auditor.score` on an endpoint trace, with the endpoint's fields added."""
        res = self.score(t, pieces)
        notes = [*res.notes, *[str(n) for n in t.backend.get("notes", [])]]  # type: ignore[attr-defined]
        notes.append("over an endpoint: hidden-state signals (CRM, SCAR, RADAR) are not measured")
        base = {f.name: getattr(res, f.name) for f in fields(AuditResult)}
        base["notes"] = notes
        return EndpointAuditResult(
            **base,
            endpoint_method=self.caps.method,
            endpoint=self.client.endpoint,
            unavailable=list(UNMEASURED),
        )

    def audit(self, requests: Sequence[AuditRequest]) -> list[AuditResult | AuditFailure]:  # type: ignore[override]
        """Audit a batch concurrently; a failing record gets its own :class:`AuditFailure`."""
        out: list[AuditResult | AuditFailure | None] = [None] * len(requests)
        todo: list[tuple[int, AuditRequest]] = []
        for i, req in enumerate(requests):
            bad = self._check(i, req)
            if bad is not None:
                out[i] = bad
            else:
                todo.append((i, req))
        results = map_concurrently(lambda ir: self.trace_one(*ir), todo, self.client.config.concurrency)
        for (i, _), res in zip(todo, results, strict=True):
            if isinstance(res, BaseException):
                out[i] = _failure_of(res)
                continue
            t, pieces = res
            try:
                out[i] = self.score_endpoint(t, pieces)
            except MnemoscopeError as e:
                out[i] = _failure_of(e)
        return [o if o is not None else AuditFailure(500, "not audited") for o in out]


def check_identity_or_none(
    client: EndpointClient, profile: EndpointProfile, check: bool
) -> EndpointFingerprint | None:
    if not check:
        return None
    return check_endpoint_identity(client, profile.fingerprint, f"the endpoint profile {profile.path}")


# -- RePCS over an endpoint ------------------------------------------------------------------------


def score_file_endpoint(
    client: EndpointClient,
    calibration: str | Path,
    input_path: str | Path,
    out: str | Path,
    *,
    on_error: str = "skip",
    progress: bool = True,
    check_model: bool = True,
    chat_template: str | None = None,
) -> dict[str, Any]:
    """``repcs score`` over an endpoint: an endpoint profile folder, or a ``repcs calibrate --endpoint``
    JSON. Output lines are ``{"id", "score": -Z, **repcs_verdict(...), "backend", "endpoint_method"}``."""
    from mnemoscope.data import read_records
    from mnemoscope.pipelines.repcs import repcs_verdict
    from mnemoscope.trace.endpoint import load_chat_template

    p = Path(calibration)
    if p.is_dir() or p.name == "profile.json":
        prof = load_endpoint_profile(p)
        det = RePCS.from_calibration(prof.header["repcs"])
        pcfg = prof.pair_config
        fp = prof.fingerprint
    else:
        try:
            rec = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise InputError(f"cannot read the calibration {p}: {e}") from e
        model = rec.get("model") or {}
        if model.get("spec") != "endpoint":
            raise ProfileError(
                f"{p} was calibrated in-process on {model.get('name')}, not against an endpoint (its tau is on "
                "full-vocabulary KL); recalibrate with `mnemoscope repcs calibrate --endpoint`"
            )
        det = RePCS.from_calibration(rec)
        pc = rec.get("pair_config", {})
        tpl = (
            ChatTemplate.from_dict(rec["chat_template"])
            if rec.get("chat_template")
            else load_chat_template(chat_template)
        )
        pcfg = EndpointPairConfig(
            builder=PromptBuilder(
                template=pc.get("template", "A"), task=pc.get("task") or "plain", chat=bool(pc.get("chat"))
            ),
            template=tpl,
            max_new_tokens=int(pc.get("max_new_tokens", rec.get("T") or 32)),
            top_k=int(pc.get("top_k", 20)),
        )
        fp = EndpointFingerprint.from_dict(model["endpoint_fingerprint"])
    caps = client.require_teacher_forcing()
    if check_model:
        check_endpoint_identity(client, fp, str(p))
    outp = Path(out)
    done: set[str] = set()
    if outp.is_file():
        for line in outp.read_text(encoding="utf-8").splitlines():
            try:
                done.add(json.loads(line)["id"])
            except (json.JSONDecodeError, KeyError):
                continue
    records, errors = read_records(input_path, on_error=on_error)  # type: ignore[arg-type]
    bad = [e.to_dict() for e in errors]
    todo = [r for r in records if r.id not in done]
    traced = trace_records(client, todo, pcfg, progress=progress, on_error=on_error)
    bad.extend(
        {"line": f.get("line"), "id": f["id"], "field": None, "message": f["message"]}
        for f in traced.failures
    )
    with outp.open("a", encoding="utf-8") as f:
        for t in traced.traces:
            v = repcs_verdict(det, t)
            f.write(
                json.dumps(
                    {
                        "id": t.id,
                        "score": -v["kl"],
                        **v,
                        "backend": "endpoint",
                        "endpoint_method": caps.method,
                    }
                )
                + "\n"
            )
    return {"scored": len(traced.traces), "already_done": len(done), "errors": bad, "out": str(outp)}


# -- chat-only APIs: the weaker test ---------------------------------------------------------------

CLOSED_BOOK_LABEL = (
    "closed-book generation comparison: a different, weaker test than RePCS (no teacher forcing, no "
    "verdict, no guarantee); an answer the model also gives without the context did not need the context"
)


def closed_book_comparison(
    client: EndpointClient,
    context: str,
    query: str,
    *,
    template: str = "A",
    max_tokens: int = 32,
) -> dict[str, Any]:
    """What is sound on a chat-only API (no prompt log-probs): generate the answer with and without
    the context through ``/v1/chat/completions`` (greedy) and compare the two generations.

    Returns the two answers, whether they match after normalisation, their word overlap
    (Jaccard) and ``label`` (:data:`CLOSED_BOOK_LABEL`). No verdict is derived from it.
    """
    import re

    b = PromptBuilder(template=template, chat=False)

    def ask(ctx: str) -> str:
        body = {
            "model": client.model,
            "messages": [{"role": "user", "content": b.render(ctx, query)}],
            "temperature": 0.0,
            "max_tokens": max_tokens,
        }
        data = client.request("POST", "/chat/completions", body)
        try:
            return str(data["choices"][0]["message"]["content"] or "")
        except (KeyError, IndexError, TypeError) as e:
            raise EndpointError("POST /chat/completions returned no message", endpoint=client.endpoint) from e

    with_ctx, without = ask(context), ask("")

    def words(s: str) -> set[str]:
        return set(re.findall(r"\w+", s.lower()))

    a, b2 = words(with_ctx), words(without)
    return {
        "test": "closed-book-comparison",
        "label": CLOSED_BOOK_LABEL,
        "answer_with_context": with_ctx,
        "answer_without_context": without,
        "same_answer": " ".join(sorted(a)) == " ".join(sorted(b2)),
        "word_jaccard": len(a & b2) / max(1, len(a | b2)),
        "endpoint": client.endpoint,
        "backend": "endpoint",
        "endpoint_method": "chat-completions-generations",
    }
