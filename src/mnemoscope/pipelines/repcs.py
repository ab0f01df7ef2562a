"""The RePCS pipeline: calibrate on clean queries, score, evaluate -- and the one RePCS verdict.

:func:`repcs_verdict` is the only place a RePCS decision is made: the CLI (``repcs score``),
the audit pipeline (the ``repcs`` block of every audit, server included) and the benchmarks
call it, so the same calibration and input always give the same JSON. Its rule for an empty
context: both paths are the same prompt, Z = 0 by construction, which is *no evidence*: never
flagged as memorized, and the output says so.

Everything else consumes paired traces; the model is only touched through
:func:`mnemoscope.trace.pipeline.run_pairs` (resumable), the lockstep decoder and, for the
SelfCheck-style baseline, :meth:`mnemoscope.trace.Tracer.sample`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mnemoscope.audit.profile import load_profile
from mnemoscope.audit.results import EarlyStop, ResultsFile
from mnemoscope.audit.verdict import EMPTY_CONTEXT_NOTE, repcs_verdict
from mnemoscope.detectors.base import MembershipData
from mnemoscope.detectors.repcs import RePCS, topk_kl
from mnemoscope.errors import InputError
from mnemoscope.models.loader import check_same_model
from mnemoscope.stats import auc_ci, summarize, threshold_metrics
from mnemoscope.trace.types import PairTrace

if TYPE_CHECKING:
    from mnemoscope.models.endpoint import EndpointClient, EndpointFingerprint
    from mnemoscope.trace.endpoint import EndpointPairConfig

__all__ = [
    "EMPTY_CONTEXT_NOTE",
    "NOISE_LEVELS",
    "calibration_hash",
    "closed_book_logprob",
    "consistency_scores",
    "evaluate",
    "load_calibration",
    "noise_robustness",
    "repcs_verdict",
    "run_eval",
    "score_batch",
    "score_config",
    "score_file",
    "score_line",
    "score_records",
    "split_calibration",
]

NOISE_LEVELS = (0.0, 0.02, 0.05, 0.10)


def load_calibration(path: str | Path, model: Any | None = None) -> tuple[RePCS, dict[str, Any]]:
    """A RePCS calibration from ``repcs calibrate``'s JSON or from an audit profile folder.

    Returns the fitted detector and a dict with ``model`` (identity) and ``prompt`` (the
    prompt builder settings) and ``max_new_tokens``. With ``model`` (a ModelInfo or dict),
    another model's calibration is refused.
    """
    p = Path(path)
    if p.is_dir() or p.name == "profile.json":
        prof = load_profile(p if p.is_dir() else p.parent, model=model, backend="local")
        rec = dict(prof.header["repcs"])
        meta = {"model": prof.model, "prompt": prof.header["prompt"], "max_new_tokens": prof.max_new_tokens}
    else:
        try:
            rec = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise InputError(f"cannot read the calibration {p}: {e}") from e
        pc = rec.get("pair_config", {})
        meta = {
            "model": rec.get("model", {}),
            "prompt": {k: pc.get(k) for k in ("template", "task", "chat", "system_prompt")},
            "max_new_tokens": pc.get("max_new_tokens", rec.get("T")),
        }
        if model is not None:
            check_same_model(meta["model"], model, what=f"the calibration {p}", remedy="recalibrate")
    return RePCS.from_calibration(rec), meta


def score_config(meta: dict[str, Any]) -> Any:
    """The :class:`~mnemoscope.trace.PairConfig` a calibration record scores with."""
    from mnemoscope.trace import PairConfig, PromptBuilder

    pr = meta["prompt"]
    return PairConfig(
        builder=PromptBuilder(
            template=pr["template"],
            task=pr.get("task") or "plain",
            chat=bool(pr.get("chat")),
            system_prompt=pr.get("system_prompt"),
        ),
        max_new_tokens=int(meta["max_new_tokens"]),
        answer_without=False,
        hidden=False,
    )


def score_batch(
    tracer: Any, det: RePCS, batch: Sequence[Any], config: Any, *, on_error: str = "skip"
) -> tuple[list[str], list[dict[str, Any]]]:
    """Score one batch of records: the output lines (``{"id", "score": -Z, **repcs_verdict}``) and the
    error rows. The per-batch step of :func:`score_file` (the Ray engine's actors call it too)."""
    from mnemoscope.trace import prepare_pair
    from mnemoscope.trace.lockstep import trace_lockstep

    prepared, bad = [], []
    for r in batch:
        try:
            prepared.append(prepare_pair(tracer, r, config))
        except InputError as e:
            if on_error == "raise":
                raise InputError(f"line {r.line}: {e.reason}", record=r.id, field=e.field) from e
            bad.append({"line": r.line, "id": r.id, "field": e.field, "message": e.reason})
    traces = trace_lockstep(tracer, prepared, config) if prepared else []
    return [score_line(det, t) for t in traces], bad


def score_line(det: RePCS, trace: PairTrace, extra: dict[str, Any] | None = None) -> str:
    """One ``repcs score`` output line: ``{"id", "score": -Z, **repcs_verdict(...), **extra}``."""
    v = repcs_verdict(det, trace)
    return json.dumps({"id": trace.id, "score": -v["kl"], **v, **(extra or {})})


def score_records(
    records: Sequence[Any],
    out: str | Path,
    score: Callable[[Sequence[Any]], tuple[list[str], list[dict[str, Any]]]],
    *,
    batch_size: int = 8,
    progress: bool = True,
    early_stop: int = 8,
    desc: str = "repcs score",
) -> dict[str, Any]:
    """The one ``repcs score`` runner (in process, over an endpoint): ``score(batch)`` returns the
    batch's output lines and error rows; lines go to the resumable ``out`` file
    (:class:`~mnemoscope.audit.results.ResultsFile`: ids already there are skipped, a torn
    last line is cut, appends are fsynced). Stops early when the first ``early_stop`` records
    all fail for the same cause (:class:`~mnemoscope.audit.results.EarlyStop`)."""
    from tqdm.auto import tqdm

    f = ResultsFile(out)
    done = f.done_ids
    todo = [r for r in records if r.id not in done]
    bad: list[dict[str, Any]] = []
    stop = EarlyStop(early_stop, what=desc)
    n_ok = 0
    with tqdm(total=len(todo), desc=desc, disable=not progress) as bar:
        for start in range(0, len(todo), batch_size):
            batch = todo[start : start + batch_size]
            lines, failed = score(batch)
            bad.extend(failed)
            n_ok += f.append(lines)
            bar.update(len(batch))
            for _ in lines:
                stop.ok()
            for e in failed:
                stop.failed(str(e.get("message")))
    return {"scored": n_ok, "already_done": len(done), "errors": bad, "out": str(f.path)}


def score_file(
    lm: Any,
    calibration: str | Path,
    input_path: str | Path,
    out: str | Path,
    *,
    batch_size: int = 8,
    on_error: str = "skip",
    progress: bool = True,
    check_model: bool = True,
) -> dict[str, Any]:
    """Score a JSONL of queries against a calibration (resumable: ids already in ``out`` are skipped).

    Each output line is ``{"id", "score": -Z, **repcs_verdict(...)}``; bad records are reported
    (line, id, field) and skipped, or raised with ``on_error="raise"``.
    """
    from mnemoscope.data import read_records
    from mnemoscope.trace import Tracer

    det, meta = load_calibration(calibration, lm.info if check_model else None)
    config = score_config(meta)
    records, errors = read_records(input_path, on_error=on_error)  # type: ignore[arg-type]
    tracer = Tracer(lm, batch_size=batch_size)
    res = score_records(
        records,
        out,
        lambda batch: score_batch(tracer, det, batch, config, on_error=on_error),
        batch_size=batch_size,
        progress=progress,
    )
    res["errors"] = [e.to_dict() for e in errors] + res["errors"]
    return res


def run_eval(
    traces: Sequence[PairTrace],
    records: Sequence[Any],
    detector: RePCS,
    out: str | Path,
    *,
    calibration: dict[str, Any] | None = None,
    calibration_fraction: float = 0.5,
    seed: int = 0,
    n_resamples: int = 1000,
    samples: Sequence[Sequence[str]] | None = None,
    report: dict[str, Any] | None = None,
    row_extra: dict[str, Any] | None = None,
) -> EvalResult:
    """``repcs eval`` (in process or over an endpoint): check the labels, :func:`evaluate`, and write
    ``out/report.json`` (with ``report``'s fields and the provenance) and ``out/scores.jsonl``.

    Raises:
        InputError: a record without a label, or labels of one class (AUC undefined).
    """
    from mnemoscope.io import atomic_write
    from mnemoscope.provenance import provenance
    from mnemoscope.stats import undefined_reason

    if any(r.label is None for r in records):
        raise InputError("every record needs a label (1 = memorized, 0 = clean) for eval", field="label")
    labels = np.array([r.label for r in records])
    reason = undefined_reason(labels)
    if reason:
        raise InputError(f"{reason}: AUC is undefined", field="label")
    res = evaluate(
        traces,
        labels,
        detector,
        calibration=calibration,
        calibration_fraction=calibration_fraction,
        seed=seed,
        n_resamples=n_resamples,
        kinds=[r.extra.get("kind") for r in records],
        samples=samples,
    )
    res.report.update(report or {})
    res.report["seed"] = seed
    res.report["provenance"] = provenance()
    outp = Path(out)
    outp.mkdir(parents=True, exist_ok=True)
    atomic_write(outp / "report.json", json.dumps(res.report, indent=1, default=float) + "\n")
    atomic_write(
        outp / "scores.jsonl", "".join(json.dumps({**row, **(row_extra or {})}) + "\n" for row in res.rows)
    )
    return res


def calibration_hash(traces: Sequence[PairTrace]) -> str:
    """SHA-256 over the calibration records (id, context, query, answer tokens), order-independent."""
    h = hashlib.sha256()
    for t in sorted(traces, key=lambda t: t.id):
        h.update(json.dumps([t.id, t.context, t.query, t.answer_ids.tolist()]).encode())
    return h.hexdigest()


def closed_book_logprob(traces: Sequence[PairTrace]) -> np.ndarray:
    """Baseline: mean log p(y_t) of the answer on the query-only path (how sure the model is
    of the answer without the context). Higher = memorized."""
    from mnemoscope.detectors.repcs import ClosedBookLogprob

    data = MembershipData(
        ids=[t.id for t in traces],
        texts=[t.context for t in traces],
        labels=np.zeros(len(traces), dtype=int),
        pairs=list(traces),
    )
    return ClosedBookLogprob().score(data)


def consistency_scores(samples: Sequence[Sequence[str]]) -> np.ndarray:
    """SelfCheckGPT-style agreement of n no-context samples per query: mean pairwise Jaccard
    of lower-cased word sets. Higher = more consistent = more likely memorized."""
    out = []
    for group in samples:
        sets = [set(s.lower().split()) for s in group]
        pairs = [(i, j) for i in range(len(sets)) for j in range(i + 1, len(sets))]
        vals = [len(sets[i] & sets[j]) / max(1, len(sets[i] | sets[j])) for i, j in pairs]
        out.append(float(np.mean(vals)) if vals else 0.0)
    return np.array(out)


def noise_robustness(
    traces: Sequence[PairTrace],
    labels: np.ndarray,
    *,
    levels: Sequence[float] = NOISE_LEVELS,
    seed: int = 0,
    n_resamples: int = 1000,
) -> list[dict[str, Any]]:
    """AUC of -Z when Gaussian noise N(0, sigma^2) is added to the output probabilities.

    The noise is applied to what a black-box API returns per step: the top-k probabilities
    of each path (the tail bucket absorbs the rest); probabilities are clipped at 0 and
    renormalised, and Z is the top-k estimator summed over steps.
    """
    rng = np.random.default_rng(seed)
    rows = []
    for sigma in levels:
        z = []
        for t in traces:
            total = 0.0
            for s in range(t.n_steps):
                rag = _noisy(t.topk_ids_with[s], t.topk_logprobs_with[s], sigma, rng)
                para = _noisy(t.topk_ids_without[s], t.topk_logprobs_without[s], sigma, rng)
                total += topk_kl(rag, para)[0]
            z.append(total)
        est = auc_ci(-np.array(z), labels, rng=seed, n_resamples=n_resamples)
        rows.append({"sigma": sigma, "roc_auc": est.estimate, "roc_auc_ci": [est.ci_low, est.ci_high]})
    return rows


def _noisy(ids: np.ndarray, logprobs: np.ndarray, sigma: float, rng: np.random.Generator) -> dict[int, float]:
    p = np.exp(logprobs.astype(np.float64))
    tail = max(0.0, 1.0 - p.sum())
    full = np.append(p, tail)
    if sigma > 0:
        full = np.clip(full + rng.normal(0.0, sigma, size=full.shape), 1e-12, None)
        full = full / full.sum()
    return {int(i): float(np.log(v)) for i, v in zip(ids.tolist(), full[:-1], strict=True)}


def split_calibration(labels: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Indices of the clean records used for calibration (a seeded random ``fraction`` of them)."""
    clean = np.flatnonzero(labels == 0)
    if len(clean) < 2:
        raise InputError(
            f"need at least 2 clean (label 0) records to calibrate and hold out, got {len(clean)}"
        )
    rng = np.random.default_rng(seed)
    n_cal = max(1, min(len(clean) - 1, round(fraction * len(clean))))
    return np.sort(rng.choice(clean, size=n_cal, replace=False))


@dataclass
class EvalResult:
    report: dict[str, Any]
    rows: list[dict[str, Any]]


def evaluate(
    traces: Sequence[PairTrace],
    labels: np.ndarray,
    detector: RePCS,
    *,
    calibration: dict[str, Any] | None = None,
    calibration_fraction: float = 0.5,
    seed: int = 0,
    n_resamples: int = 1000,
    kinds: Sequence[str | None] | None = None,
    samples: Sequence[Sequence[str]] | None = None,
    noise_levels: Sequence[float] = NOISE_LEVELS,
) -> EvalResult:
    """Threshold-free metrics on all records, plus decisions at a calibrated tau on held-out ones.

    With ``calibration`` (a record from ``repcs calibrate``) its tau is used and every record
    is held out; otherwise a seeded ``calibration_fraction`` of the clean records sets tau
    and is excluded from the threshold metrics (realised FPR on the other clean records).
    """
    labels = np.asarray(labels, dtype=int)
    z = detector.z(traces)
    scores = -z
    report: dict[str, Any] = {
        "method": "repcs",
        "params": detector.get_params(),
        **summarize(scores, labels, rng=seed, n_resamples=n_resamples),
    }
    if calibration is not None:
        tau = float(calibration["tau"])
        held = np.arange(len(traces))
        report["threshold"] = {
            "source": "calibration file",
            "tau": tau,
            "alpha": calibration.get("alpha"),
            "n_calibration": calibration.get("n"),
            "bound": calibration.get("bound"),
        }
    else:
        cal = split_calibration(labels, calibration_fraction, seed)
        # tau from the calibration half of the clean records; the memorized ones only estimate Delta
        fit_idx = np.concatenate([cal, np.flatnonzero(labels == 1)])
        cal_det = RePCS(**detector.get_params()).fit([traces[i] for i in fit_idx], labels[fit_idx])
        tau = cal_det.tau_
        held = np.setdiff1d(np.arange(len(traces)), cal)
        report["threshold"] = {
            "source": f"seeded {calibration_fraction:.0%} of the clean records (seed {seed})",
            "tau": tau,
            "alpha": detector.alpha,
            "n_calibration": len(cal),
            "bound": cal_det.calibration_record()["bound"],
            "calibration_hash": calibration_hash([traces[i] for i in cal]),
        }
    flags = z < tau
    held_clean = held[labels[held] == 0]
    cm = threshold_metrics(flags[held].astype(float), labels[held], 0.5)
    report["held_out"] = {
        "n": len(held),
        "confusion": cm.to_dict(),
        "realised_fpr": float(flags[held_clean].mean()) if len(held_clean) else None,
        "target_alpha": detector.alpha,
        "n_clean": len(held_clean),
    }
    report["empty_context_records"] = int(sum(t.identical_prompts for t in traces))
    report["early_eos_records"] = int(sum(t.stopped_at_eos for t in traces))
    topk = RePCS(**{**detector.get_params(), "estimator": "topk"})
    report["topk_estimator"] = {
        "k": int(traces[0].topk_ids_with.shape[1]) if traces else None,
        **_auc(-topk.z(traces), labels, seed, n_resamples),
    }
    base = {"closed_book_logprob": _auc(closed_book_logprob(traces), labels, seed, n_resamples)}
    if samples is not None:
        base["selfcheck_consistency"] = _auc(consistency_scores(samples), labels, seed, n_resamples)
    report["baselines"] = base
    report["noise_robustness"] = noise_robustness(
        traces, labels, levels=noise_levels, seed=seed, n_resamples=n_resamples
    )
    if kinds is not None:
        report["by_kind"] = _by_kind(scores, labels, kinds, seed, n_resamples)
    rows = [
        {
            "id": t.id,
            "score": float(s),
            "label": int(y),
            "kl": float(k),
            "memorized": bool(f),
            "n_steps": t.n_steps,
            "identical_prompts": t.identical_prompts,
            "stopped_at_eos": t.stopped_at_eos,
        }
        for t, s, y, k, f in zip(traces, scores, labels, z, flags, strict=True)
    ]
    return EvalResult(report=report, rows=rows)


def _auc(scores: np.ndarray, labels: np.ndarray, seed: int, n_resamples: int) -> dict[str, Any]:
    est = auc_ci(scores, labels, rng=seed, n_resamples=n_resamples)
    return {"roc_auc": est.estimate, "roc_auc_ci": [est.ci_low, est.ci_high], "reason": est.reason}


def _by_kind(
    scores: np.ndarray, labels: np.ndarray, kinds: Sequence[str | None], seed: int, n_resamples: int
) -> dict[str, Any]:
    kinds_arr = np.array([k or "unknown" for k in kinds])
    out = {}
    clean = kinds_arr[labels == 0]
    for kind in sorted(set(kinds_arr[labels == 1])):
        mask = (kinds_arr == kind) | (labels == 0)
        out[f"{kind} vs clean"] = {
            "n_pos": int((kinds_arr == kind).sum()),
            "n_neg": len(clean),
            **_auc(scores[mask], labels[mask], seed, n_resamples),
        }
    return out


# -- RePCS over an endpoint ------------------------------------------------------------------------


def _score_calibration(
    p: Path, chat_template: str | None
) -> tuple[RePCS, EndpointPairConfig, EndpointFingerprint]:
    """The detector, pair settings and fingerprint of an endpoint profile or a ``repcs calibrate
    --endpoint`` JSON."""
    from mnemoscope.audit.profile import ProfileError, load_endpoint_profile
    from mnemoscope.models.endpoint import EndpointFingerprint
    from mnemoscope.trace.endpoint import ChatTemplate, EndpointPairConfig, load_chat_template
    from mnemoscope.trace.templates import PromptBuilder

    if p.is_dir() or p.name == "profile.json":
        prof = load_endpoint_profile(p)
        assert prof.endpoint is not None
        return (
            RePCS.from_calibration(prof.header["repcs"]),
            prof.endpoint.pair_config,
            prof.endpoint.fingerprint,
        )
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
    return RePCS.from_calibration(rec), pcfg, EndpointFingerprint.from_dict(model["endpoint_fingerprint"])


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
    JSON. The in-process runner (:func:`~mnemoscope.pipelines.repcs.score_records`); output lines are
    ``{"id", "score": -Z, **repcs_verdict(...), "backend", "endpoint_method"}``."""
    from mnemoscope.audit.backends import check_endpoint_identity
    from mnemoscope.audit.tracing import trace_records
    from mnemoscope.data import read_records

    p = Path(calibration)
    det, pcfg, fp = _score_calibration(p, chat_template)
    caps = client.require_teacher_forcing()
    if check_model:
        check_endpoint_identity(client, fp, str(p))
    records, errors = read_records(input_path, on_error=on_error)  # type: ignore[arg-type]
    extra = {"backend": "endpoint", "endpoint_method": caps.method}

    def score(batch: Sequence[Any]) -> tuple[list[str], list[dict[str, Any]]]:
        traced = trace_records(client, batch, pcfg, on_error=on_error, early_stop=0)
        failed = [
            {"line": f.get("line"), "id": f["id"], "field": None, "message": f["message"]}
            for f in traced.failures
        ]
        # endpoint_method: the path that scored each record (auto may fall back on a refusal)
        lines = [
            score_line(det, t, {**extra, "endpoint_method": _method_of(t, caps.method)})
            for t in traced.traces
        ]
        return lines, failed

    res = score_records(records, out, score, batch_size=max(8, client.config.concurrency), progress=progress)
    res["errors"] = [e.to_dict() for e in errors] + res["errors"]
    return res


def _method_of(trace: Any, default: str) -> str:
    backend = trace.backend if isinstance(trace.backend, dict) else {}
    return str(backend.get("method") or default)
