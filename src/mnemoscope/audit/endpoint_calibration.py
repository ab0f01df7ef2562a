"""Calibrating a model behind an OpenAI-compatible server, and tracing many records through it.

The audit itself is :class:`mnemoscope.audit.auditor.Auditor` with an
:class:`~mnemoscope.audit.backends.EndpointBackend` (``Auditor.from_endpoint``). This module holds
what calibration over an endpoint adds:

* **calibration** (``mnemoscope calibrate --endpoint URL``): an
  :class:`~mnemoscope.audit.profile.AuditProfile` with ``backend="endpoint"`` (``profile.json``:
  the served model's identity (reported id + probe fingerprint), the prompt settings and the chat
  template used, T and k, RePCS's tau on the top-k estimate of Z, the token margin, and a
  verdict model over the black-box signals only; no CRM: hidden states are not available
  over HTTP). The verdict model is fitted by the same
  :func:`~mnemoscope.audit.calibrate.fit_verdict` as in process.
* :func:`trace_records`: many records through the server, concurrently, stopping early when
  the first records all fail for the same cause.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from mnemoscope.audit.auditor import Auditor
from mnemoscope.audit.backends import check_endpoint_identity
from mnemoscope.audit.calibrate import data_hash, fit_verdict
from mnemoscope.audit.profile import (
    BLACK_BOX_SIGNALS,
    ENDPOINT_PROFILE_FORMAT,
    AuditProfile,
    CalibrationConfig,
    load_profile,
    profile_hash,
)
from mnemoscope.audit.results import EarlyStop
from mnemoscope.detectors.repcs import RePCS
from mnemoscope.detectors.verdict import DEFAULT_CANDIDATES
from mnemoscope.errors import InputError, MnemoscopeError
from mnemoscope.features.attribution import QUERY_MATCH
from mnemoscope.models.endpoint import (
    EndpointClient,
    EndpointFingerprint,
    map_concurrently,
)
from mnemoscope.trace.endpoint import (
    UNMEASURED,
    EndpointPairConfig,
    trace_endpoint_pair,
)
from mnemoscope.trace.templates import PromptBuilder
from mnemoscope.trace.types import PairTrace

__all__ = [
    "BLACK_BOX_SIGNALS",
    "ENDPOINT_PROFILE_FORMAT",
    "EndpointCalibrationConfig",
    "TracedRecords",
    "calibrate_endpoint_profile",
    "check_endpoint_identity",
    "endpoint_model_info",
    "load_endpoint_profile",
    "trace_records",
    "trace_with_closed_book",
]

log = logging.getLogger(__name__)


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


def load_endpoint_profile(path: str | Path) -> AuditProfile:
    """:func:`~mnemoscope.audit.profile.load_profile` refusing an in-process profile."""
    return load_profile(path, backend="endpoint")


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
    verdict_candidates: tuple[str, ...] = DEFAULT_CANDIDATES
    conformal_fraction: float = 0.5
    certify: Literal["marginal", "per-kind"] = "marginal"
    token_margin_quantile: float = 0.9
    seed: int = 42
    labels: Literal["verify", "given"] = "given"
    held_out_fraction: float = 1 / 3
    min_per_class: int = 10
    stop: tuple[str, ...] | None = None
    per_class: int | None = None
    max_traced: int | None = None

    def __post_init__(self) -> None:
        bad = sorted(set(self.verdict_candidates) - set(BLACK_BOX_SIGNALS))
        if bad:
            raise InputError(
                f"verdict signals {bad} need hidden states, unavailable over an endpoint; "
                f"choose among {list(BLACK_BOX_SIGNALS)}",
                field="verdict_candidates",
            )


# -- tracing many records --------------------------------------------------------------------------


@dataclass
class TracedRecords:
    traces: list[PairTrace] = field(default_factory=list)
    pieces: list[list[str]] = field(default_factory=list)
    records: list[Any] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    #: id -> closed-book answer (:func:`trace_with_closed_book` only)
    closed_book: dict[str, str] = field(default_factory=dict)


def trace_records(
    client: EndpointClient,
    records: Sequence[Any],
    config: EndpointPairConfig,
    *,
    progress: bool = False,
    on_error: str = "skip",
    early_stop: int = 8,
) -> TracedRecords:
    """Trace ``records`` (objects with id/context/query/label) through the server, concurrently.

    A record that fails is listed in ``failures`` (id, line, message) and the batch goes on;
    ``on_error="raise"`` re-raises the first failure. The first ``early_stop`` records are traced
    first: when they all fail for the same cause, :class:`~mnemoscope.audit.results.EarlyStopError`
    names it and the likely fix instead of running to the end (``0`` disables it).
    """
    from tqdm.auto import tqdm

    client.require_teacher_forcing()
    client.require_top_k(config.top_k)
    out = TracedRecords()
    t0 = time.perf_counter()
    bar = tqdm(total=len(records), disable=not progress, desc="endpoint trace", unit="pair")
    stop = EarlyStop(early_stop, what="endpoint tracing")

    def one(r: Any) -> tuple[PairTrace, list[str]]:
        try:
            return trace_endpoint_pair(client, str(r.id), r.context, r.query, config, label=r.label)
        finally:
            bar.update(1)

    todo = list(records)
    first = max(early_stop, 0)
    try:
        for part in (todo[:first], todo[first:]) if first else (todo,):
            results = map_concurrently(one, part, client.config.concurrency)
            for r, res in zip(part, results, strict=True):
                if isinstance(res, BaseException):
                    if on_error == "raise":
                        raise res
                    if not isinstance(res, MnemoscopeError):
                        log.debug("endpoint trace of %s failed", r.id, exc_info=res)
                    kind = type(res).__name__
                    out.failures.append(
                        {"id": r.id, "line": getattr(r, "line", None), "message": f"{kind}: {res}"}
                    )
                    stop.failed(str(res), kind=kind)
                    continue
                stop.ok()
                t, pc = res
                out.traces.append(t)
                out.pieces.append(pc)
                out.records.append(r)
    finally:
        bar.close()
    out.seconds = time.perf_counter() - t0
    return out


def trace_with_closed_book(
    client: EndpointClient,
    records: Sequence[Any],
    config: EndpointPairConfig,
    folder: str | Path,
    *,
    model: dict[str, Any],
    progress: bool = True,
    overwrite: bool = False,
    chunk: int = 8,
) -> TracedRecords:
    """:func:`trace_records` plus each record's closed-book answer (a greedy generation on the
    no-context prompt, for label verification), stored under ``folder`` as they come (a re-run
    resumes: records already there are not traced again).

    ``folder`` holds the traces (:class:`~mnemoscope.trace.TraceWriter`) and ``answers.jsonl``
    (``{id, pieces, closed_book}``); other settings or another model are refused unless
    ``overwrite``.
    """
    from tqdm.auto import tqdm

    from mnemoscope.trace import TraceWriter, load_traces

    fold = Path(folder)
    settings = {
        **config.builder.to_dict(),
        "chat_template": config.template.to_dict(),
        "max_new_tokens": config.max_new_tokens,
        "top_k": config.top_k,
        "closed_book": True,
    }
    w = TraceWriter(fold, kind="pair", model=model, settings=settings, overwrite=overwrite)
    side_path = fold / "answers.jsonl"
    if overwrite:
        side_path.unlink(missing_ok=True)
    side: dict[str, dict[str, Any]] = {}
    if side_path.is_file():
        for line in side_path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                side[str(row["id"])] = row
    todo = [r for r in records if str(r.id) not in w.done_ids or str(r.id) not in side]
    out = TracedRecords()
    t0 = time.perf_counter()
    T = config.max_new_tokens

    def closed(t: PairTrace) -> str:
        return str(client.completion(t.prompt_without, max_tokens=T).get("text", ""))

    with tqdm(
        total=len(todo), disable=not progress or not todo, desc="endpoint calibrate", unit="rec"
    ) as bar:
        for start in range(0, len(todo), chunk):
            part = todo[start : start + chunk]
            tr = trace_records(client, part, config, early_stop=chunk if start == 0 else 0)
            out.failures += tr.failures
            answers = map_concurrently(closed, tr.traces, client.config.concurrency)
            ok_t, rows = [], []
            for t, pc, r, cb in zip(tr.traces, tr.pieces, tr.records, answers, strict=True):
                if isinstance(cb, BaseException):
                    out.failures.append(
                        {"id": r.id, "line": getattr(r, "line", None), "message": f"closed-book answer: {cb}"}
                    )
                    continue
                ok_t.append(t)
                rows.append({"id": str(r.id), "pieces": list(pc), "closed_book": cb})
            w.write(ok_t)
            with side_path.open("a", encoding="utf-8") as f:
                for row in rows:
                    f.write(json.dumps(row, ensure_ascii=False) + "\n")
                    side[row["id"]] = row
            bar.update(len(part))
    by_id = {r.id: r for r in records}
    for t in load_traces(fold):
        if t.id in by_id and t.id in side:
            out.traces.append(t)
            out.pieces.append(list(side[t.id]["pieces"]))
            out.records.append(by_id[t.id])
    out.seconds = time.perf_counter() - t0
    out.closed_book = {t.id: side[t.id]["closed_book"] for t in out.traces}
    return out


def calibrate_endpoint_profile(
    client: EndpointClient,
    records: Sequence[Any],
    out: str | Path,
    config: EndpointCalibrationConfig | None = None,
    *,
    progress: bool = True,
    input_errors: Sequence[Any] = (),
    overwrite: bool = False,
    timing_sample: int = 4,
) -> AuditProfile:
    """Trace ``records`` through the server once (resumable, under ``out/traces``; with each
    record's closed-book answer), verify their labels on the served model (``config.labels``,
    :mod:`mnemoscope.bench.label_check`), split the kept ones by fact, fit RePCS's tau (top-k Z),
    the token margin and the black-box verdict model on the calibration part, write
    ``out/profile.json``, then audit the held-out part with it and write the validation card
    (:mod:`mnemoscope.audit.validation`).

    Raises:
        InputError: too few traced records or no clean one; every item failing verification; too
            few verified items per class (the counts named).
        EarlyStopError: the first records all failed for the same cause (named, with the likely fix).
        EndpointCapabilityError: the server cannot teacher-force (no prompt log-probs, no tokenizer).
    """
    from mnemoscope.audit.calibrate import check_class_counts, record_groups
    from mnemoscope.audit.profile import chat_template_sha256
    from mnemoscope.audit.validation import held_out_row, split_by_fact, write_validation
    from mnemoscope.bench.label_check import check_labelled, check_verifiable, gold_answers, verify_labels
    from mnemoscope.io import atomic_write
    from mnemoscope.trace.endpoint import load_chat_template
    from mnemoscope.trace.store import stored_ids
    from mnemoscope.trace.templates import default_stops

    t0 = time.perf_counter()
    c = config or EndpointCalibrationConfig()
    if c.labels == "verify":
        check_verifiable(records)
    else:
        check_labelled(records)
    # traces a resumed run reuses (their tracing time is not in this run's wall time)
    before = set() if overwrite else stored_ids(Path(out) / "traces")
    caps = client.require_teacher_forcing()
    client.require_top_k(c.top_k)
    tpl = load_chat_template(c.chat_template, eos_text=c.eos_text)
    chat = tpl.chat_template is not None
    stops = tuple(c.stop) if c.stop is not None else default_stops(chat)
    builder = PromptBuilder(template=c.template, task=c.task, chat=chat, stop=stops)
    pcfg = EndpointPairConfig(builder=builder, template=tpl, max_new_tokens=c.max_new_tokens, top_k=c.top_k)
    fp = client.fingerprint()
    model = endpoint_model_info(client, fp)
    outp = Path(out)
    outp.mkdir(parents=True, exist_ok=True)
    pool, draw, draw_seconds = records, None, [0.0]
    if c.per_class is not None:
        from mnemoscope.audit.draw import draw_for_config

        first = [overwrite]

        def answers_for(chosen: list[Any]) -> dict[str, tuple[str, str]]:
            tr = trace_with_closed_book(
                client, chosen, pcfg, outp / "traces", model=model, progress=progress, overwrite=first[0]
            )
            first[0] = False
            draw_seconds[0] += tr.seconds
            return {str(t.id): (t.answer_with, tr.closed_book[t.id]) for t in tr.traces}

        draw = draw_for_config(c, records, answers_for, progress=progress)
        records, overwrite = draw.records, False
    traced = trace_with_closed_book(
        client, records, pcfg, outp / "traces", model=model, progress=progress, overwrite=overwrite
    )
    check = verify_labels(
        traced.records,
        {t.id: (t.answer_with, traced.closed_book[t.id]) for t in traced.traces},
        mode=c.labels,
    )
    if c.labels == "verify":
        check_class_counts(check, c.min_per_class)
    dec = {d.id: d for d in check.decisions}
    keep = [i for i, t in enumerate(traced.traces) if dec[t.id].keep]
    # the closed-book answer travels with its trace (the verdict's closed_book_agreement reads it)
    pairs_v = [
        replace(traced.traces[i], answer_without=traced.closed_book[traced.traces[i].id]) for i in keep
    ]
    pieces_v = [traced.pieces[i] for i in keep]
    recs_v = [traced.records[i] for i in keep]
    labels_list = [dec[t.id].label for t in pairs_v]
    has_labels = all(v is not None for v in labels_list)
    cal, ho = np.arange(len(pairs_v)), np.array([], int)
    if has_labels and len(set(labels_list)) == 2:
        cal, ho = split_by_fact(labels_list, record_groups(recs_v), seed=c.seed, fraction=c.held_out_fraction)
    pairs = [pairs_v[i] for i in cal]
    pieces = [pieces_v[i] for i in cal]
    n = len(pairs)
    if n < 4:
        why = "; ".join(f["message"] for f in traced.failures[:3])
        raise InputError(
            f"calibration needs at least 4 traced records, got {n}" + (f" ({why})" if why else "")
        )
    labels = np.array([labels_list[i] for i in cal], dtype=int) if has_labels else None
    clean = np.ones(n, bool) if labels is None else labels == 0
    if int(clean.sum()) < 2:
        raise InputError(
            "calibration needs at least 2 clean records (label 0, or unlabelled input)", field="label"
        )
    repcs = RePCS(alpha=c.repcs_alpha, max_steps=c.max_new_tokens, estimator="topk", k=c.top_k)
    repcs.fit(pairs, labels)
    vc = CalibrationConfig(
        verdict_alpha=c.verdict_alpha,
        verdict_candidates=c.verdict_candidates,
        conformal_fraction=c.conformal_fraction,
        certify=c.certify,
        token_margin_quantile=c.token_margin_quantile,
        seed=c.seed,
    )
    margin, verdict = fit_verdict(
        None, pairs, labels, repcs, vc, None, pieces=pieces, kinds=[dec[t.id].kind for t in pairs]
    )
    held_ids = [pairs_v[i].id for i in ho]

    def n_of(ix: np.ndarray) -> dict[str, int]:
        lab = [labels_list[i] for i in ix]
        return {"memory": sum(v == 1 for v in lab), "context": sum(v == 0 for v in lab)}

    split = {
        "rule": "StratifiedGroupKFold by fact_id (else id), stratified by the verified label",
        "seed": c.seed,
        "fraction": c.held_out_fraction,
        "n_calibration": n_of(cal),
        "n_held_out": n_of(ho),
        "held_out_ids": held_ids,
        "certification": f"the verdict certifies its threshold on {c.conformal_fraction:g} of the calibration "
        "part's clean answers, not used to fit it",
    }
    header: dict[str, Any] = {
        "format": ENDPOINT_PROFILE_FORMAT,
        "backend": "endpoint",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "model": model,
        "endpoint": client.config.to_dict(),
        "endpoint_method": caps.method,
        "capabilities": caps.to_dict(),
        "prompt": builder.to_dict(),
        "chat_template": tpl.to_dict(),
        "max_new_tokens": c.max_new_tokens,
        "top_k": c.top_k,
        "layout": {
            "prompt": builder.to_dict(),
            "chat_template_sha256": chat_template_sha256(tpl.chat_template),
            "max_new_tokens": c.max_new_tokens,
            "stop": list(stops),
        },
        "config": asdict(c),
        "repcs": repcs.calibration_record(kl_source=f"endpoint top-k estimate (k={c.top_k})"),
        # the three-way source follows the answer-bearing words (pipelines.verdict.decide_source_facts)
        "source_rule": "facts",
        "token_attribution": {
            "margin": margin,
            "quantile": c.token_margin_quantile,
            "query_match": QUERY_MATCH,  # how context_token_fraction finds query words (attribution)
            "note": "a word is context-supported when log p(word | c, q) - log p(word | q) exceeds the margin",
        },
        "verdict": None if verdict is None else verdict.to_dict(),
        "unavailable": list(UNMEASURED),
        "labels": check.summary(),
        **({} if draw is None else {"draw": draw.summary()}),
        "split": split,
        "data": {
            "sha256": data_hash(pool),
            "n_records": len(pool) + len(input_errors),
            "n_traced": len(traced.traces),
            "n_traces_reused": sum(t.id in before for t in traced.traces),
            "n_verified": len(pairs_v),
            "n_fit": n,
            "n_fit_clean": int(clean.sum()),
            "n_fit_memory": None if labels is None else int((labels == 1).sum()),
            "n_clean": len(pairs_v) if not has_labels else sum(v == 0 for v in labels_list),
            "n_memory": None if not has_labels else sum(v == 1 for v in labels_list),
            "n_errors": len(traced.failures) + len(input_errors),
            "failures": traced.failures[:50],
            "seconds": round(traced.seconds + draw_seconds[0], 1),
        },
    }
    header["profile_hash"] = profile_hash(header)
    atomic_write(outp / "profile.json", json.dumps(header, indent=1, default=str))
    prof = load_endpoint_profile(outp)
    fit_seconds = time.perf_counter() - t0
    rows: list[dict[str, Any]] = []
    audit_seconds = None
    if len(ho) and prof.verdict is not None:
        auditor = Auditor.from_endpoint(client, prof, check_identity=False)
        for i in ho:
            t = pairs_v[i]
            res = auditor.score(t, pieces_v[i]).to_dict()
            gold = gold_answers(recs_v[i], dec[t.id].label)
            rows.append(held_out_row(dec[t.id], res, context=t.context, query=t.query, gold=gold))
        sample = [pairs_v[i] for i in ho[: max(0, timing_sample)]]
        if sample:
            from mnemoscope.audit.requests import AuditRequest

            ts = time.perf_counter()
            auditor.audit([AuditRequest(t.context, t.query, id=t.id) for t in sample])
            audit_seconds = (time.perf_counter() - ts) / len(sample)
    write_validation(
        outp,
        prof,
        rows,
        labels=check.summary(),
        split=split,
        calibration_seconds=fit_seconds,
        audit_seconds=audit_seconds,
    )
    return load_endpoint_profile(outp)
