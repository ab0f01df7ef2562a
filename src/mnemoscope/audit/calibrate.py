"""Calibrating an audit profile: one pipeline for every backend (``mnemoscope calibrate``).

:func:`calibrate` draws the records (:mod:`mnemoscope.audit.draw`, with ``per_class``), traces
them once through a :class:`~mnemoscope.audit.tracing.CalibrationTracer` (resumable, under
``out/traces``; the closed-book answer included), verifies their labels on the model being
calibrated (:mod:`mnemoscope.bench.label_check`), splits the kept ones by fact into a
calibration and a held-out part (:func:`~mnemoscope.audit.validation.split_by_fact`), fits
RePCS's tau, the token margin and the verdict model on the calibration part (its conformal
threshold certified on clean answers it is not fitted on), writes ``profile.json``, scores the
stored held-out traces with the saved profile (:meth:`Auditor.score
<mnemoscope.audit.auditor.Auditor.score>`, no second model call) and writes the validation card
(:mod:`mnemoscope.audit.validation`).

In process and over an endpoint differ only in the tracer: :class:`~mnemoscope.audit.tracing.LocalTracer`
(lockstep decoding, no hidden states unless a fitter reads them; its engine is the seam where a
Ray engine plugs in) or :class:`~mnemoscope.audit.tracing.EndpointTracer`. :func:`calibrate_profile`
is the in-process call kept for its many callers.

**Signals beyond the default.** A :class:`SignalFitter` fits what the black-box default does not
compute: CRM (its directions, classifier and anomaly rule, ``crm.npz``) is
:class:`mnemoscope.pipelines.crm.fitter.CRMFitter`, which the command line passes in only when
CRM is asked (``--with-crm``, ``--verdict-signals crm_probability``, a CRM option); the audit
core never imports it. A fitter that reads hidden states makes the local tracer keep them; an
endpoint serves none and refuses it.

:func:`fit_verdict` is the one place the verdict model and the token margin are fitted: this
pipeline and ``benchmarks/verdict_eval.py`` (on each training fold) call it. The anomaly rule and
the profile format are described in :mod:`mnemoscope.audit.profile`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from mnemoscope.audit.draw import draw_for_config
from mnemoscope.audit.profile import AuditProfile, CalibrationConfig, profile_hash
from mnemoscope.audit.signals import answer_pieces, trace_signals
from mnemoscope.audit.tracing import CalibrationTracer, CalibrationTraces, LocalTracer, PairEngine
from mnemoscope.audit.validation import held_out_row, split_by_fact, write_validation
from mnemoscope.bench.label_check import (
    LabelCheck,
    check_labelled,
    check_verifiable,
    gold_answers,
    verify_labels,
)
from mnemoscope.data.records import Record, RecordError
from mnemoscope.detectors.verdict import VerdictModel
from mnemoscope.errors import InputError
from mnemoscope.features.attribution import QUERY_MATCH
from mnemoscope.io import atomic_write, canonical_json
from mnemoscope.trace.types import PairTrace

__all__ = [
    "FitInput",
    "FitterResult",
    "SignalFitter",
    "calibrate",
    "calibrate_profile",
    "check_class_counts",
    "data_hash",
    "fit_verdict",
    "record_groups",
    "split_record",
    "token_margin",
    "verdict_conformal_records",
]

log = logging.getLogger(__name__)


def data_hash(records: Sequence[Record]) -> str:
    h = hashlib.sha256()
    for r in records:
        h.update(canonical_json({"id": r.id, "context": r.context, "query": r.query, "label": r.label}))
    return h.hexdigest()


def check_class_counts(check: LabelCheck, min_per_class: int) -> None:
    """Refuse a calibration with too few verified items of a class (the counts named).

    Raises:
        InputError: fewer than ``min_per_class`` verified memory or context items.
    """
    n = check.n_class()
    short = {k: v for k, v in n.items() if v < min_per_class}
    if short:
        raise InputError(
            f"too few verified items per class to calibrate: {n['memory']} memory and {n['context']} "
            f"context-needed kept (at least {min_per_class} of each are needed); {check.describe()}. "
            "Add items of the short class, raise --max-records, or pass --labels given with labels "
            "verified on this model",
            field="label",
        )


def record_groups(records: Sequence[Any]) -> list[str]:
    """The fact each record belongs to (``fact_id``, else its id): held-out splits keep facts whole."""
    out = []
    for r in records:
        extra = getattr(r, "extra", None) or {}
        out.append(str(extra.get("fact_id") or r.id))
    return out


# -- fitters of signals beyond the default --------------------------------------------------------------


@dataclass(frozen=True)
class FitInput:
    """What a :class:`SignalFitter` fits on: the calibration part, verified.

    Attributes:
        traces: the calibration part's traces (``answer_without``: the closed-book answer).
        labels: the verified labels (1 = from memory), ``None`` for unlabelled input.
        kinds: each record's item kind (``None`` when not given).
        folder: the calibration's trace folder (a fitter may keep what it derives there, e.g.
            sentence embeddings, keyed by record id).
        model: the traced model's identity (``ModelInfo.to_dict()``).
        settings: the pair settings the traces were made with.
    """

    traces: list[PairTrace]
    labels: np.ndarray | None
    kinds: list[str | None]
    folder: Path
    model: dict[str, Any]
    settings: dict[str, Any]


@dataclass
class FitterResult:
    """What a fitter adds to the profile.

    Attributes:
        header: header blocks (CRM: ``crm`` and ``anomaly``).
        files: ``{name: bytes}`` saved next to ``profile.json`` and hashed with it (CRM: ``crm.npz``).
        signals: verdict signals per calibration record (``{name: values}``), each measured
            without the record it scores (out of fold) except on ``conformal_records``.
        conformal_records: indices of the verdict's conformal set when the fitter drew it
            (:func:`verdict_conformal_records`; the fitted model never saw them), else ``None``.
    """

    header: dict[str, Any] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)
    signals: dict[str, np.ndarray] = field(default_factory=dict)
    conformal_records: np.ndarray | None = None


class SignalFitter(Protocol):
    """Fits signals the black-box default does not compute (CRM:
    :class:`mnemoscope.pipelines.crm.fitter.CRMFitter`)."""

    @property
    def needs_hidden(self) -> bool:
        """Whether the traces must carry hidden states (the local tracer keeps them; an endpoint
        refuses)."""
        ...

    def fit(self, data: FitInput, config: CalibrationConfig) -> FitterResult: ...


# -- the pipeline -----------------------------------------------------------------------------------------


def calibrate_profile(
    lm: Any,
    records: Sequence[Record],
    out: str | Path,
    config: CalibrationConfig | None = None,
    *,
    fitter: SignalFitter | None = None,
    engine: PairEngine | None = None,
    input_errors: Sequence[RecordError] = (),
    progress: bool = True,
    overwrite: bool = False,
    traces_dir: str | Path | None = None,
    timing_sample: int = 0,
) -> AuditProfile:
    """:func:`calibrate` in process: ``lm`` traced by a :class:`~mnemoscope.audit.tracing.LocalTracer`
    (``engine``: what traces the records not yet in the folder; default this process)."""
    return calibrate(
        LocalTracer(lm, engine=engine),
        records,
        out,
        config,
        fitter=fitter,
        input_errors=input_errors,
        progress=progress,
        overwrite=overwrite,
        traces_dir=traces_dir,
        timing_sample=timing_sample,
    )


def calibrate(
    tracer: CalibrationTracer,
    records: Sequence[Any],
    out: str | Path,
    config: CalibrationConfig | None = None,
    *,
    fitter: SignalFitter | None = None,
    input_errors: Sequence[Any] = (),
    progress: bool = True,
    overwrite: bool = False,
    traces_dir: str | Path | None = None,
    timing_sample: int = 0,
    prompt_origin: dict[str, Any] | None = None,
) -> AuditProfile:
    """Calibrate a profile through ``tracer`` into ``out`` (module doc) and return it, loaded.

    ``fitter``: what fits the signals beyond the black-box default (CRM); required when
    ``config.with_crm``. ``traces_dir``: where the traces go (default ``out/traces``; a re-run
    resumes them). ``timing_sample``: how many held-out records to audit live, one at a time, to
    time an audit (and compare it with the stored-trace scores: ``live_check``); 0 (default)
    times none and the card says the audit time was not measured. ``prompt_origin``: where
    ``config.app_prompt`` came from when it was not a file (``calibrate --prompt-from-log``: the
    log, the sample, the template's share of it), recorded as the profile's ``prompt_origin``.

    Raises:
        InputError: partly labelled input with ``labels="given"``, unverifiable items with
            ``"verify"`` (both before any model call); verdict signals this backend cannot
            measure; CRM asked without a fitter, over an endpoint, or on a trace folder made
            without hidden states; too few traced records or no clean one; every item failing
            verification; too few verified items per class (the counts named).
        EarlyStopError: over an endpoint, the first records all failed for the same cause.
    """
    t0 = time.perf_counter()
    c = config or CalibrationConfig()
    if c.labels == "verify":
        check_verifiable(records)
    else:
        check_labelled(records)
    bad = sorted(set(c.verdict_candidates) - set(tracer.signals))
    if bad:
        raise InputError(
            f"verdict signals {bad} need hidden states, unavailable over an endpoint; "
            f"choose among {list(tracer.signals)}",
            field="verdict_candidates",
        )
    if fitter is not None and not c.with_crm:
        c = replace(c, with_crm=True)  # the profile records what was fitted
    out = Path(out)
    tdir = Path(traces_dir) if traces_dir is not None else out / "traces"
    if c.with_crm and fitter is None:
        raise InputError(
            "CRM is asked (with_crm, a CRM classifier or the crm_probability signal) but no fitter "
            "fits it: pass fitter=mnemoscope.pipelines.crm.fitter.CRMFitter() (in process only: "
            "an endpoint serves no hidden states)",
            field="with_crm",
        )
    tracer.open(c, hidden=fitter is not None and fitter.needs_hidden, folder=tdir, overwrite=overwrite)
    out.mkdir(parents=True, exist_ok=True)
    # traces a resumed run reuses (their tracing time is not in this run's wall time)
    before = set() if overwrite else tracer.done_ids(tdir)
    pool, draw, draw_seconds = records, None, [0.0]
    if c.draws:
        first = [overwrite]

        def answers_for(chosen: list[Any]) -> dict[str, tuple[str, str | None]]:
            ts = time.perf_counter()
            got = tracer.answers(chosen, tdir, overwrite=first[0], progress=progress)
            first[0] = False
            draw_seconds[0] += time.perf_counter() - ts
            return got

        draw = draw_for_config(c, records, answers_for, progress=progress)
        records, overwrite = draw.records, False
    traced = tracer.trace(records, tdir, overwrite=overwrite, progress=progress)
    check = verify_labels(
        traced.records, {t.id: (t.answer_with, t.answer_without) for t in traced.traces}, mode=c.labels
    )
    if c.labels == "verify":
        check_class_counts(check, c.min_per_class)
    dec = {d.id: d for d in check.decisions}
    keep = [i for i, t in enumerate(traced.traces) if dec[t.id].keep]
    pairs_v = [traced.traces[i] for i in keep]
    pieces_v = [traced.pieces[i] for i in keep]
    recs_v = [traced.records[i] for i in keep]
    labels_list = [dec[t.id].label for t in pairs_v]
    has_labels = all(v is not None for v in labels_list)
    cal, ho = np.arange(len(pairs_v)), np.array([], int)
    if has_labels and len(set(labels_list)) == 2:
        cal, ho = split_by_fact(labels_list, record_groups(recs_v), seed=c.seed, fraction=c.held_out_fraction)
    labels = np.array([labels_list[i] for i in cal], dtype=int) if has_labels else None
    fit_part = _fit(
        tracer,
        [pairs_v[i] for i in cal],
        [pieces_v[i] for i in cal],
        labels,
        [dec[pairs_v[i].id].kind for i in cal],
        c,
        fitter,
        tdir,
        traced,
    )
    split = split_record(c, [pairs_v[i].id for i in ho], labels_list, cal, ho)
    header: dict[str, Any] = {
        **tracer.header(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "config": asdict(c),
        **fit_part.header,
        "labels": check.summary(),
        **({} if draw is None else {"draw": draw.summary()}),
        "split": split,
        **({} if prompt_origin is None else {"prompt_origin": prompt_origin}),
    }
    header["data"] = {
        "sha256": data_hash(pool),
        "n_records": len(pool) + len(input_errors),
        "n_traced": len(traced.traces),
        "n_traces_reused": sum(t.id in before for t in traced.traces),
        "n_verified": len(pairs_v),
        **header["data"],
        "n_clean": len(pairs_v) if not has_labels else sum(v == 0 for v in labels_list),
        "n_memory": None if not has_labels else sum(v == 1 for v in labels_list),
        "n_errors": len(traced.failures) + len(input_errors),
        "failures": traced.failures[:50],
        "seconds": round(traced.seconds + draw_seconds[0], 1),
    }
    # files of an earlier calibration into this folder that this profile does not have go
    (out / "crm.npz").unlink(missing_ok=True)
    for name, data in fit_part.files.items():
        atomic_write(out / name, data)
    artefact = b"".join(fit_part.files[k] for k in sorted(fit_part.files)) if fit_part.files else None
    header["profile_hash"] = profile_hash(header, artefact)
    atomic_write(out / "profile.json", json.dumps(header, indent=1, default=str))
    prof = tracer.load_profile(out)
    fit_seconds = time.perf_counter() - t0
    rows: list[dict[str, Any]] = []
    audit_seconds, live = None, None
    if len(ho):
        auditor = tracer.auditor(prof)
        for i in ho:
            t = pairs_v[i]
            rows.append(
                held_out_row(
                    dec[t.id],
                    auditor.score(t, pieces_v[i]).to_dict(),
                    context=t.context,
                    query=t.query,
                    gold=gold_answers(recs_v[i], dec[t.id].label),
                )
            )
        sample = [pairs_v[i] for i in ho[: max(0, timing_sample)]]
        if sample:
            audit_seconds, live = _timed_audits(auditor, sample, rows)
    write_validation(
        out,
        prof,
        rows,
        labels=check.summary(),
        split=split,
        calibration_seconds=fit_seconds,
        audit_seconds=audit_seconds,
        extra={
            "live_check": live,
            **(
                {}
                if audit_seconds is not None
                else {
                    "audit_seconds_note": "not measured: the held-out figures score the calibration traces "
                    "(no second generation), and no live audit was timed (calibrate --time-audits N)"
                }
            ),
        },
    )
    return tracer.load_profile(out)  # type: ignore[no-any-return]


@dataclass
class _Fitted:
    header: dict[str, Any]
    files: dict[str, bytes]


def _fit(
    tracer: CalibrationTracer,
    pairs: list[PairTrace],
    pieces: list[list[str]],
    labels: np.ndarray | None,
    kinds: list[str | None],
    c: CalibrationConfig,
    fitter: SignalFitter | None,
    folder: Path,
    traced: CalibrationTraces,
) -> _Fitted:
    """Fit the fitter's signals (CRM), RePCS, the token margin and the verdict on the calibration
    part; the header blocks they make."""
    n = len(pairs)
    if n < 4:
        why = "; ".join(str(f["message"]) for f in traced.failures[:3])
        raise InputError(
            f"calibration needs at least 4 traced records, got {n}" + (f" ({why})" if why else "")
        )
    clean = np.ones(n, bool) if labels is None else labels == 0
    n_clean = int(clean.sum())
    if n_clean < 2:
        raise InputError(
            f"calibration needs at least 2 clean records (label 0, or unlabelled input); got {n_clean}",
            field="label",
        )
    extra = FitterResult()
    if fitter is not None:
        h = tracer.header()
        settings = {**h.get("prompt", {}), "max_new_tokens": c.max_new_tokens}
        extra = fitter.fit(FitInput(pairs, labels, kinds, folder, tracer.model_info(), settings), c)
    repcs = tracer.repcs(c)
    repcs.fit(pairs, labels)
    margin, verdict = fit_verdict(
        None,
        pairs,
        labels,
        repcs,
        c,
        pieces=pieces,
        conformal_records=extra.conformal_records,
        kinds=kinds,
        signals=extra.signals,
    )
    header = {
        **extra.header,
        "repcs": tracer.repcs_record(repcs),
        # the three-way source follows the answer-bearing phrases, each traced to the passage that
        # states it (features.grounding; audit.verdict.decide_source_facts)
        "source_rule": "grounded",
        "token_attribution": {
            "margin": margin,
            "quantile": c.token_margin_quantile,
            "query_match": QUERY_MATCH,  # how context_token_fraction finds query words (attribution)
            "note": "a word is context-supported when log p(word | c, q) - log p(word | q) exceeds the margin",
        },
        "verdict": None if verdict is None else verdict.to_dict(),
        "data": {
            "n_fit": n,
            "n_fit_clean": n_clean,
            "n_fit_memory": None if labels is None else int((labels == 1).sum()),
        },
    }
    return _Fitted(header, dict(extra.files))


def split_record(
    c: CalibrationConfig, held_ids: list[str], labels: list[int | None], cal: np.ndarray, ho: np.ndarray
) -> dict[str, Any]:
    """How the verified items were split (the profile's and the card's ``split``)."""

    def n(ix: np.ndarray) -> dict[str, int]:
        lab = [labels[i] for i in ix]
        return {"memory": sum(v == 1 for v in lab), "context": sum(v == 0 for v in lab)}

    return {
        "rule": "StratifiedGroupKFold by fact_id (else id), stratified by the verified label, "
        f"first of {max(2, round(1 / c.held_out_fraction)) if c.held_out_fraction > 0 else 0} folds held out",
        "seed": c.seed,
        "fraction": c.held_out_fraction,
        "n_calibration": n(cal),
        "n_held_out": n(ho),
        "held_out_ids": held_ids,
        "certification": f"the verdict certifies its threshold on {c.conformal_fraction:g} of the calibration "
        "part's clean answers, not used to fit it",
    }


def _timed_audits(
    auditor: Any, sample: Sequence[PairTrace], rows: Sequence[Mapping[str, Any]]
) -> tuple[float, dict[str, Any]]:
    """Audit ``sample`` live (generation + scoring, one request at a time): the wall seconds per
    audit, and how the live audits compare with the stored-trace scores of the same records."""
    from mnemoscope.audit.requests import AuditFailure, AuditRequest

    t0 = time.perf_counter()
    live = auditor.audit([AuditRequest(t.context, t.query, id=t.id) for t in sample])
    secs = (time.perf_counter() - t0) / len(sample)
    stored = {r["id"]: r for r in rows}
    diffs = [
        abs(float(res.p_memory) - float(stored[t.id]["p_memory"]))
        for t, res in zip(sample, live, strict=True)
        if not isinstance(res, AuditFailure)
        and res.p_memory is not None
        and stored[t.id]["p_memory"] is not None
    ]
    same = sum(
        not isinstance(res, AuditFailure) and res.answer == stored[t.id]["answer"]
        for t, res in zip(sample, live, strict=True)
    )
    return secs, {
        "n": len(sample),
        "same_answer": same,
        "max_abs_p_memory_diff": max(diffs) if diffs else None,
        "note": "live Auditor.audit of these held-out items vs the stored trace-scored rows",
    }


# -- the verdict ----------------------------------------------------------------------------------------


def _verdict_model(c: CalibrationConfig, candidates: Sequence[str] | None = None) -> VerdictModel:
    return VerdictModel(
        candidates=tuple(c.verdict_candidates if candidates is None else candidates),
        alpha=c.verdict_alpha,
        conformal_fraction=c.conformal_fraction,
        seed=c.seed,
    )


def _verdict_rows(pairs: Sequence[Any]) -> list[int]:
    """The records the verdict fits on: those whose two prompts differ (an empty context has no
    context-augmented path to compare)."""
    return [i for i, t in enumerate(pairs) if not t.identical_prompts]


def _verdict_groups(
    pairs: Sequence[Any], kinds: Sequence[str | None] | None, keep: Sequence[int], c: CalibrationConfig
) -> list[str] | None:
    """The verdict rows' item kinds when the threshold is certified per kind (else ``None``)."""
    if c.certify == "marginal":
        return None
    if c.certify != "per-kind":
        raise InputError(f"certify must be 'marginal' or 'per-kind', got {c.certify!r}", field="certify")
    if kinds is None or len(kinds) != len(pairs):
        raise InputError("certify='per-kind' needs each record's kind", field="certify")
    return [str(kinds[i] or "unknown") for i in keep]


def verdict_conformal_records(
    pairs: Sequence[Any],
    labels: np.ndarray,
    c: CalibrationConfig,
    kinds: Sequence[str | None] | None = None,
) -> np.ndarray:
    """The record indices of the verdict's conformal set (:meth:`VerdictModel.conformal_split`
    over :func:`_verdict_rows`, by kind when certified per kind): what :func:`fit_verdict`
    draws by default."""
    rows = _verdict_rows(pairs)
    keep = np.asarray(rows, dtype=int)
    if not len(keep):
        return keep
    groups = _verdict_groups(pairs, kinds, rows, c)
    return keep[_verdict_model(c).conformal_split(np.asarray(labels)[keep], groups)]


def token_margin(
    pairs: Sequence[Any],
    pieces: Sequence[Sequence[str]],
    labels: Sequence[int] | np.ndarray | None,
    quantile: float,
) -> float:
    """The token-attribution margin: the ``quantile`` of content-word PMI on the memorized
    (label 1) answers with a non-empty context (:func:`~mnemoscope.features.attribution.calibrate_margin`)."""
    from mnemoscope.features.attribution import calibrate_margin, content_word_pmis

    mem_pmis = [
        content_word_pmis(
            pc, np.asarray(t.logprob_answer_with) - np.asarray(t.logprob_answer_without), t.query
        )
        for t, pc, lab in zip(
            pairs, pieces, labels if labels is not None else [None] * len(pairs), strict=True
        )
        if lab == 1 and not t.identical_prompts
    ]
    return calibrate_margin(np.concatenate(mem_pmis) if mem_pmis else [], quantile)


def fit_verdict(
    lm: Any,
    pairs: Sequence[Any],
    labels: np.ndarray | None,
    repcs: Any,
    c: CalibrationConfig,
    crm_oof: np.ndarray | None = None,
    pieces: Sequence[Sequence[str]] | None = None,
    conformal_records: np.ndarray | None = None,
    kinds: Sequence[str | None] | None = None,
    signals: Mapping[str, np.ndarray] | None = None,
) -> tuple[float, VerdictModel | None]:
    """The token margin (from memorized answers) and the verdict model (needs both labels).

    ``crm_oof``: CRM's classifier probability per record (``crm_probability``), measured by
    CRMs that never saw the record. ``conformal_records``: the record indices of the verdict's
    conformal set, when the caller drew it (default: the verdict's own seeded draw).
    ``kinds``: each record's item kind; with ``c.certify == "per-kind"`` the threshold is
    certified within every kind (:meth:`VerdictModel.fit`, ``groups``).
    ``pieces``: each answer's token texts (default: decoded by ``lm.tokenizer``; the calibration
    passes its tracer's, with ``lm=None``). ``signals``: further fitted signals per record
    (``{name: values}``, a :class:`SignalFitter`'s; ``crm_oof`` is ``crm_probability``'s).
    """
    if pieces is None:
        pieces = [answer_pieces(lm.tokenizer, t.answer_ids) for t in pairs]
    margin = token_margin(pairs, pieces, labels, c.token_margin_quantile)
    if labels is None or len(np.unique(labels)) < 2:
        return margin, None
    keep = _verdict_rows(pairs)
    rows = [trace_signals(pairs[i], pieces[i], margin=margin, repcs=repcs)[0] for i in keep]
    fitted = dict(signals or {})
    if crm_oof is not None:
        fitted["crm_probability"] = np.asarray(crm_oof)
    for name, values in fitted.items():
        for r, i in zip(rows, keep, strict=True):
            r[name] = float(values[i])
    cands = tuple(k for k in c.verdict_candidates if k in rows[0])
    if not cands:
        raise InputError(
            f"none of the verdict signals {list(c.verdict_candidates)} is measured in this calibration "
            "(crm_probability needs a CRM classifier: --classifier lr or xgb)",
            field="verdict_candidates",
        )
    if len(cands) < len(c.verdict_candidates):
        log.warning(
            "verdict candidates %s are not measured in this calibration (no CRM classifier?); combining %s",
            sorted(set(c.verdict_candidates) - set(cands)),
            list(cands),
        )
    signals = {k: np.array([r[k] for r in rows]) for k in cands}
    conformal = None
    if conformal_records is not None:
        pos = {i: j for j, i in enumerate(keep)}
        conformal = np.array([pos[int(i)] for i in conformal_records], dtype=int)
    groups = _verdict_groups(pairs, kinds, keep, c)
    verdict = _verdict_model(c, cands).fit(
        signals, np.asarray(labels)[keep], conformal=conformal, groups=groups
    )
    # which answers certified the threshold (recorded in the profile: a user can re-check it)
    verdict.conformal_ids_ = tuple(str(pairs[keep[j]].id) for j in verdict.conformal_index_)
    return margin, verdict
