"""CRM evaluation: every method, control and layer analysis of the paper, from one CRM folder.

Everything here consumes :class:`~mnemoscope.features.crm.CRMData`; nothing runs the model
(the causal analyses, which must, live in :mod:`mnemoscope.pipelines.crm.causal`).

Protocols (``CRMEvalConfig.protocol``):

* ``"leakage-free"`` (default): each method is one estimator (featurizer -> scaler ->
  classifier) fitted on the training folds only; layer selection, directions, PCA, the
  choice of "best" layers and scalers never see the test fold.
* ``"paper"``: the featurizer (directions, layer selection, ...) is fitted once on a
  stratified calibration subset of ``n_cal`` samples, all samples are transformed, and
  the scaler + classifier are cross-validated over all samples, calibration ones
  included, as in the paper (section 2). Reported under ``protocol: "paper"``.

Methods without a fitted featurizer step (L2 norms, raw final-layer probes, ...) are the
same under both protocols up to the placement of their scaler.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
from sklearn.base import clone
from sklearn.pipeline import Pipeline

from mnemoscope.detectors.crm import (
    ConcatPCA,
    CRMFeaturizer,
    DisplacementNorms,
    ExtraFeatures,
    Level,
    LTSProjector,
    LTSSummary,
    RawProbe,
    crm_pipeline,
)
from mnemoscope.errors import InputError
from mnemoscope.features.crm import CRMData
from mnemoscope.features.tokens import TokenStats
from mnemoscope.stats import auc_ci, calibration_split, cross_val_scores, paper_protocol_cv
from mnemoscope.stats.cv import CVResult

__all__ = [
    "FAMILIES",
    "CRMEvalConfig",
    "MethodSpec",
    "blind_block",
    "crm_methods",
    "evaluate",
    "family_entries",
    "input_l1",
    "lts_kwargs",
    "run_method",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CRMEvalConfig:
    """Settings of ``crm eval`` (all recorded in report.json)."""

    protocol: Literal["leakage-free", "paper"] = "leakage-free"
    n_splits: int = 5
    seed: int = 42
    n_cal: int = 100
    n_resamples: int = 1000
    direction: Literal["pc", "mean_diff"] = "pc"
    selection: Literal["variance_share", "pc1_ratio", "all"] = "variance_share"
    variance_threshold: float = 0.01
    n_permutations: int = 10
    pc_ranks: int = 7
    pca_dims: tuple[int, ...] = (1, 2, 4, 8)
    xgb: bool = True


@dataclass(frozen=True)
class MethodSpec:
    """A named method: a pipeline factory, its group (a paper table) and what it needs."""

    name: str
    group: str
    description: str
    make: Callable[[], Pipeline]
    needs: tuple[str, ...] = ()


def lts_kwargs(c: CRMEvalConfig) -> dict[str, Any]:
    return {"direction": c.direction, "selection": c.selection, "variance_threshold": c.variance_threshold}


def crm_methods(c: CRMEvalConfig, data: CRMData) -> list[MethodSpec]:
    """The methods of the paper's Tables 1, 2, 10-13 and appendix F/Q/S that ``data`` supports."""
    kw = lts_kwargs(c)
    has_l1 = "l1_embed_dist" in data.surface_names
    full: tuple[Level, ...] = ("l1", "l2", "l3") if has_l1 else ("l2", "l3")
    surf: tuple[Level, ...] = ("l1", "l2") if has_l1 else ("l2",)
    vt = c.variance_threshold
    specs = [
        MethodSpec("crm_lr", "crm", f"CRM [{'+'.join(full).upper()}] + logistic regression", lambda: crm_pipeline(levels=full, **kw)),
        MethodSpec("crm_l3_lr", "crm", "CRM L3 only (LTS) + LR (Table 2)", lambda: crm_pipeline(levels=("l3",), **kw)),
        MethodSpec(
            "crm_sup_lr",
            "direction",
            "CRM L3 with the supervised mean-difference direction (eq. 2, Table 6)",
            lambda: crm_pipeline(levels=("l3",), **{**kw, "direction": "mean_diff"}),
        ),
        MethodSpec("l1l2_lr", "access_matched", f"{'+'.join(surf).upper()} only (no hidden states)", lambda: crm_pipeline(levels=surf, **kw)),
        MethodSpec("lts_single", "access_matched", "single best LTS layer (chosen in-fold)", lambda: crm_pipeline(LTSSummary(mode="best", direction=c.direction, variance_threshold=vt))),
        MethodSpec("lts_mean", "access_matched", "mean LTS over target layers (1-d)", lambda: crm_pipeline(LTSSummary(mode="mean", direction=c.direction, variance_threshold=vt))),
        MethodSpec("lts_pca2", "access_matched", "2 PCs of the LTS vector", lambda: crm_pipeline(LTSSummary(mode="pca2", direction=c.direction, variance_threshold=vt))),
        MethodSpec("lts_top3", "access_matched", "3 best LTS layers (chosen in-fold)", lambda: crm_pipeline(LTSSummary(mode="top3", direction=c.direction, variance_threshold=vt))),
        MethodSpec("l2_mean", "l2_norm", "mean ||h_c - h_0|| over layers", lambda: crm_pipeline(DisplacementNorms(mode="mean"))),
        MethodSpec("l2_best", "l2_norm", "||h_c - h_0|| at the best layer (in-fold)", lambda: crm_pipeline(DisplacementNorms(mode="best"))),
        MethodSpec("l2_multilayer", "l2_norm", "per-layer ||h_c - h_0|| vector", lambda: crm_pipeline(DisplacementNorms(mode="multilayer"))),
        MethodSpec("l2_pca2", "l2_norm", "2 PCs of the per-layer norm vector", lambda: crm_pipeline(DisplacementNorms(mode="pca2"))),
        MethodSpec(
            "crm_plus_l2",
            "l2_norm",
            "CRM features concatenated with the per-layer norms",
            lambda: crm_pipeline([CRMFeaturizer(levels=full, **kw), DisplacementNorms(mode="multilayer")]),
        ),
        MethodSpec("raw_final_diff", "raw_probe", "final-layer displacement (d-dim)", lambda: crm_pipeline(RawProbe(kind="final"))),
        MethodSpec("raw_mean_diff", "raw_probe", "mean displacement over layers (d-dim)", lambda: crm_pipeline(RawProbe(kind="mean"))),
        MethodSpec("raw_pca8_diff", "raw_probe", "per-layer PCA-8 of the displacement, concatenated", lambda: crm_pipeline(RawProbe(kind="pca8"))),
        MethodSpec("static_mia_lr", "static_mia", "final-layer state of the document alone + LR", lambda: crm_pipeline(ExtraFeatures(key="static_hidden")), ("static_hidden",)),
        MethodSpec("logit_lens_lr", "attribution", "per-layer logit-lens KL(with || without) + LR", lambda: crm_pipeline(ExtraFeatures(key="logit_lens_kl")), ("logit_lens_kl",)),
        MethodSpec("attn_flow_lr", "attribution", "per-layer attention mass from the last token to the context + LR", lambda: crm_pipeline(ExtraFeatures(key="attn_flow")), ("attn_flow",)),
        MethodSpec("grad_norm_lr", "attribution", "per-layer gradient norm of the answer NLL + LR", lambda: crm_pipeline(ExtraFeatures(key="grad_norm")), ("grad_norm",)),
    ]  # fmt: skip
    if c.xgb:
        specs.insert(
            1,
            MethodSpec("crm_xgb", "crm", f"CRM [{'+'.join(full).upper()}] + XGBoost", lambda: crm_pipeline(classifier="xgb", levels=full, **kw)),
        )  # fmt: skip
        specs.append(
            MethodSpec("static_mia_xgb", "static_mia", "final-layer state of the document alone + XGBoost", lambda: crm_pipeline(ExtraFeatures(key="static_hidden"), classifier="xgb"), ("static_hidden",)),
        )  # fmt: skip
    return [s for s in specs if all(k in data.extras for k in s.needs)]


def run_method(
    pipe: Pipeline, data: CRMData, y: np.ndarray, c: CRMEvalConfig, cal: np.ndarray | None = None
) -> CVResult:
    """Cross-validate one pipeline under the configured protocol."""
    if c.protocol == "leakage-free":
        return cross_val_scores(pipe, data, y, n_splits=c.n_splits, seed=c.seed, n_resamples=c.n_resamples)
    if cal is None:
        cal = calibration_split(y, n_cal=min(c.n_cal, len(y) - 1), seed=c.seed)
    featurizer = pipe.steps[0][1]
    rest = Pipeline(pipe.steps[1:])

    def fit_cal(Xc: CRMData, yc: np.ndarray) -> Callable[[CRMData], np.ndarray]:
        return clone(featurizer).fit(Xc, yc).transform  # type: ignore[no-any-return]

    return paper_protocol_cv(
        rest, data, y, cal, fit_cal, n_splits=c.n_splits, seed=c.seed, n_resamples=c.n_resamples
    )


def _entry(cv: CVResult, spec: MethodSpec | None = None, **extra: Any) -> dict[str, Any]:
    e = {
        "roc_auc": cv.auc.estimate,
        "roc_auc_ci": [cv.auc.ci_low, cv.auc.ci_high],
        "fold_aucs": list(cv.fold_aucs),
        "fold_auc_std": float(np.std([a for a in cv.fold_aucs if a is not None])),
        "protocol": cv.protocol,
    }
    if spec is not None:
        e.update({"group": spec.group, "description": spec.description})
    e.update(extra)
    return e


# CRM's signal by feature family (issue 19): every non-empty subset of the three levels.
FAMILIES: tuple[tuple[str, tuple[Level, ...]], ...] = (
    ("L1", ("l1",)),
    ("L2", ("l2",)),
    ("L3", ("l3",)),
    ("L1+L2", ("l1", "l2")),
    ("L1+L3", ("l1", "l3")),
    ("L2+L3", ("l2", "l3")),
    ("L1+L2+L3", ("l1", "l2", "l3")),
)
L1_INPUT_KEY = "l1_input"
_READS = {
    "l1": "L1: embeddings of the two generations",
    "l2": "L2: the model's next-token KL",
    "l3": "L3: the model's hidden states",
}


def input_l1(context_embeddings: np.ndarray, query_embeddings: np.ndarray) -> np.ndarray:
    """CRM's Level-1 statistic fed with the *inputs* instead of the generations.

    ``1 - cos(enc(context), enc(query))`` per record, with the same sentence encoder as
    Level 1 (whose statistic is ``1 - cos(enc(y_0), enc(y_c))`` of the two answers). It needs
    no model: it is what Level 1 can see of the input text alone. (The pure input-text
    embedding classifier is the blind baseline ``blind_embedding``.)
    """
    from mnemoscope.features.crm import embedding_distance

    return embedding_distance(context_embeddings, query_embeddings)


def family_entries(
    data: CRMData,
    y: np.ndarray,
    c: CRMEvalConfig,
    cal: np.ndarray | None = None,
    *,
    l1_input: np.ndarray | None = None,
) -> dict[str, Any]:
    """AUC [CI] of CRM's LR pipeline on each feature family (L1, L2, L3, each pair, all three)
    and of L1 computed on the input text, all under the configured protocol and CV folds.

    Each family is ``crm_pipeline(levels=...)`` (directions and layer selection fitted inside
    the training folds under the leakage-free protocol); ``L1(input)`` is the 1-d
    :func:`input_l1` feature through the same scaler + LR. A family the data cannot support
    (no Level 1 without an embedder) gets ``error`` instead of an AUC.
    """
    rows: list[dict[str, Any]] = []
    for name, levels in FAMILIES:
        source = " + ".join(_READS[lv] for lv in levels)
        row: dict[str, Any] = {"family": name, "levels": list(levels), "source": source}
        try:
            row.update(_entry(run_method(crm_pipeline(levels=levels, **lts_kwargs(c)), data, y, c, cal)))
        except InputError as e:
            row.update({"roc_auc": None, "roc_auc_ci": [None, None], "error": e.reason})
        rows.append(row)
    inp: dict[str, Any] = {
        "family": "L1(input)",
        "levels": [],
        "source": "input text only: 1 - cos(enc(context), enc(query)), no model",
    }
    if l1_input is None:
        inp.update(
            {"roc_auc": None, "roc_auc_ci": [None, None], "error": "no sentence encoder (--embedder none)"}
        )
    else:
        from dataclasses import replace

        v = np.asarray(l1_input, dtype=np.float64).reshape(len(y), 1)
        d = replace(data, extras={**dict(data.extras), L1_INPUT_KEY: v})
        try:
            inp.update(_entry(run_method(crm_pipeline(ExtraFeatures(key=L1_INPUT_KEY)), d, y, c, cal)))
        except InputError as e:
            inp.update({"roc_auc": None, "roc_auc_ci": [None, None], "error": e.reason})
    rows.append(inp)
    return {
        "rows": rows,
        "classifier": "standard scaler + logistic regression (C = 1), as crm_lr",
        "note": "same CV folds and bootstrap as every method; L1(input) is CRM's Level-1 statistic "
        "computed on the context and the query instead of the two generations",
    }


def blind_block(
    ids: list[str],
    texts: list[str] | None,
    y: np.ndarray,
    c: CRMEvalConfig,
    *,
    embedder: Any = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """The blind baselines of :mod:`mnemoscope.pipelines.blind` on the contexts, with the same
    seed, folds and bootstrap as the CRM methods: ``({"entries", shift fields}, oof scores)``.

    ``texts=None`` (no text) returns every baseline as "not measured" with the reason; the
    shift fields always come from :func:`~mnemoscope.detectors.blind.shift_diagnostic`.
    """
    from mnemoscope.pipelines.blind import blind_baselines

    rep = blind_baselines(
        ids,
        texts,
        y,
        seed=c.seed,
        n_splits=c.n_splits,
        n_resamples=c.n_resamples,
        embedder=embedder,
        progress=progress,
    )
    block = rep.to_dict()
    block["protocol"] = f"leakage-free {c.n_splits}-fold CV (seed {c.seed}) on the contexts; never the model"
    if texts is None:
        block["skipped"] = "no text in this dataset: blind baselines not run"
    return block, {k: [float(x) for x in v] for k, v in rep.scores.items()}


def _check(data: CRMData, c: CRMEvalConfig) -> np.ndarray:
    if data.labels is None:
        raise InputError(
            "evaluation needs a label (1 = member, 0 = non-member) on every record", field="label"
        )
    y = np.asarray(data.labels)
    n_pos, n_neg = int((y == 1).sum()), int((y == 0).sum())
    if n_pos == 0 or n_neg == 0:
        raise InputError(
            f"evaluation needs both classes, got {n_pos} members and {n_neg} non-members", field="label"
        )
    if min(n_pos, n_neg) < c.n_splits:
        raise InputError(
            f"{min(n_pos, n_neg)} samples in the smaller class is fewer than the {c.n_splits} folds "
            "(add records or lower --folds)",
            field="label",
        )
    return y


def likelihood_entries(token_stats: list[TokenStats], y: np.ndarray, c: CRMEvalConfig) -> dict[str, Any]:
    """The registry's likelihood baselines that need only the document's own token stats."""
    from mnemoscope.detectors.base import METHODS, MembershipData

    data = MembershipData(
        ids=[str(i) for i in range(len(y))], texts=[""] * len(y), labels=y, target=token_stats
    )
    out = {}
    for name in ("loss", "zlib", "min_k_10", "min_k_20", "min_k_pp_10", "min_k_pp_20"):
        method = METHODS.build(name)
        if name == "zlib":
            continue  # zlib needs the text; handled by the caller, which has it
        s = np.asarray(method.score(data), dtype=float)
        est = auc_ci(s, y, n_resamples=c.n_resamples, rng=c.seed)
        out[name] = {
            "roc_auc": est.estimate,
            "roc_auc_ci": [est.ci_low, est.ci_high],
            "protocol": "unsupervised",
            "group": "likelihood",
            "description": f"{name} on the document alone (benchmark registry)",
        }
    return out


def layer_sweep(data: CRMData, y: np.ndarray, c: CRMEvalConfig) -> dict[str, Any]:
    """Single-layer LTS AUC at every layer with non-zero displacement variance (bands = fold std)."""
    from mnemoscope.detectors.crm import select_layers

    rows = []
    for layer in select_layers(data.disp, "all"):
        pipe = crm_pipeline(LTSSummary(mode="single", layer=int(layer), direction=c.direction))
        cv = run_method(pipe, data, y, c)
        folds = [a for a in cv.fold_aucs if a is not None]
        rows.append(
            {
                "layer": int(layer),
                "roc_auc": cv.auc.estimate,
                "roc_auc_ci": [cv.auc.ci_low, cv.auc.ci_high],
                "fold_mean": float(np.mean(folds)),
                "fold_std": float(np.std(folds)),
            }
        )
    best = sorted(rows, key=lambda r: -float(r["roc_auc"] or 0.0))[:3]  # type: ignore[arg-type]
    return {"layers": rows, "best": [r["layer"] for r in best]}


def evaluate(
    data: CRMData,
    config: CRMEvalConfig | None = None,
    *,
    token_stats: list[TokenStats] | None = None,
    texts: list[str] | None = None,
    template_data: Mapping[str, CRMData] | None = None,
    context_embeddings: np.ndarray | None = None,
    analyses: bool = True,
    progress: bool = True,
    families: bool = True,
    l1_input: np.ndarray | None = None,
    blind: bool = False,
    embedder: Any = None,
) -> dict[str, Any]:
    """Every method and non-causal analysis; returns the report dict (see ``crm eval``).

    Args:
        data: the labelled CRM data.
        token_stats, texts: document token statistics and texts for the likelihood baselines
            (``texts`` are the contexts; the blind baselines read them).
        template_data: CRM data of the same records under other templates (prompt control).
        context_embeddings: ``[n dim]`` embeddings of the contexts (same-topic control).
        analyses: ``False`` = the methods only (no controls or layer analyses).
        families: the ``families`` block (:func:`family_entries`).
        l1_input: per-record :func:`input_l1` (the family ``L1(input)``); None = not measured.
        blind: run the blind baselines on ``texts`` (``blind`` block, top-level
            ``shift_warning`` / ``shift_reason``). ``False`` still writes the two fields, from
            the diagnostic of no baseline ("not measured").
        embedder: a loaded sentence encoder for ``blind_embedding`` (default: MiniLM).
    """
    from tqdm.auto import tqdm

    c = config or CRMEvalConfig()
    y = _check(data, c)
    cal = calibration_split(y, n_cal=min(c.n_cal, len(y) - 1), seed=c.seed) if c.protocol == "paper" else None
    report: dict[str, Any] = {
        "protocol": c.protocol,
        "n": len(y),
        "n_members": int(y.sum()),
        "n_non_members": int((y == 0).sum()),
        "settings": asdict(c),
        "surface_features": list(data.surface_names),
    }
    methods = crm_methods(c, data)
    bar = tqdm(methods, desc="crm methods", unit="method", disable=not progress)
    names = []
    scores: dict[str, list[float]] = {}
    for spec in bar:
        bar.set_postfix_str(spec.name)
        try:
            cv = run_method(spec.make(), data, y, c, cal)
        except InputError as e:
            report[spec.name] = {
                "roc_auc": None,
                "roc_auc_ci": [None, None],
                "error": e.reason,
                "protocol": c.protocol,
            }
            names.append(spec.name)
            continue
        report[spec.name] = _entry(cv, spec)
        scores[spec.name] = [float(v) for v in cv.oof_scores]
        names.append(spec.name)
    if token_stats is not None:
        lik = likelihood_entries(token_stats, y, c)
        if texts is not None:
            from mnemoscope.detectors.base import METHODS, MembershipData

            md = MembershipData(ids=list(data.ids), texts=texts, labels=y, target=token_stats)
            s = np.asarray(METHODS.build("zlib").score(md), dtype=float)
            est = auc_ci(s, y, n_resamples=c.n_resamples, rng=c.seed)
            lik["zlib"] = {
                "roc_auc": est.estimate,
                "roc_auc_ci": [est.ci_low, est.ci_high],
                "protocol": "unsupervised",
                "group": "likelihood",
                "description": "zlib on the document alone (benchmark registry)",
            }
        report.update(lik)
        names.extend(lik)
    report["methods"] = names
    if families:
        report["families"] = family_entries(data, y, c, cal, l1_input=l1_input)
    if blind:
        say: Callable[[str], None] | None = None
        if progress:

            def say(msg: str) -> None:
                log.info("blind baseline: %s", msg)

        block, blind_scores = blind_block(list(data.ids), texts, y, c, embedder=embedder, progress=say)
        scores.update(blind_scores)
    else:
        from mnemoscope.detectors.blind import shift_diagnostic

        skipped = "blind baselines not run (--no-blind)"
        block = {"entries": [], **shift_diagnostic([], not_run=skipped), "skipped": skipped}
    report["blind"] = block
    report["shift_warning"] = block["shift_warning"]
    report["shift_reason"] = block["shift_reason"]
    report["oof_scores"] = {"ids": list(data.ids), "labels": y.tolist(), **scores}
    lik_names = [
        n for n in names if report[n].get("group") == "likelihood" and report[n]["roc_auc"] is not None
    ]
    if lik_names:
        best = max(lik_names, key=lambda n: report[n]["roc_auc"])
        report["best_likelihood"] = {"method": best, "roc_auc": report[best]["roc_auc"]}

    # -- analyses (paper tables 2-6, appendices D, H, I, K, U) ----------------------------------
    if not analyses:
        return report
    a: dict[str, Any] = {}
    proj = LTSProjector(direction="pc", selection=c.selection, variance_threshold=c.variance_threshold).fit(
        data, y
    )
    a["target_layers"] = {
        "layers": proj.layers_.tolist(),
        "variance_share": proj.variance_share_.round(6).tolist(),
        "note": "fitted on all samples for description; every fitted method re-selects inside its folds",
    }
    base = report.get("crm_l3_lr", {}).get("roc_auc")

    def loo() -> list[dict[str, Any]]:
        rows = []
        for layer in proj.layers_:
            if proj.layers_.size < 2:
                break
            pipe = crm_pipeline(levels=("l3",), exclude=(int(layer),), **lts_kwargs(c))
            est = run_method(pipe, data, y, c, cal).auc.estimate
            rows.append(
                {
                    "layer": int(layer),
                    "roc_auc": est,
                    "delta": None if base is None or est is None else est - base,
                }
            )
        return rows

    def pca_sweep() -> list[dict[str, Any]]:
        return [
            {"k": k, **_entry(run_method(crm_pipeline(ConcatPCA(n_components=k, variance_threshold=c.variance_threshold)), data, y, c, cal))}
            for k in c.pca_dims
        ]  # fmt: skip

    def pc_rank() -> list[dict[str, Any]]:
        return [
            {"rank": r, **_entry(run_method(crm_pipeline(levels=("l3",), **{**lts_kwargs(c), "direction": "pc", "pc_rank": r}), data, y, c, cal))}
            for r in range(1, c.pc_ranks + 1)
        ]  # fmt: skip

    steps: list[tuple[str, Callable[[], Any]]] = [
        ("layer_sweep", lambda: layer_sweep(data, y, c)),
        ("leave_one_layer_out", loo),
        ("pca_sweep", pca_sweep),
        ("pc_rank", pc_rank),
        ("permutation", lambda: permutation_control(data, y, c, cal)),
        ("lts_trajectories", lambda: lts_trajectories(data, y, c)),
    ]
    if template_data:
        steps.append(("templates", lambda: template_control(template_data, c)))
    if context_embeddings is not None:
        steps.append(("same_topic", lambda: same_topic_control(data, y, context_embeddings, c, report)))
    for name, fn in tqdm(steps, desc="crm analyses", unit="analysis", disable=not progress):
        try:
            a[name] = fn()
        except InputError as e:  # one analysis that cannot run must not sink the report
            log.warning("analysis %s skipped: %s", name, e)
            a[name] = {"error": str(e)}
    a["direction"] = {
        "pc1": report.get("crm_l3_lr", {}).get("roc_auc") if c.direction == "pc" else None,
        "mean_diff": report.get("crm_sup_lr", {}).get("roc_auc"),
    }
    report["analyses"] = a
    return report


def permutation_control(
    data: CRMData,
    y: np.ndarray,
    c: CRMEvalConfig,
    cal: np.ndarray | None,
    *,
    levels: tuple[str, ...] | None = None,
    seed: int | None = None,
) -> dict[str, Any]:
    """CRM-LR AUC with shuffled labels, ``n_permutations`` times (features unchanged).

    ``levels`` defaults to every level the data has (L1 when extracted, L2, L3); ``seed``
    (of the shuffles) defaults to ``c.seed``.
    """
    gen = np.random.default_rng(c.seed if seed is None else seed)
    if levels is None:
        levels = ("l1", "l2", "l3") if "l1_embed_dist" in data.surface_names else ("l2", "l3")
    aucs: list[float] = []
    for _ in range(c.n_permutations):
        yp = gen.permutation(y)
        pipe = crm_pipeline(levels=levels, **lts_kwargs(c))
        auc = run_method(pipe, data.with_labels(yp), yp, c, cal).auc.estimate
        aucs.append(float("nan") if auc is None else auc)
    return {"aucs": aucs, "mean": float(np.mean(aucs)), "std": float(np.std(aucs)), "n": c.n_permutations}


def template_control(template_data: Mapping[str, CRMData], c: CRMEvalConfig) -> dict[str, Any]:
    """CRM-LR AUC per prompt template (the same records traced under templates A-D)."""
    per: dict[str, Any] = {}
    for name, d in sorted(template_data.items()):
        y = _check(d, c)
        has_l1 = "l1_embed_dist" in d.surface_names
        cv = run_method(
            crm_pipeline(levels=("l1", "l2", "l3") if has_l1 else ("l2", "l3"), **lts_kwargs(c)), d, y, c
        )
        per[name] = _entry(cv, n=len(y))
    aucs = [v["roc_auc"] for v in per.values()]
    return {"per_template": per, "mean": float(np.mean(aucs)), "std": float(np.std(aucs))}


def same_topic_control(
    data: CRMData, y: np.ndarray, ctx_emb: np.ndarray, c: CRMEvalConfig, report: Mapping[str, Any]
) -> dict[str, Any]:
    """Members vs their most similar non-members (by context-embedding cosine), paper D.2.

    Each member picks the non-member with the highest cosine; the distinct picked
    non-members replace the random non-member set (so n shrinks, as in the paper's n ~ 140).
    """
    e = ctx_emb / np.maximum(np.linalg.norm(ctx_emb, axis=1, keepdims=True), 1e-12)
    mem, non = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    sim = e[mem] @ e[non].T
    picks = non[sim.argmax(1)]
    chosen = np.unique(picks)
    idx = np.sort(np.concatenate([mem, chosen]))
    sub = data.subset(idx)
    ys = y[idx]
    out: dict[str, Any] = {
        "n": int(idx.size),
        "n_non_members": int(chosen.size),
        "matched_similarity": float(sim.max(1).mean()),
        "random_similarity": float(sim.mean()),
    }
    if min(int((ys == 1).sum()), int((ys == 0).sum())) < c.n_splits:
        out["error"] = "too few distinct matched non-members for cross-validation"
        return out
    has_l1 = "l1_embed_dist" in data.surface_names
    for name, levels in (("crm_lr", ("l1", "l2", "l3") if has_l1 else ("l2", "l3")), ("crm_l3_lr", ("l3",))):
        cv = run_method(crm_pipeline(levels=levels, **lts_kwargs(c)), sub, ys, c)
        full = report.get(name, {}).get("roc_auc")
        out[name] = _entry(cv, delta=None if full is None else cv.auc.estimate - full)  # type: ignore[operator]
    return out


def lts_trajectories(data: CRMData, y: np.ndarray, c: CRMEvalConfig) -> dict[str, Any]:
    """Mean +- std LTS per layer for members and non-members (PC1 fitted on all samples:
    descriptive only, for the trajectory plot; no AUC is computed from it)."""
    from mnemoscope.detectors.crm import select_layers

    layers = select_layers(data.disp, "all")
    proj = LTSProjector(direction="pc", layers=layers.tolist()).fit(data, y)
    F = proj.transform(data)
    F = (F - F.mean(0)) / np.maximum(F.std(0), 1e-12)
    return {
        "layers": layers.tolist(),
        "members_mean": F[y == 1].mean(0).tolist(),
        "members_std": F[y == 1].std(0).tolist(),
        "non_members_mean": F[y == 0].mean(0).tolist(),
        "non_members_std": F[y == 0].std(0).tolist(),
        "standardised": True,
    }
