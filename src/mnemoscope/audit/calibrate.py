"""Calibrating an audit profile: fit RePCS's tau, the token margin and the verdict model (and,
with ``with_crm``, CRM + its anomaly rule) on labelled records (``mnemoscope calibrate``; the
endpoint variant is :func:`mnemoscope.audit.endpoint_calibration.calibrate_endpoint_profile`, which calls
:func:`fit_verdict`).

**What is traced.** Each record once, both paths and the closed-book answer decoded together in
padded batches (:mod:`mnemoscope.trace.lockstep`, the audits' own decoder). The hidden states
are traced, and CRM fitted, only with ``with_crm`` (``calibrate --with-crm``, or a CRM signal
asked for): the default verdict's signals are black-box, and the hidden states would cost the
tracing and every later read of the folder for a CRM nobody uses.

:func:`fit_verdict` is the one place the verdict model and the token margin are fitted: the
profile build, the endpoint calibration and ``benchmarks/verdict_eval.py`` (on each training
fold) call it. The anomaly rule and the profile format are described in
:mod:`mnemoscope.audit.profile`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from mnemoscope.audit.draw import draw_for_config
from mnemoscope.audit.profile import (
    PROFILE_FORMAT,
    AnomalyRule,
    AuditProfile,
    CalibrationConfig,
    chat_template_sha256,
    load_profile,
    profile_hash,
)
from mnemoscope.audit.signals import answer_pieces, trace_signals
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
from mnemoscope.stats.conformal import conformal_upper
from mnemoscope.trace.templates import default_stops

__all__ = [
    "calibrate_profile",
    "check_class_counts",
    "data_hash",
    "fit_verdict",
    "oof_crm_probability",
    "record_groups",
    "token_margin",
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


@dataclass(frozen=True)
class _Labels:
    """What a calibration without CRM reads of :class:`~mnemoscope.features.crm.CRMData`: the
    labels (CRM's features are made of hidden states, which such a calibration does not trace)."""

    labels: np.ndarray | None
    n: int

    def __len__(self) -> int:
        return self.n

    def subset(self, idx: np.ndarray) -> _Labels:
        ix = np.asarray(idx, int)
        return _Labels(None if self.labels is None else self.labels[ix], len(ix))

    def with_labels(self, labels: np.ndarray) -> _Labels:
        return _Labels(np.asarray(labels, int), self.n)


@dataclass(frozen=True)
class _PairsFolder:
    """The traced pairs of a calibration without CRM (the shape :func:`_restrict` and
    :func:`_fit_local` read of a :class:`~mnemoscope.pipelines.crm.extract.CRMFolder`)."""

    data: _Labels
    pairs: list[Any]
    token_stats: None = None


def _pairs_folder(folder: Path) -> _PairsFolder:
    from mnemoscope.trace.store import load_traces

    pairs = list(load_traces(folder))
    lab = [t.label for t in pairs]
    labels = None if any(v is None for v in lab) else np.asarray(lab, dtype=np.int64)
    return _PairsFolder(data=_Labels(labels, len(pairs)), pairs=pairs)


def _stored_hidden(folder: Path) -> bool | None:
    """Whether the pair folder a resumed calibration finds holds hidden states (``None``: no
    folder yet)."""
    meta = folder / "meta.json"
    if not meta.is_file():
        return None
    try:
        settings = json.loads(meta.read_text()).get("settings") or {}
    except json.JSONDecodeError:
        return None  # TraceWriter names the corrupt file
    return bool(settings.get("hidden", True))


def calibrate_profile(
    lm: Any,
    records: Sequence[Record],
    out: str | Path,
    config: CalibrationConfig | None = None,
    *,
    input_errors: Sequence[RecordError] = (),
    progress: bool = True,
    overwrite: bool = False,
    traces_dir: str | Path | None = None,
    timing_sample: int = 4,
) -> AuditProfile:
    """Trace ``records`` once (resumable, under ``traces_dir`` or ``out/traces``; the closed-book
    answer included), verify their labels on this model (``config.labels``), split the kept ones by
    fact into a calibration and a held-out part, fit RePCS + the verdict model (+ CRM and its
    anomaly rule with ``config.with_crm``) on the calibration part, save, then audit the held-out
    part with the saved profile (scoring the traces; ``timing_sample`` held-out items are also
    audited live to time an audit) and write the validation card
    (:mod:`mnemoscope.audit.validation`).

    A trace folder already holding hidden states (an older calibration's, or one with CRM) is
    resumed as it is, hidden states included.

    Raises:
        InputError: too few usable records, every item failing verification, too few verified
            items per class (the counts named), a label vector that cannot fit what was asked
            (a classifier needs both labels), no clean record to calibrate on, or CRM asked on a
            trace folder made without hidden states.
    """
    from mnemoscope.pipelines.crm.extract import CRMExtractConfig, extract, load_folder

    t0 = time.perf_counter()
    c = config or CalibrationConfig()
    if c.labels == "verify":
        check_verifiable(records)
    else:
        check_labelled(records)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    use_l1 = c.with_crm and "l1" in c.levels
    tdir = Path(traces_dir) if traces_dir is not None else out / "traces"
    stored_hidden = None if overwrite else _stored_hidden(tdir / "pairs")
    if c.with_crm and stored_hidden is False:
        raise InputError(
            f"{tdir / 'pairs'} holds traces made without hidden states (a calibration without CRM), "
            "and CRM is made of them: pass --overwrite to trace again, or another --out",
            field="with_crm",
        )
    ex_cfg = CRMExtractConfig(
        template=c.template,
        task=c.task,  # type: ignore[arg-type]
        chat=c.chat,
        max_new_tokens=c.max_new_tokens,
        batch_size=c.batch_size,
        attention_flow=False,
        static=False,
        logit_lens=False,
        gradient_norm=False,
        embedder=c.embedder if use_l1 else "none",
        hidden=c.with_crm or bool(stored_hidden),
        decode="lockstep",
    ).resolved(lm)
    stops = tuple(c.stop) if c.stop is not None else default_stops(bool(ex_cfg.chat))
    if stops and "stop" in {f.name for f in fields(ex_cfg)}:
        ex_cfg = replace(ex_cfg, stop=stops)  # type: ignore[call-arg,unused-ignore]
    from mnemoscope.trace.store import stored_ids

    # traces a resumed run reuses (their tracing time is not in this run's wall time)
    before = set() if overwrite else stored_ids(tdir / "pairs")
    draw, pool = None, records
    if c.per_class is not None:
        from mnemoscope.trace.store import load_answers

        first = [overwrite]

        def answers_for(chosen: list[Any]) -> dict[str, tuple[str, str | None]]:
            extract(lm, chosen, tdir, ex_cfg, overwrite=first[0], progress=progress)
            first[0] = False
            # the answers only: not every trace of every round read back, arrays included
            return load_answers(tdir / "pairs", [r.id for r in chosen])

        draw = draw_for_config(c, records, answers_for, progress=progress)
        records, overwrite = draw.records, False
    summary = extract(
        lm, records, tdir, ex_cfg, input_errors=input_errors, overwrite=overwrite, progress=progress
    )
    folder: Any = load_folder(tdir, keep_without=False) if c.with_crm else _pairs_folder(tdir / "pairs")
    by_id = {r.id: r for r in records}
    idx = [i for i, t in enumerate(folder.pairs) if t.id in by_id]
    answers = {folder.pairs[i].id: (folder.pairs[i].answer_with, folder.pairs[i].answer_without) for i in idx}
    check = verify_labels([by_id[folder.pairs[i].id] for i in idx], answers, mode=c.labels)
    if c.labels == "verify":
        check_class_counts(check, c.min_per_class)
    dec = {d.id: d for d in check.decisions}
    keep = [i for i in idx if dec[folder.pairs[i].id].keep]
    labels_all = [dec[folder.pairs[i].id].label for i in keep]
    has_labels = all(v is not None for v in labels_all)
    folder_v = _restrict(folder, keep, labels_all if has_labels else None)
    kept_records = [by_id[t.id] for t in folder_v.pairs]
    cal, ho = np.arange(len(keep)), np.array([], int)
    if has_labels and len(set(labels_all)) == 2:
        cal, ho = split_by_fact(
            labels_all, record_groups(kept_records), seed=c.seed, fraction=c.held_out_fraction
        )
    folder_fit = _restrict(folder_v, cal.tolist(), None if not has_labels else [labels_all[i] for i in cal])
    header = _fit_local(lm, folder_fit, c, ex_cfg, out, kinds=[dec[t.id].kind for t in folder_fit.pairs])
    header["layout"] = {
        "prompt": header["prompt"],
        "chat_template_sha256": chat_template_sha256(
            getattr(lm.tokenizer, "chat_template", None) if header["prompt"].get("chat") else None
        ),
        "max_new_tokens": c.max_new_tokens,
        "stop": list(stops),
    }
    header["labels"] = check.summary()
    if draw is not None:
        header["draw"] = draw.summary()
    split = _split_record(c, [folder_v.pairs[i].id for i in ho], labels_all, cal, ho)
    header["split"] = split
    header["data"].update(
        {
            "sha256": data_hash(pool),
            "n_records": len(pool) + len(input_errors),
            "n_traced": len(idx),
            "n_traces_reused": sum(folder.pairs[i].id in before for i in idx),
            "n_verified": len(keep),
            "n_clean": len(keep) if not has_labels else sum(v == 0 for v in labels_all),
            "n_memory": None if not has_labels else sum(v == 1 for v in labels_all),
            "n_errors": summary.get("n_errors", 0),
        }
    )
    if not c.with_crm:  # a crm.npz of an earlier calibration into this folder is no part of this profile
        (out / "crm.npz").unlink(missing_ok=True)
    header["profile_hash"] = profile_hash(header, (out / "crm.npz").read_bytes() if c.with_crm else None)
    atomic_write(out / "profile.json", json.dumps(header, indent=1, default=str))
    prof = load_profile(out, model=lm.info)
    fit_seconds = time.perf_counter() - t0
    gold = {r.id: gold_answers(r, dec[r.id].label) for r in kept_records}
    rows, audit_seconds, live = _held_out_local(lm, prof, folder_v, dec, ho, timing_sample, gold)
    write_validation(
        out,
        prof,
        rows,
        labels=check.summary(),
        split=split,
        calibration_seconds=fit_seconds,
        audit_seconds=audit_seconds,
        extra={"live_check": live},
    )
    return load_profile(out, model=lm.info)


def _split_record(
    c: CalibrationConfig, held_ids: list[str], labels: list[int | None], cal: np.ndarray, ho: np.ndarray
) -> dict[str, Any]:
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


def _restrict(folder: Any, idx: Sequence[int], labels: Sequence[int | None] | None) -> Any:
    ix = np.asarray(list(idx), int)
    data = folder.data.subset(ix)
    if labels is not None:
        data = data.with_labels(np.asarray(labels, int))
    ts = folder.token_stats
    return replace(
        folder,
        data=data,
        pairs=[folder.pairs[i] for i in ix],
        token_stats=None if ts is None else [ts[i] for i in ix],
    )


def _held_out_local(
    lm: Any,
    prof: AuditProfile,
    folder: Any,
    dec: dict[str, Any],
    ho: np.ndarray,
    timing_sample: int,
    gold: dict[str, list[str]] | None = None,
) -> tuple[list[dict[str, Any]], float | None, dict[str, Any] | None]:
    """Audit the held-out traces with the saved profile; time ``timing_sample`` live audits."""
    from mnemoscope.audit.auditor import Auditor
    from mnemoscope.audit.requests import AuditFailure, AuditRequest

    if not len(ho):
        return [], None, None
    auditor = Auditor(lm, prof, batch_size=1)
    rows = []
    for i in ho:
        t = folder.pairs[i]
        rows.append(
            held_out_row(
                dec[t.id],
                auditor.score(t).to_dict(),
                context=t.context,
                query=t.query,
                gold=(gold or {}).get(t.id, ()),
            )
        )
    sample = [folder.pairs[i] for i in ho[: max(0, timing_sample)]]
    if not sample:
        return rows, None, None
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
    return (
        rows,
        secs,
        {
            "n": len(sample),
            "same_answer": same,
            "max_abs_p_memory_diff": max(diffs) if diffs else None,
            "note": "live Auditor.audit of these held-out items vs the stored trace-scored rows",
        },
    )


def _fit_crm_part(
    folder: Any, c: CalibrationConfig, out: Path, kinds: Sequence[str | None] | None
) -> tuple[dict[str, Any], np.ndarray | None, np.ndarray | None]:
    """Fit CRM + its anomaly rule on ``folder`` (a :class:`~mnemoscope.pipelines.crm.extract.CRMFolder`)
    and save ``crm.npz``: the header's ``crm`` and ``anomaly`` blocks, the verdict's conformal
    records and CRM's probability per record (both ``None`` unless ``crm_probability`` is a
    verdict candidate)."""
    from mnemoscope.detectors.crm_artifact import save_crm
    from mnemoscope.pipelines.crm.eval import CRMEvalConfig
    from mnemoscope.pipelines.crm.run import fit_crm

    data, pairs = folder.data, folder.pairs
    n = len(data)
    labels = data.labels
    clean = np.ones(n, bool) if labels is None else labels == 0
    two_classes = labels is not None and len(np.unique(labels)) == 2
    kind = c.classifier
    if kind == "auto":
        kind = "lr" if two_classes else "none"
    if kind != "none" and not two_classes:
        raise InputError(
            f"a {kind} classifier needs records of both labels (0 = clean, 1 = from memory)", field="label"
        )

    # With CRM's classifier as a verdict signal, the verdict's conformal set is drawn first and
    # the CRM the audits use is fitted without it: its probability on those records is then
    # what a new request gets, so the conformal threshold holds for audits (an out-of-fold
    # probability from other CRMs is a different score function; docs/calibrate.md).
    crm_signal = "crm_probability" in c.verdict_candidates and kind != "none" and labels is not None
    conf_records = _verdict_conformal_records(pairs, labels, c, kinds) if crm_signal else None
    # held-out clean records set the anomaly threshold; the rest fit directions and mu/sigma
    rng = np.random.default_rng(c.seed)
    clean_idx = np.flatnonzero(clean)
    n_clean = len(clean_idx)
    n_hold = round(c.threshold_fraction * n_clean) if c.rule == "calibrated" else 0
    n_hold = min(n_hold, n_clean - 2)
    hold = np.sort(rng.permutation(clean_idx)[:n_hold]) if n_hold > 0 else np.array([], int)
    if conf_records is not None and c.rule == "calibrated":
        hold = conf_records  # one held-out clean set for both thresholds: the CRM sees neither
    fit_mask = np.ones(n, bool)
    fit_mask[hold] = False
    if conf_records is not None:
        fit_mask[conf_records] = False
    if kind != "none" and len(np.unique(np.asarray(data.labels)[fit_mask])) < 2:
        raise InputError("after holding out clean records for the threshold only one label is left")
    crm = fit_crm(
        replace(folder, data=data.subset(fit_mask)),
        classifier=kind,
        eval_config=CRMEvalConfig(
            direction=c.direction, variance_threshold=c.variance_threshold, seed=c.seed
        ),
        levels=c.levels,
        cv=False,
    )
    # anomaly reference: the clean fit records
    fit_clean = clean & fit_mask
    lts_clean = crm.lts(data.disp[fit_clean])
    crm.lts_mean = lts_clean.mean(0)
    crm.lts_std = lts_clean.std(0, ddof=1) if len(lts_clean) > 1 else np.ones(lts_clean.shape[1])
    threshold: float | None = None
    if c.rule == "calibrated" and len(hold):
        scores = [crm.anomaly(lts, c.k_sigma)[2] for lts in crm.lts(data.disp[hold])]
        threshold = conformal_upper(scores, c.alpha)
    rule = AnomalyRule(
        k_sigma=c.k_sigma,
        rule=c.rule,
        alpha=c.alpha,
        score_threshold=None if threshold is None or math.isinf(threshold) else threshold,
        n_threshold=len(hold),
    )
    save_crm(crm, out / "crm.npz")

    crm_prob = None
    if conf_records is not None:
        # the verdict fits on out-of-fold probabilities of the records outside its conformal set
        # (CRMs that never see the conformal set) and certifies on the audits' own CRM
        crm_prob = np.zeros(n)
        rest = np.setdiff1d(np.arange(n), conf_records)
        crm_prob[rest] = oof_crm_probability(replace(folder, data=data.subset(rest)), kind, c)
        if len(conf_records):
            crm_prob[conf_records] = crm.predict_proba(data.subset(conf_records))
    part = {
        "crm": {
            "file": "crm.npz",
            "content_hash": crm.content_hash,
            "classifier": crm.classifier,
            "levels": list(c.levels),
            "layers": crm.layers.tolist(),
        },
        "anomaly": {
            **asdict(rule),
            "threshold_note": (
                "conformal upper quantile of held-out clean scores"
                if rule.score_threshold is not None
                else (
                    "paper rule: any flagged layer"
                    if c.rule == "paper"
                    else f"too few held-out clean records ({len(hold)}) for alpha={c.alpha}; "
                    "falls back to the paper rule (any flagged layer)"
                )
            ),
        },
    }
    return part, conf_records, crm_prob


def _fit_local(
    lm: Any,
    folder: Any,
    c: CalibrationConfig,
    ex_cfg: Any,
    out: Path,
    kinds: Sequence[str | None] | None = None,
) -> dict[str, Any]:
    """Fit RePCS + the verdict model (+ CRM and its anomaly rule with ``c.with_crm``, saved to
    ``crm.npz``) on ``folder``; the header."""
    from mnemoscope.detectors.repcs import RePCS

    data, pairs = folder.data, folder.pairs
    n = len(data)
    if n < 4:
        raise InputError(f"calibration needs at least 4 traced records, got {n}")
    labels = data.labels
    clean = np.ones(n, bool) if labels is None else labels == 0
    n_clean = int(clean.sum())
    if n_clean < 2:
        raise InputError(
            f"calibration needs at least 2 clean records (label 0, or unlabelled input); got {n_clean}",
            field="label",
        )
    crm_part: dict[str, Any] = {"crm": None, "anomaly": None}
    conf_records = crm_prob = None
    if c.with_crm:
        crm_part, conf_records, crm_prob = _fit_crm_part(folder, c, out, kinds)

    repcs = RePCS(alpha=c.repcs_alpha, max_steps=c.max_new_tokens)
    repcs.fit(pairs, None if labels is None else labels)
    rec = repcs.calibration_record()
    margin, verdict = fit_verdict(
        lm, pairs, labels, repcs, c, crm_prob, conformal_records=conf_records, kinds=kinds
    )

    return {
        "format": PROFILE_FORMAT,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "model": lm.info.to_dict(),
        "prompt": ex_cfg.pair_config().builder.to_dict(),
        "max_new_tokens": c.max_new_tokens,
        "config": asdict(c),
        **crm_part,
        "repcs": rec,
        # the three-way source follows the answer-bearing words (pipelines.verdict.decide_source_facts)
        "source_rule": "facts",
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


def _verdict_conformal_records(
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


def oof_crm_probability(folder: Any, kind: str, c: CalibrationConfig, n_splits: int = 5) -> np.ndarray:
    """CRM's classifier probability for every calibration record, each from a CRM fitted without it.

    The verdict model may only combine a fitted signal measured out of fold: an in-sample
    probability would look better than it is on new requests.
    """
    from sklearn.model_selection import StratifiedKFold

    from mnemoscope.pipelines.crm.eval import CRMEvalConfig
    from mnemoscope.pipelines.crm.run import fit_crm

    data = folder.data
    y = np.asarray(data.labels)
    oof = np.zeros(len(y))
    for tr, te in StratifiedKFold(n_splits, shuffle=True, random_state=c.seed).split(np.zeros(len(y)), y):
        m = fit_crm(
            replace(folder, data=data.subset(tr)),
            classifier=kind,
            eval_config=CRMEvalConfig(
                direction=c.direction, variance_threshold=c.variance_threshold, seed=c.seed
            ),
            levels=c.levels,
            cv=False,
        )
        oof[te] = m.predict_proba(data.subset(te))
    return oof


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
) -> tuple[float, VerdictModel | None]:
    """The token margin (from memorized answers) and the verdict model (needs both labels).

    ``crm_oof``: CRM's classifier probability per record (``crm_probability``), measured by
    CRMs that never saw the record. ``conformal_records``: the record indices of the verdict's
    conformal set, when the caller drew it (default: the verdict's own seeded draw).
    ``kinds``: each record's item kind; with ``c.certify == "per-kind"`` the threshold is
    certified within every kind (:meth:`VerdictModel.fit`, ``groups``).
    ``pieces``: each answer's token texts (default: decoded by ``lm.tokenizer``; the endpoint
    backend passes the server's, with ``lm=None``).
    """
    if pieces is None:
        pieces = [answer_pieces(lm.tokenizer, t.answer_ids) for t in pairs]
    margin = token_margin(pairs, pieces, labels, c.token_margin_quantile)
    if labels is None or len(np.unique(labels)) < 2:
        return margin, None
    keep = _verdict_rows(pairs)
    rows = [trace_signals(pairs[i], pieces[i], margin=margin, repcs=repcs)[0] for i in keep]
    if crm_oof is not None:
        for r, i in zip(rows, keep, strict=True):
            r["crm_probability"] = float(crm_oof[i])
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
