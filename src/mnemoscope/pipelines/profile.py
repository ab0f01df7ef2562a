"""The audit profile: everything the audit server loads, fitted once by ``mnemoscope calibrate``.

A profile folder holds

* ``crm.npz``: the CRM artefact (:mod:`mnemoscope.detectors.crm_artifact`): target layers,
  per-layer directions, the calibration mean/std of each layer's LTS and, when the input
  has both labels, a fitted classifier;
* ``profile.json``: the model identity, the prompt settings every audit must reuse, the
  anomaly rule, the RePCS threshold tau with its calibration record, a SHA-256 of the
  calibration data and the profile's own content hash (over ``profile.json`` without the
  hash and the bytes of ``crm.npz``);
* ``traces/``: the paired traces of the calibration records (resumable extraction).

**Anomaly rule** (CRM appendix V.1, made sound). Per target layer ``z_l = (LTS_l - mu_l) /
sigma_l`` with ``mu, sigma`` from the *clean* calibration records (label 0, or every record
when unlabelled); a layer is flagged when ``|z_l| > k_sigma`` (2 by default); the anomaly
score is ``mean_l |z_l|``. The paper flags a request as anomalous as soon as one layer is
flagged (``rule="paper"``); with 10-30 target layers and 2 sigma that fires on most clean
requests. The default (``rule="calibrated"``) flags when the score exceeds a threshold set on
*held-out* clean records (those not used for the directions and mu/sigma): the conformal
``ceil((1 - alpha)(n + 1))``-th smallest held-out score, so that a new clean request
exchangeable with them is flagged with probability at most ``alpha``.

**RePCS** (:class:`mnemoscope.detectors.repcs.RePCS`): tau from the clean records' Z; a
request is *memorized* when ``Z < tau``.

Labels follow the project convention: 1 = the model answers from memory (member context,
memorized fact), 0 = clean.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from mnemoscope.data.records import Record, RecordError
from mnemoscope.detectors.crm_artifact import FittedCRM, load_crm, save_crm
from mnemoscope.detectors.verdict import VerdictModel
from mnemoscope.errors import InputError, ModelMismatchError
from mnemoscope.io import atomic_write, canonical_json
from mnemoscope.models.loader import check_same_model
from mnemoscope.stats.conformal import conformal_upper
from mnemoscope.trace.pair import PairConfig
from mnemoscope.trace.templates import PromptBuilder

__all__ = [
    "PROFILE_FORMAT",
    "AnomalyRule",
    "AuditProfile",
    "CalibrationConfig",
    "ProfileError",
    "calibrate_profile",
    "default_profile_path",
    "load_profile",
    "oof_crm_probability",
]

PROFILE_FORMAT = "mnemoscope-audit-profile/1"
log = logging.getLogger(__name__)


class ProfileError(InputError):
    """A profile folder is missing, altered, or was built for another model."""


@dataclass(frozen=True)
class AnomalyRule:
    """How an LTS trajectory becomes a flag (module doc)."""

    k_sigma: float = 2.0
    rule: Literal["calibrated", "paper"] = "calibrated"
    alpha: float = 0.05
    score_threshold: float | None = None
    n_threshold: int = 0

    def decide(self, lts: np.ndarray, crm: FittedCRM) -> tuple[np.ndarray, np.ndarray, float, bool]:
        """(z ``[k]``, flagged mask ``[k]``, score, anomaly flag)."""
        z, flagged, score = crm.anomaly(lts, self.k_sigma)
        if self.rule == "paper" or self.score_threshold is None:
            flag = bool(flagged.any())
        else:
            flag = bool(score > self.score_threshold)
        return z, flagged, score, flag


@dataclass(frozen=True)
class CalibrationConfig:
    """Settings of ``mnemoscope calibrate``.

    Attributes:
        template, task, chat: prompt settings (stored; the server reuses them exactly).
        max_new_tokens: T, generated positions per audit (RePCS and CRM Level 2).
        batch_size: prompts per forward during calibration.
        classifier: ``"lr"``, ``"xgb"`` or ``"none"``; ``"auto"`` fits LR when the records
            have both labels and skips the classifier otherwise.
        levels: CRM feature levels of the classifier. Level 1 needs a second generation and
            a sentence encoder per audit, so the default is Level 2 + Level 3.
        embedder: sentence encoder for Level 1 (only used when ``"l1"`` is in ``levels``).
        k_sigma, rule, alpha: the anomaly rule (module doc).
        threshold_fraction: share of the clean records held out to set the score threshold.
        repcs_alpha: RePCS's target false-positive rate on clean queries.
        verdict_alpha: the verdict's guaranteed false-flag rate on context-needed answers.
        verdict_candidates: signals the verdict model may combine (it keeps what adds on
            held-out folds; :mod:`mnemoscope.detectors.verdict`).
        conformal_fraction: share of the clean records held out for the verdict's threshold.
        token_margin_quantile: the token-attribution margin is this quantile of content-word
            PMI on the memorized calibration answers (:func:`~mnemoscope.features.attribution.calibrate_margin`).
        seed: the held-out split.
    """

    template: str = "A"
    task: str = "plain"
    chat: bool | Literal["auto"] = "auto"
    max_new_tokens: int = 32
    batch_size: int = 8
    classifier: Literal["auto", "lr", "xgb", "none"] = "auto"
    levels: tuple[str, ...] = ("l2", "l3")
    embedder: str = "default"
    direction: Literal["pc", "mean_diff"] = "pc"
    variance_threshold: float = 0.01
    k_sigma: float = 2.0
    rule: Literal["calibrated", "paper"] = "calibrated"
    alpha: float = 0.05
    threshold_fraction: float = 0.5
    repcs_alpha: float = 0.05
    verdict_alpha: float = 0.05
    verdict_candidates: tuple[str, ...] = (
        "repcs_z",
        "closed_book_logprob",
        "context_token_fraction",
        "crm_probability",
    )
    conformal_fraction: float = 0.5
    token_margin_quantile: float = 0.9
    seed: int = 42


@dataclass
class AuditProfile:
    """A loaded, verified profile."""

    path: Path
    header: dict[str, Any]
    crm: FittedCRM
    anomaly: AnomalyRule
    repcs_tau: float
    repcs_params: dict[str, Any]
    content_hash: str
    model: dict[str, Any] = field(default_factory=dict)
    verdict: VerdictModel | None = None
    token_margin: float = math.log(2.0)

    @property
    def builder(self) -> PromptBuilder:
        p = self.header["prompt"]
        return PromptBuilder(
            template=p["template"], task=p["task"], chat=bool(p["chat"]), system_prompt=p.get("system_prompt")
        )

    @property
    def max_new_tokens(self) -> int:
        return int(self.header["max_new_tokens"])

    @property
    def needs_level1(self) -> bool:
        return "l1_embed_dist" in self.crm.surface_names

    def pair_config(self, max_new_tokens: int | None = None) -> PairConfig:
        return PairConfig(
            builder=self.builder,
            max_new_tokens=max_new_tokens or self.max_new_tokens,
            answer_without=self.needs_level1,
            hidden=True,
        )

    def check_model(self, info: Any) -> None:
        check_same_model(
            self.model,
            info,
            what=f"the profile {self.path}",
            remedy="run `mnemoscope calibrate` on this model",
        )


def _profile_hash(header: dict[str, Any], crm_bytes: bytes) -> str:
    h = hashlib.sha256()
    h.update(canonical_json({k: v for k, v in header.items() if k != "profile_hash"}))
    h.update(hashlib.sha256(crm_bytes).digest())
    return h.hexdigest()


def data_hash(records: Sequence[Record]) -> str:
    h = hashlib.sha256()
    for r in records:
        h.update(canonical_json({"id": r.id, "context": r.context, "query": r.query, "label": r.label}))
    return h.hexdigest()


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
) -> AuditProfile:
    """Trace ``records`` (resumable, under ``traces_dir`` or ``out/traces``), fit CRM + anomaly rule +
    RePCS + the verdict model, save.

    Raises:
        InputError: too few usable records, a label vector that cannot fit what was asked
            (a classifier needs both labels), or no clean record to calibrate on.
    """
    from mnemoscope.detectors.repcs import RePCS
    from mnemoscope.pipelines.crm.eval import CRMEvalConfig
    from mnemoscope.pipelines.crm.extract import CRMExtractConfig, extract, load_folder
    from mnemoscope.pipelines.crm.run import fit_crm

    c = config or CalibrationConfig()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    use_l1 = "l1" in c.levels
    tdir = Path(traces_dir) if traces_dir is not None else out / "traces"
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
    ).resolved(lm)
    summary = extract(
        lm, records, tdir, ex_cfg, input_errors=input_errors, overwrite=overwrite, progress=progress
    )
    folder = load_folder(tdir, keep_without=False)
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
    two_classes = labels is not None and len(np.unique(labels)) == 2
    kind = c.classifier
    if kind == "auto":
        kind = "lr" if two_classes else "none"
    if kind != "none" and not two_classes:
        raise InputError(
            f"a {kind} classifier needs records of both labels (0 = clean, 1 = from memory)", field="label"
        )

    # held-out clean records set the anomaly threshold; the rest fit directions and mu/sigma
    rng = np.random.default_rng(c.seed)
    clean_idx = np.flatnonzero(clean)
    n_hold = round(c.threshold_fraction * n_clean) if c.rule == "calibrated" else 0
    n_hold = min(n_hold, n_clean - 2)
    hold = np.sort(rng.permutation(clean_idx)[:n_hold]) if n_hold > 0 else np.array([], int)
    fit_mask = np.ones(n, bool)
    fit_mask[hold] = False
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

    repcs = RePCS(alpha=c.repcs_alpha, max_steps=c.max_new_tokens)
    repcs.fit(pairs, None if labels is None else labels)
    rec = repcs.calibration_record()
    crm_oof = None
    if "crm_probability" in c.verdict_candidates and kind != "none":
        crm_oof = oof_crm_probability(folder, kind, c)
    margin, verdict = fit_verdict(lm, pairs, labels, repcs, c, crm_oof)

    header: dict[str, Any] = {
        "format": PROFILE_FORMAT,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "model": lm.info.to_dict(),
        "prompt": ex_cfg.pair_config().builder.to_dict(),
        "max_new_tokens": c.max_new_tokens,
        "config": asdict(c),
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
        "repcs": rec,
        "token_attribution": {
            "margin": margin,
            "quantile": c.token_margin_quantile,
            "note": "a word is context-supported when log p(word | c, q) - log p(word | q) exceeds the margin",
        },
        "verdict": None if verdict is None else verdict.to_dict(),
        "data": {
            "sha256": data_hash(records),
            "n_records": len(records) + len(input_errors),
            "n_traced": n,
            "n_clean": n_clean,
            "n_memory": None if labels is None else int((labels == 1).sum()),
            "n_errors": summary.get("n_errors", 0),
        },
    }
    header["profile_hash"] = _profile_hash(header, (out / "crm.npz").read_bytes())
    atomic_write(out / "profile.json", json.dumps(header, indent=1, default=str))
    return load_profile(out, model=lm.info)


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


def fit_verdict(
    lm: Any,
    pairs: Sequence[Any],
    labels: np.ndarray | None,
    repcs: Any,
    c: CalibrationConfig,
    crm_oof: np.ndarray | None = None,
    pieces: Sequence[Sequence[str]] | None = None,
) -> tuple[float, VerdictModel | None]:
    """The token margin (from memorized answers) and the verdict model (needs both labels).

    ``pieces``: each answer's token texts (default: decoded by ``lm.tokenizer``; the endpoint
    backend passes the server's, with ``lm=None``).
    """
    from mnemoscope.features.attribution import calibrate_margin, content_word_pmis
    from mnemoscope.pipelines.audit import answer_pieces, trace_signals

    if pieces is None:
        pieces = [answer_pieces(lm.tokenizer, t.answer_ids) for t in pairs]
    mem_pmis = [
        content_word_pmis(
            pc, np.asarray(t.logprob_answer_with) - np.asarray(t.logprob_answer_without), t.query
        )
        for t, pc, lab in zip(
            pairs, pieces, labels if labels is not None else [None] * len(pairs), strict=True
        )
        if lab == 1 and not t.identical_prompts
    ]
    margin = calibrate_margin(np.concatenate(mem_pmis) if mem_pmis else [], c.token_margin_quantile)
    if labels is None or len(np.unique(labels)) < 2:
        return margin, None
    keep = [i for i, t in enumerate(pairs) if not t.identical_prompts]
    rows = [trace_signals(pairs[i], pieces[i], margin=margin, repcs=repcs)[0] for i in keep]
    if crm_oof is not None:
        for r, i in zip(rows, keep, strict=True):
            r["crm_probability"] = float(crm_oof[i])
    cands = tuple(k for k in c.verdict_candidates if k in rows[0])
    if len(cands) < len(c.verdict_candidates):
        log.warning(
            "verdict candidates %s are not measured in this calibration (no CRM classifier?); combining %s",
            sorted(set(c.verdict_candidates) - set(cands)),
            list(cands),
        )
    signals = {k: np.array([r[k] for r in rows]) for k in cands}
    verdict = VerdictModel(
        candidates=cands,
        alpha=c.verdict_alpha,
        conformal_fraction=c.conformal_fraction,
        seed=c.seed,
    ).fit(signals, np.asarray(labels)[keep])
    return margin, verdict


DEFAULT_PROFILES = "mnemoscope.data.profiles"


def default_profile_path(info: Any) -> Path:
    """The shipped profile calibrated for ``info``'s model (only the embedded default model has one).

    Raises:
        ProfileError: no shipped profile fits this model (other models need ``--profile``).
    """
    from importlib import resources

    fp = (info.to_dict() if hasattr(info, "to_dict") else dict(info)).get("fingerprint")
    root = Path(str(resources.files(DEFAULT_PROFILES)))
    for cand in sorted(root.iterdir()) if root.is_dir() else []:
        hp = cand / "profile.json"
        if hp.is_file():
            try:
                if json.loads(hp.read_text(encoding="utf-8"))["model"].get("fingerprint") == fp:
                    return cand
            except (json.JSONDecodeError, KeyError):
                continue
    name = (info.to_dict() if hasattr(info, "to_dict") else dict(info)).get("name")
    raise ProfileError(
        f"no shipped audit profile fits the model {name}; calibrate one with `mnemoscope calibrate --model ... "
        "--out DIR` and pass --profile DIR"
    )


def load_profile(path: str | Path, *, model: Any = None) -> AuditProfile:
    """Read and verify a profile folder; with ``model`` (ModelInfo or dict) refuse another model.

    Raises:
        ProfileError: no profile, unknown format, altered files (hash mismatch), another model.
    """
    path = Path(path)
    hp = path / "profile.json"
    if not hp.is_file():
        raise ProfileError(f"no audit profile at {path} (profile.json missing); run `mnemoscope calibrate`")
    try:
        header = json.loads(hp.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ProfileError(f"{hp} is not valid JSON ({e.msg})") from e
    if header.get("backend") == "endpoint":
        raise ProfileError(
            f"{path} is an endpoint profile (calibrated against a served model with `mnemoscope calibrate "
            "--endpoint`): use it with --endpoint URL"
        )
    if header.get("format") != PROFILE_FORMAT:
        raise ProfileError(f"{hp}: format {header.get('format')!r} is not {PROFILE_FORMAT!r}")
    crm_path = path / header["crm"]["file"]
    if not crm_path.is_file():
        raise ProfileError(f"{path}: {crm_path.name} is missing")
    got = _profile_hash(header, crm_path.read_bytes())
    if got != header.get("profile_hash"):
        raise ProfileError(
            f"{path}: profile hash mismatch (profile.json or crm.npz altered after calibration)"
        )
    try:
        crm = load_crm(crm_path)
    except ModelMismatchError as e:  # pragma: no cover - load_crm without model never raises it
        raise ProfileError(str(e)) from e
    a = header["anomaly"]
    prof = AuditProfile(
        path=path,
        header=header,
        crm=crm,
        anomaly=AnomalyRule(
            k_sigma=float(a["k_sigma"]),
            rule=a["rule"],
            alpha=float(a["alpha"]),
            score_threshold=a.get("score_threshold"),
            n_threshold=int(a.get("n_threshold", 0)),
        ),
        repcs_tau=float(header["repcs"]["tau"]),
        repcs_params=dict(header["repcs"]["params"]),
        content_hash=got,
        model=header["model"],
        verdict=None if header.get("verdict") is None else VerdictModel.from_dict(header["verdict"]),
        token_margin=float(header.get("token_attribution", {}).get("margin", math.log(2.0))),
    )
    if model is not None:
        prof.check_model(model)
    return prof
