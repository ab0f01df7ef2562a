"""The leaderboard runner: every registered method on the same documents, splits and seeds.

Orchestration only: this module traces documents (through :mod:`mnemoscope.trace`), hands
the traces to each method (:mod:`mnemoscope.detectors`), and scores the results
(:mod:`mnemoscope.stats`). Token statistics are cached per (model fingerprint, text variant,
documents) under ``OUT/cache``, so a re-run after a crash or with more methods recomputes
nothing it already has.
"""

from __future__ import annotations

import hashlib
import json
import logging
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from tqdm.auto import tqdm

from mnemoscope.bench.datasets import Document, check_binary_labels, truncate_documents
from mnemoscope.data.records import RecordError
from mnemoscope.detectors.base import METHODS, MembershipData, MembershipMethod
from mnemoscope.detectors.blind import BLIND_METHODS, shift_diagnostic
from mnemoscope.errors import InputError
from mnemoscope.features.tokens import TokenStats
from mnemoscope.io import atomic_savez
from mnemoscope.models.loader import LoadedModel
from mnemoscope.provenance import provenance as run_provenance
from mnemoscope.trace.memory import release_memory

__all__ = [
    "DEFAULT_METHODS",
    "LeaderboardConfig",
    "LeaderboardResult",
    "run_leaderboard",
    "token_stats_batch",
]

log = logging.getLogger(__name__)

DEFAULT_METHODS = ("loss", "zlib", "lowercase", "min_k_10", "min_k_20", "min_k_pp_10", "min_k_pp_20", "ref")


@dataclass(frozen=True)
class LeaderboardConfig:
    """Settings of a leaderboard run (all recorded in ``run.json``).

    Attributes:
        methods: registered method names.
        seed: seeds bootstrap resampling and CV folds.
        n_resamples: bootstrap resamples for AUC confidence intervals.
        n_splits: CV folds for supervised methods (every fitted step inside the folds).
        max_tokens: documents longer than this (in tokens) are truncated or rejected.
        long_policy: ``"truncate"`` (with a warning) or ``"reject"``.
        batch_size: documents per forward pass.
        blind: also run the blind baselines (``blind_tfidf``, ``blind_date``,
            ``blind_embedding``: classifiers on the text that never see the model) and the shift
            diagnostic; their AUC is printed next to every model-based method.
        blind_embedding: include ``blind_embedding`` (loads the offline sentence encoder).
    """

    methods: tuple[str, ...] = DEFAULT_METHODS
    seed: int = 0
    n_resamples: int = 1000
    n_splits: int = 5
    max_tokens: int = 256
    long_policy: Literal["truncate", "reject"] = "truncate"
    batch_size: int = 8
    pair_max_new_tokens: int = 32
    blind: bool = True
    blind_embedding: bool = True


@dataclass
class LeaderboardResult:
    entries: list[dict[str, Any]]
    scores: dict[str, dict[str, np.ndarray]]
    labels: np.ndarray
    warnings: list[RecordError] = field(default_factory=list)
    shift: dict[str, Any] = field(default_factory=dict)
    truncation: dict[str, Any] = field(default_factory=dict)


Loader = Callable[[str | None], LoadedModel]


def _docs_hash(docs: Sequence[Document]) -> str:
    h = hashlib.sha256()
    for d in docs:
        h.update(d.id.encode())
        h.update(b"\0")
        h.update(d.text.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def _token_stats(
    lm: LoadedModel,
    texts: list[str],
    cache: Path,
    variant: str,
    docs_hash: str,
    *,
    batch_size: int,
    progress: bool,
    engine: Any = None,
    load: Loader | None = None,
) -> list[TokenStats]:
    """Token statistics of ``texts`` under ``lm``, cached on disk per (model, variant, documents)."""
    from mnemoscope.trace import Tracer

    path = cache / f"{lm.info.fingerprint[:16]}-{variant}-{docs_hash}.npz"
    if path.is_file():
        with np.load(path, allow_pickle=False) as z:
            return [TokenStats(z[f"{i}/lp"], z[f"{i}/mu"], z[f"{i}/sigma"]) for i in range(len(texts))]
    if engine is not None and load is not None:  # the same batches, on the engine's workers
        stats = list(engine.token_stats(load, texts, batch_size=batch_size))
    else:
        tracer = Tracer(lm, batch_size=batch_size)
        stats = []
        bar = tqdm(total=len(texts), desc=f"{lm.info.name} {variant}", unit="doc", disable=not progress)
        for start in range(0, len(texts), batch_size):
            chunk = texts[start : start + batch_size]
            stats.extend(token_stats_batch(tracer, chunk))
            bar.update(len(chunk))
        bar.close()
    cache.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    for i, s in enumerate(stats):
        arrays.update({f"{i}/lp": s.logprobs, f"{i}/mu": s.mu, f"{i}/sigma": s.sigma})
    atomic_savez(path, arrays)
    return stats


def token_stats_batch(tracer: Any, texts: Sequence[str]) -> list[TokenStats]:
    """Token statistics of one batch of texts: the leaderboard's per-batch step (the Ray
    engine's actors call it too)."""
    from mnemoscope.trace import Capture

    cap = Capture(hidden="none", logprobs="none", token_stats=True)
    return [TokenStats.from_trace(t) for t in tracer.trace(list(texts), capture=cap)]


def _pair_traces(
    lm: LoadedModel,
    docs: Sequence[Document],
    cache: Path,
    config: LeaderboardConfig,
    progress: bool,
    engine: Any = None,
    load: Loader | None = None,
) -> list[Any]:
    """Paired traces of the documents: context = the document, query = its ``query`` field, or
    (when no document has one) a continuation of its first 100 characters (CRM's BookMIA protocol)."""
    from mnemoscope.data.records import DEFAULT_QUERY_CHARS
    from mnemoscope.trace import PairConfig, PairItem, PromptBuilder, load_traces
    from mnemoscope.trace.pipeline import run_pairs

    has_query = all(isinstance(d.meta.get("query"), str) and d.meta["query"].strip() for d in docs)
    task = "plain" if has_query else "continuation"
    items = [
        PairItem(d.id, d.text, d.meta["query"] if has_query else d.text[:DEFAULT_QUERY_CHARS], d.label)
        for d in docs
    ]
    # instruct models need their chat template: without it SmolLM2-Instruct ends its turn at once
    chat = bool(lm.info.has_chat_template)
    pc = PairConfig(
        builder=PromptBuilder(template="A", task=task, chat=chat),
        max_new_tokens=config.pair_max_new_tokens,
        answer_without=False,
    )
    folder = cache / f"pairs-{lm.info.fingerprint[:16]}-{_docs_hash(docs)}{'-chat' if chat else ''}"
    if engine is not None and load is not None:
        summary = engine.run_pairs(load, items, folder, config=pc, batch_size=config.batch_size)
    else:
        summary = run_pairs(lm, items, folder, config=pc, batch_size=config.batch_size, progress=progress)
    if summary.errors:
        first = summary.errors[0]
        raise InputError(
            f"{len(summary.errors)} document(s) could not be traced as pairs; first: "
            f"id {first['id']}: {first['message']}"
        )
    by_id = {t.id: t for t in load_traces(folder)}
    return [by_id[d.id] for d in docs]


def _score(
    method: MembershipMethod, data: MembershipData, config: LeaderboardConfig
) -> tuple[np.ndarray, str]:
    """Scores for every document: direct for unsupervised methods, out-of-fold for supervised ones."""
    if not method.supervised:
        return np.asarray(method.score(data), dtype=float), "unsupervised"
    from mnemoscope.stats import cross_val_scores

    cv = cross_val_scores(
        method.make_estimator(),
        method.features(data),
        data.labels,
        n_splits=config.n_splits,
        seed=config.seed,
    )
    return np.asarray(cv.oof_scores, dtype=float), f"{config.n_splits}-fold CV ({cv.protocol})"


def run_leaderboard(
    documents: Sequence[Document],
    siblings: Sequence[tuple[str, Loader]],
    out: str | Path,
    config: LeaderboardConfig | None = None,
    *,
    reference: Loader | None = None,
    progress: bool = True,
    provenance: dict[str, Any] | None = None,
    engine: Any = None,
    notify: Callable[[str], None] | None = None,
) -> LeaderboardResult:
    """Evaluate every method of ``config.methods`` on every sibling.

    Args:
        documents: labelled documents (1 = member).
        siblings: ``(name, loader)`` pairs; ``loader(None)`` returns the loaded suspect model.
        out: output folder: ``leaderboard.json`` (a list, one entry per sibling and method,
            each with the best blind baseline's AUC next to it), ``leaderboard.md``, ``roc.png``,
            ``scores/<sibling>.jsonl``, ``run.json`` (with ``shift_warning``/``shift_reason``
            and the truncation summary).
        reference: loader of the reference model for ``ref`` (typically the base model).
        provenance: extra facts recorded in ``run.json`` (model specs, adapters, data source).
        engine: where the forward passes run (``None``: here); e.g.
            :class:`mnemoscope.pipelines.ray.RayLeaderboardEngine`, whose actors call
            ``loader(None)`` themselves and run the same batches.
        notify: called once with messages a user must see before the run goes on (documents
            that will be truncated); default: a logged warning.

    Returns:
        A :class:`LeaderboardResult` with the entries and per-document scores.
    """
    from mnemoscope.pipelines.blind import blind_baselines
    from mnemoscope.report import leaderboard_markdown, roc_figure, save_figure
    from mnemoscope.stats import summarize

    config = config or LeaderboardConfig()
    out = Path(out)
    say = notify or (lambda msg: log.warning("%s", msg))
    methods = {name: METHODS.build(name) for name in config.methods if name not in BLIND_METHODS}
    blind_names = [
        m
        for m in BLIND_METHODS
        if m in config.methods or (config.blind and (m != "blind_embedding" or config.blind_embedding))
    ]
    needs = set().union(*(m.requires for m in methods.values()))
    if "reference" in needs and reference is None:
        raise InputError("method 'ref' needs a reference model (the base model without adapter)")
    check_binary_labels(documents)
    t0 = time.perf_counter()
    entries: list[dict[str, Any]] = []
    all_scores: dict[str, dict[str, np.ndarray]] = {}
    warnings: list[RecordError] = []
    ref_stats: list[TokenStats] | None = None
    labels = np.array([d.label for d in documents], dtype=int)
    identities: dict[str, Any] = {}
    shift: dict[str, dict[str, Any]] = {}
    truncation: dict[str, Any] = {
        "max_tokens": config.max_tokens,
        "policy": config.long_policy,
        "n_documents": len(documents),
        "n_truncated": 0,
        "by_model": {},
    }
    blind_cache: dict[str, Any] = {}
    (out / "scores").mkdir(parents=True, exist_ok=True)
    for sib_name, load in siblings:
        lm = load(None)
        model_name = lm.info.name
        identities[sib_name] = lm.info.to_dict()
        docs, warn = truncate_documents(documents, lm.tokenizer, config.max_tokens, config.long_policy)
        if len(docs) != len(documents):
            raise InputError(
                f"{len(documents) - len(docs)} document(s) exceed max_tokens={config.max_tokens} "
                "and long_policy='reject'; first: " + str(warn[0])
            )
        if warn:
            longest = max(int(d.meta.get("truncated_from_tokens", 0)) for d in docs)
            truncation["by_model"][sib_name] = {"n_truncated": len(warn), "longest_tokens": longest}
            if not truncation["n_truncated"]:  # said once, before any forward pass
                truncation.update(n_truncated=len(warn), longest_tokens=longest)
                say(
                    f"{len(warn)} of {len(documents)} documents will be truncated to {config.max_tokens} "
                    f"tokens (the longest has {longest}); use --max-tokens or --long-policy reject"
                )
        warnings += [w for w in warn if w not in warnings]
        texts = [d.text for d in docs]
        dh = _docs_hash(docs)
        kw: dict[str, Any] = {"batch_size": config.batch_size, "progress": progress, "engine": engine}
        data = MembershipData(ids=[d.id for d in docs], texts=texts, labels=labels)
        if "target" in needs:
            data.target = _token_stats(lm, texts, out / "cache", "text", dh, load=load, **kw)
        if "lowercase" in needs:
            lower = [t.lower() for t in texts]
            data.lowercase = _token_stats(lm, lower, out / "cache", "lower", dh, load=load, **kw)
        if "pairs" in needs:
            data.pairs = _pair_traces(lm, docs, out / "cache", config, progress, engine, load)
        del lm
        release_memory()  # the model goes before the next one loads (its reference cycles too)
        if "reference" in needs:
            if ref_stats is None:
                assert reference is not None
                ref_lm = reference(None)
                identities["reference"] = ref_lm.info.to_dict()
                ref_stats = _token_stats(ref_lm, texts, out / "cache", "text", dh, load=reference, **kw)
                del ref_lm
                release_memory()
            data.reference = ref_stats
        sib_scores: dict[str, np.ndarray] = {}
        sib_entries: list[dict[str, Any]] = []
        for name, method in methods.items():
            scores, protocol = _score(method, data, config)
            if not np.all(np.isfinite(scores)):
                raise InputError(f"method '{name}' produced non-finite scores on {sib_name}")
            sib_scores[name] = scores
            summary = summarize(scores, labels, rng=config.seed, n_resamples=config.n_resamples)
            sib_entries.append(
                {"method": name, "sibling": sib_name, "model": model_name, **summary, "protocol": protocol}
            )
        if blind_names:
            if dh not in blind_cache:  # the same texts give the same blind numbers
                blind_cache[dh] = blind_baselines(
                    data.ids,
                    texts,
                    labels,
                    methods=blind_names,
                    seed=config.seed,
                    n_splits=config.n_splits,
                    n_resamples=config.n_resamples,
                    cache=out / "cache",
                    cache_key=dh,
                )
            blind = blind_cache[dh]
            diag = blind.diagnostic
            sib_scores.update(blind.scores)
            for e in sib_entries:
                e.update(
                    blind_method=diag["best_blind"],
                    blind_roc_auc=diag["best_blind_auc"],
                    blind_roc_auc_ci=diag["best_blind_auc_ci"],
                )
            sib_entries += [{**e, "sibling": sib_name, "model": model_name} for e in blind.entries]
        else:
            diag = shift_diagnostic([], not_run="the blind baselines were switched off (--no-blind)")
        shift[sib_name] = diag
        entries += sib_entries
        all_scores[sib_name] = sib_scores
        with (out / "scores" / f"{sib_name}.jsonl").open("w") as f:
            for i, d in enumerate(docs):
                f.write(
                    json.dumps(
                        {
                            "id": d.id,
                            "label": int(labels[i]),
                            **{m: float(v[i]) for m, v in sib_scores.items()},
                        }
                    )
                    + "\n"
                )

    (out / "leaderboard.json").write_text(json.dumps(entries, indent=1) + "\n")
    (out / "leaderboard.md").write_text(leaderboard_markdown(entries))
    fig = roc_figure(
        {s: {m: (v, labels) for m, v in sc.items()} for s, sc in all_scores.items()},
        title="membership: ROC per model",
    )
    save_figure(fig, out / "roc.png")
    firing = [d for d in shift.values() if d["shift_warning"]]
    head = firing[0] if firing else next(iter(shift.values()), shift_diagnostic([]))
    run = {
        "shift_warning": bool(firing),
        "shift_reason": head["shift_reason"],
        "shift": shift,
        "truncation": truncation,
        "config": asdict(config),
        "n_documents": len(documents),
        "documents_hash": _docs_hash(documents),
        "models": identities,
        "warnings": [w.to_dict() for w in warnings],
        "seconds": time.perf_counter() - t0,
        "python": platform.python_version(),
        **(provenance or {}),
        "provenance": run_provenance(),
    }
    (out / "run.json").write_text(json.dumps(run, indent=1, default=str) + "\n")
    return LeaderboardResult(
        entries=entries,
        scores=all_scores,
        labels=labels,
        warnings=warnings,
        shift={"shift_warning": bool(firing), "shift_reason": head["shift_reason"], "by_model": shift},
        truncation=truncation,
    )
