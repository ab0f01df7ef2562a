"""The audit profile: everything the audit server loads, fitted once by ``mnemoscope calibrate``.

A profile folder holds

* ``crm.npz`` (only when calibrated with CRM, ``calibrate --with-crm``): the CRM artefact
  (:mod:`mnemoscope.detectors.crm_artifact`): target layers, per-layer directions, the
  calibration mean/std of each layer's LTS and, when the input has both labels, a fitted
  classifier;
* ``profile.json``: the model identity, the prompt settings every audit must reuse, the
  anomaly rule (with CRM; ``"crm"`` and ``"anomaly"`` are ``null`` without), the RePCS
  threshold tau with its calibration record, a SHA-256 of the calibration data and the
  profile's own content hash (over ``profile.json`` without the hash and, with CRM, the bytes
  of ``crm.npz``);
* ``traces/``: the paired traces of the calibration records (resumable extraction);
* ``validation.json`` + ``held_out.jsonl``: the validation card and the held-out audits it is
  computed from (:mod:`mnemoscope.audit.validation`), tied to the profile by its hash.

**Layout.** A profile records the prompt layout its audits must reuse (``header["layout"]``:
template, task, chat, system prompt, a SHA-256 of the chat template, T and the stop sequences);
:func:`check_layout` refuses an audit asking for another one, naming each difference.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mnemoscope.audit.verdict import AnomalyRule
from mnemoscope.detectors.crm_artifact import FittedCRM, load_crm
from mnemoscope.detectors.verdict import DEFAULT_CANDIDATES, SIGNALS, VerdictModel
from mnemoscope.errors import InputError, ModelMismatchError
from mnemoscope.io import canonical_json
from mnemoscope.models.endpoint import EndpointFingerprint
from mnemoscope.models.loader import check_same_model
from mnemoscope.trace.app_prompt import AppPrompt
from mnemoscope.trace.endpoint import ChatTemplate, EndpointPairConfig
from mnemoscope.trace.pair import PairConfig
from mnemoscope.trace.templates import PromptBuilder

__all__ = [
    "BLACK_BOX_SIGNALS",
    "ENDPOINT_PROFILE_FORMAT",
    "PROFILE_FORMAT",
    "AnomalyRule",
    "AuditProfile",
    "CalibrationConfig",
    "EndpointSettings",
    "ProfileError",
    "cached_profile_dir",
    "calibrate_command",
    "chat_template_sha256",
    "check_layout",
    "default_profile_path",
    "estimate_calibration_seconds",
    "load_endpoint_profile",
    "load_profile",
]

PROFILE_FORMAT = "mnemoscope-audit-profile/1"
ENDPOINT_PROFILE_FORMAT = "mnemoscope-endpoint-profile/1"
#: the signals measurable over an endpoint (no hidden states over HTTP)
# every verdict signal that needs no hidden states: the whole-answer ones and those on the
# answer-bearing words (features.facts), measured alike in process and over an endpoint
# (closed_book_agreement costs one more generation, on either backend)
BLACK_BOX_SIGNALS: tuple[str, ...] = tuple(x for x in SIGNALS if x not in ("lts_score", "crm_probability"))
log = logging.getLogger(__name__)


class ProfileError(InputError):
    """A profile folder is missing, altered, or was built for another model."""


@dataclass(frozen=True)
class CalibrationConfig:
    """Settings of ``mnemoscope calibrate``.

    Attributes:
        template, task, chat: prompt settings (stored; the server reuses them exactly).
        max_new_tokens: T, generated positions per audit (RePCS and CRM Level 2).
        batch_size: records decoded together during calibration (both paths and the closed-book
            answer: three rows each). 16: a decode step's cost is mostly reading the weights, so
            more rows per step is cheaper per record (SmolLM2-135M, one thread: 1.3x the records
            per second of batch 8, ``benchmarks/results/calibration/bench_calibrate.json``); the
            per-step logits kept for the two paths grow with it (``2 x batch x T x vocabulary``
            floats: 0.2 GB for SmolLM2, 1.1 GB for a 262k vocabulary at T = 32).
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
            held-out folds; :mod:`mnemoscope.detectors.verdict`). Default: the three black-box
            signals. ``"crm_probability"`` (CRM's classifier, the paper's detector) may be added;
            it reads the text's surface more than membership, and measured on Gemma-3-270m and
            Qwen2.5-Coder-0.5B it let knowledge-conflict answers that followed the context be
            flagged as memory (docs/calibrate.md#which-signals-the-verdict-combines).
        conformal_fraction: share of the clean records held out for the verdict's threshold.
        certify: ``"marginal"`` (default): one conformal quantile over all clean calibration
            answers, so the false-flag bound holds for their mix of kinds; ``"per-kind"``: the
            largest of each kind's own quantile (invented facts, followed knowledge conflicts,
            ...), so it holds within every kind (higher threshold, lower memory recall;
            docs/calibrate.md#the-guarantee-marginal-or-per-kind).
        token_margin_quantile: the token-attribution margin is this quantile of content-word
            PMI on the memorized calibration answers (:func:`~mnemoscope.features.attribution.calibrate_margin`).
        seed: the held-out split.
        labels: ``"verify"`` checks every label on the model being calibrated
            (:mod:`mnemoscope.bench.label_check`; items that fail are dropped and counted),
            ``"given"`` takes the labels as they are.
        held_out_fraction: share of the facts (grouped, stratified) held out for the validation
            card; 0 = no held-out part (the card says "not measured").
        min_per_class: with ``labels="verify"``, fewer verified items of a class than this is an
            error naming the counts.
        stop: stop sequences that end an answer (recorded in the layout; audits reuse them);
            ``None`` = the layout's default (:func:`mnemoscope.trace.templates.default_stops`:
            none with a chat template, a blank line or a new "Question:"/"Context:" cue without).
        per_class: draw records in rounds until this many answers of each class verify
            (:func:`mnemoscope.audit.draw.draw_until`); ``None`` = trace every record given.
        max_traced: with ``per_class``, stop drawing after this many records; without it (and with
            ``labels="verify"``), the budget of a balanced draw (:mod:`mnemoscope.audit.draw`).
        budget_seconds: the time budget of a balanced draw (``calibrate --budget MINUTES``): rounds
            stop when the next would not fit at the tracing rate measured so far.
        app_prompt: the application's own prompt (``calibrate --prompt FILE``,
            :class:`~mnemoscope.trace.app_prompt.AppPrompt`): the records are traced in it instead
            of ``template``/``task``, and the profile records its fingerprint and layout.
        with_crm: also trace the hidden states and fit CRM (its directions, the anomaly rule
            and classifier: ``crm.npz``). Off by default: the verdict's default signals are
            black-box, and without CRM the tracing keeps no hidden states and decodes the
            closed-book answer in the same batch (:mod:`mnemoscope.trace.lockstep`); the
            profile then has no anomaly rule and its audits no ``crm`` block. Set
            automatically when CRM's classifier is asked for: ``crm_probability`` in
            ``verdict_candidates``, or ``classifier`` ``"lr"`` / ``"xgb"``.
    """

    template: str = "A"
    task: str = "plain"
    chat: bool | Literal["auto"] = "auto"
    max_new_tokens: int = 32
    batch_size: int = 16
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
    budget_seconds: float | None = None
    app_prompt: AppPrompt | None = None
    with_crm: bool = False

    @property
    def draws(self) -> bool:
        """Whether the records are drawn in rounds (a per-class target, or a budget with verified
        labels) rather than traced as given."""
        budget = self.max_traced is not None or self.budget_seconds is not None
        return self.per_class is not None or (budget and self.labels == "verify")

    def __post_init__(self) -> None:
        # CRM's classifier, as a verdict signal or asked by name, is CRM: its hidden states, its fit
        asked = "crm_probability" in self.verdict_candidates or self.classifier in ("lr", "xgb")
        if asked and not self.with_crm:
            object.__setattr__(self, "with_crm", True)


def builder_of(prompt: dict[str, Any], stop: tuple[str, ...]) -> PromptBuilder:
    """The prompt builder a profile's ``prompt`` block describes: the template, or the
    application's own prompt (``app``, from ``calibrate --prompt``)."""
    app = prompt.get("app")
    return PromptBuilder(
        template=prompt["template"],
        task=prompt["task"],
        chat=bool(prompt["chat"]),
        system_prompt=prompt.get("system_prompt"),
        stop=stop,
        app=AppPrompt.from_dict(app) if isinstance(app, dict) else None,
    )


@dataclass(frozen=True)
class EndpointSettings:
    """What an endpoint profile needs to trace the same way again: the prompt pair settings
    (template, chat template, T, k) and the served model's probe fingerprint."""

    pair_config: EndpointPairConfig
    fingerprint: EndpointFingerprint


@dataclass
class AuditProfile:
    """A loaded, verified profile: in-process (``backend="local"``: the CRM artefact and its
    hidden-state signals when calibrated with CRM, else ``crm`` is ``None``) or calibrated
    against a served model (``backend="endpoint"``: no CRM, the black-box signals only, plus
    :attr:`endpoint`). Without CRM, :attr:`anomaly` holds the rule's defaults and is never
    applied (audits measure no LTS)."""

    path: Path
    header: dict[str, Any]
    crm: FittedCRM | None
    anomaly: AnomalyRule
    repcs_tau: float
    repcs_params: dict[str, Any]
    content_hash: str
    model: dict[str, Any] = field(default_factory=dict)
    verdict: VerdictModel | None = None
    token_margin: float = math.log(2.0)
    backend: Literal["local", "endpoint"] = "local"
    endpoint: EndpointSettings | None = None
    #: the held-out validation card (``validation.json`` matching this profile's hash), or ``None``
    validation: dict[str, Any] | None = None

    @property
    def layout(self) -> dict[str, Any]:
        """The prompt layout audits must reuse (older profiles: the prompt and T they recorded)."""
        lay = self.header.get("layout")
        if isinstance(lay, dict):
            return dict(lay)
        return {"prompt": self.header.get("prompt"), "max_new_tokens": self.header.get("max_new_tokens")}

    @property
    def stop(self) -> tuple[str, ...]:
        """The stop sequences recorded in the layout (empty: none)."""
        return tuple(self.layout.get("stop") or ())

    @property
    def signals(self) -> tuple[str, ...]:
        """The signals this profile's backend can measure."""
        return BLACK_BOX_SIGNALS if self.backend == "endpoint" else SIGNALS

    @property
    def builder(self) -> PromptBuilder:
        return builder_of(self.header["prompt"], self.stop)

    @property
    def max_new_tokens(self) -> int:
        return int(self.header["max_new_tokens"])

    @property
    def needs_level1(self) -> bool:
        return self.crm is not None and "l1_embed_dist" in self.crm.surface_names

    @property
    def reads_closed_book(self) -> bool:
        """Whether the verdict reads the model's closed-book greedy answer (``closed_book_agreement``):
        then every audit generates it, in process and over an endpoint."""
        return self.verdict is not None and "closed_book_agreement" in self.verdict.selected_

    def pair_config(self, max_new_tokens: int | None = None, *, hidden: bool | None = None) -> PairConfig:
        """The in-process pair settings (the endpoint's are :attr:`endpoint`). ``hidden``: trace the
        hidden states (default: when the profile holds CRM; an auditor asks for them only when an
        output it was asked for reads them: :attr:`needs_hidden_states`)."""
        return PairConfig(
            builder=self.builder,
            max_new_tokens=max_new_tokens or self.max_new_tokens,
            # the closed-book greedy answer: CRM level 1, or a verdict that reads its agreement
            answer_without=self.needs_level1 or self.reads_closed_book,
            # hidden states are what CRM reads: a profile calibrated without CRM never needs them
            hidden=self.crm is not None if hidden is None else bool(hidden and self.crm is not None),
        )

    def needs_hidden_states(self, rule: str, *, crm_probability: bool = False) -> bool:
        """Whether audits under ``rule`` must trace the hidden states: the ``crm-anomaly`` rule, a
        verdict that combines a CRM signal, or CRM's classifier asked for as a secondary output
        (``crm_probability``). Never without CRM in the profile. Every other audit is black-box:
        no hidden state is traced or kept."""
        if self.crm is None:
            return False
        crm_signals = {"crm_probability", "lts_score"}
        verdict = self.verdict is not None and bool(crm_signals & set(self.verdict.selected_))
        return rule == "crm-anomaly" or verdict or crm_probability

    def check_model(self, info: Any) -> None:
        if self.backend == "endpoint":
            raise ProfileError(
                f"{self.path} is an endpoint profile (calibrated against a served model with `mnemoscope "
                "calibrate --endpoint`): use it with --endpoint URL"
            )
        check_same_model(
            self.model,
            info,
            what=f"the profile {self.path}",
            remedy="run `mnemoscope calibrate` on this model",
        )


def chat_template_sha256(template: str | None) -> str | None:
    """The SHA-256 of a chat template's text (``None`` without one)."""
    return None if not template else hashlib.sha256(str(template).encode("utf-8")).hexdigest()


_LAYOUT_NAMES = {
    "prompt": "prompt layout (template, task, chat, system prompt)",
    "chat_template_sha256": "chat template",
    "max_new_tokens": "T (max_new_tokens)",
    "stop": "stop sequences",
}


def check_layout(profile: AuditProfile, asked: dict[str, Any]) -> None:
    """Refuse an audit whose layout differs from the profile's, naming each difference.

    ``asked``: what the audit would use (any of ``prompt``, ``chat_template_sha256``,
    ``max_new_tokens``, ``stop``; ``None`` is a value: no chat template, no stop sequence); keys
    the audit does not pass, or the profile did not record, are not compared. The one layout check: :class:`~mnemoscope.audit.auditor.Auditor` calls it
    for the in-process and the endpoint backends.

    Raises:
        ProfileError: the layouts differ (each differing setting named with both values).
    """
    mine = profile.layout
    diffs = []
    for key, theirs in asked.items():
        if key not in mine:
            continue
        a, b = mine.get(key), theirs
        if key == "stop":
            a, b = list(a or []), list(b or [])
        if key == "prompt" and isinstance(a, dict) and isinstance(b, dict):
            sub = {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)}
            if sub:
                diffs.append(
                    f"{_LAYOUT_NAMES[key]}: "
                    + ", ".join(f"{k} profile {v[0]!r} vs audit {v[1]!r}" for k, v in sorted(sub.items()))
                )
            continue
        if a != b:
            if key == "chat_template_sha256":
                diffs.append(
                    f"chat template: profile {str(a)[:12] if a else 'none'} vs audit {str(b)[:12] if b else 'none'}"
                )
            else:
                diffs.append(f"{_LAYOUT_NAMES.get(key, key)}: profile {a!r} vs audit {b!r}")
    if diffs:
        raise ProfileError(
            f"the profile {profile.path} was calibrated with another layout than this audit uses: "
            + "; ".join(diffs)
            + " (audit with the profile's settings, or calibrate a profile with these)"
        )


def profile_hash(header: dict[str, Any], crm_bytes: bytes | None = None) -> str:
    """The content hash of a profile: ``profile.json`` without its hash (and ``crm.npz``'s bytes).

    ``crm_bytes`` is ``None`` for a profile without CRM (an endpoint profile, or one calibrated
    in process without ``with_crm``): its header is all there is to hash.
    """
    body = canonical_json({k: v for k, v in header.items() if k != "profile_hash"})
    if crm_bytes is None:  # no crm.npz: the header is everything
        return hashlib.sha256(body).hexdigest()
    h = hashlib.sha256()
    h.update(body)
    h.update(hashlib.sha256(crm_bytes).digest())
    return h.hexdigest()


DEFAULT_PROFILES = "mnemoscope.data.profiles"
#: calibration rate on one idle CPU thread: wall seconds per record per billion parameters (as
#: estimated by :func:`n_params_estimate`). Qwen2.5-Coder-0.5B (0.37 B by that estimate) traced 120
#: records in about 10 min on one core (issue 27): 13.5 s per record per B. The --per-class runs
#: of docs/calibrate.md (whole calibration, two at a time on 2 cores, load 1-5) measured 12.0
#: (SmolLM2, 0.15 B), 11.7 (Gemma-3-270m, 0.26 B) and 9.9 (Qwen, 0.37 B): the estimate errs long.
#: A loaded machine is slower (20-26 s per record for the 135M default model at load 12-20).
SECONDS_PER_RECORD_PER_BPARAM = 13.5
#: answers of each class (memory, context-needed) the default calibration on the shipped data
#: draws records until they verify on the model (``calibrate --per-class``). 300, not 150: with
#: 150 per class about 50 clean answers certify the conformal threshold, which then sits near their
#: maximum; memory recall at alpha was 0.46 (SmolLM2) and 0.68 (Qwen over llama-server) with 150 /
#: 100 per class, 0.79 and 0.72 with 300, the realised false-flag rates moving from 0 to 0.05 and
#: 0.04 (docs/calibrate.md, measured figures)
DEFAULT_PER_CLASS = 300
#: the most records the default calibration traces before it stops drawing
DEFAULT_MAX_TRACED = 2400
#: records the default calibration typically traces: the measured draws needed about 1.5
#: records per verified answer (SmolLM2-135M: 920 for 300 per class; Qwen2.5-Coder-0.5B over
#: llama-server: 974; docs/calibrate.md); a model that knows fewer facts needs more
DEFAULT_CALIBRATION_RECORDS = 950


def cached_profile_dir(info: Any, cache: str | Path | None = None) -> Path:
    """Where ``--auto-calibrate`` keeps a model's profile: ``<cache>/profiles/<fingerprint>/``."""
    from mnemoscope.paths import cache_dir

    d = info.to_dict() if hasattr(info, "to_dict") else dict(info)
    fp = str(d.get("fingerprint") or "unknown").replace(":", "-").replace("/", "-")
    return cache_dir(cache) / "profiles" / fp


def n_params_estimate(info: Any) -> float:
    """Parameters of a transformer from its shape: ``12 L d^2 + V d`` (embeddings counted once)."""
    d = info.to_dict() if hasattr(info, "to_dict") else dict(info)
    L, h, V = int(d.get("n_layers") or 0), int(d.get("hidden_size") or 0), int(d.get("vocab_size") or 0)
    return float(12 * L * h * h + V * h)


def estimate_calibration_seconds(info: Any, n_records: int = DEFAULT_CALIBRATION_RECORDS) -> float:
    """Expected wall time of ``mnemoscope calibrate`` on one thread (a rough linear model in size)."""
    return max(30.0, SECONDS_PER_RECORD_PER_BPARAM * n_params_estimate(info) / 1e9 * n_records)


def calibrate_command(info: Any, cache: str | Path | None = None) -> str:
    """The exact command that calibrates a profile for ``info``'s model where audits find it."""
    d = info.to_dict() if hasattr(info, "to_dict") else dict(info)
    spec = d.get("spec") or d.get("name")
    adapter = f" --adapter {d['adapter']}" if d.get("adapter") else ""
    return f"mnemoscope calibrate --model {spec}{adapter} --out {cached_profile_dir(info, cache)}"


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
    cached = cached_profile_dir(info)
    if (cached / "profile.json").is_file():
        return cached
    name = (info.to_dict() if hasattr(info, "to_dict") else dict(info)).get("name")
    secs = estimate_calibration_seconds(info)
    raise ProfileError(
        f"no audit profile fits the model {name} (none shipped, none cached under {cached}); calibrate one "
        f"with `{calibrate_command(info)}` (about {secs / 60:.0f} min on one idle CPU thread for the "
        f"typical {DEFAULT_CALIBRATION_RECORDS} records it traces until {DEFAULT_PER_CLASS} answers of "
        "each class verify), or pass --auto-calibrate to run it once and cache it, "
        "or --profile DIR"
    )


def load_profile(
    path: str | Path, *, model: Any = None, backend: Literal["local", "endpoint"] | None = "local"
) -> AuditProfile:
    """Read and verify a profile folder (or its ``profile.json``), in-process or endpoint.

    Args:
        model: a ModelInfo or dict: refuse a profile of another model (in-process profiles).
        backend: the backend the profile is for (``"local"``, the default, refuses an endpoint
            profile naming ``--endpoint``; ``"endpoint"`` refuses an in-process one; ``None``
            accepts both).

    Raises:
        ProfileError: no profile, unknown format, altered files (hash mismatch), another model
            or another backend.
    """
    path = Path(path)
    if path.name == "profile.json" and path.is_file():
        path = path.parent
    hp = path / "profile.json"
    if not hp.is_file():
        if backend == "endpoint":
            raise ProfileError(
                f"no endpoint profile at {path}; run `mnemoscope calibrate --endpoint URL --out DIR`"
            )
        raise ProfileError(f"no audit profile at {path} (profile.json missing); run `mnemoscope calibrate`")
    try:
        header = json.loads(hp.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ProfileError(f"{hp} is not valid JSON ({e.msg})") from e
    is_endpoint = header.get("backend") == "endpoint" or header.get("format") == ENDPOINT_PROFILE_FORMAT
    if is_endpoint and backend == "local":
        raise ProfileError(
            f"{path} is an endpoint profile (calibrated against a served model with `mnemoscope calibrate "
            "--endpoint`): use it with --endpoint URL"
        )
    if not is_endpoint and backend == "endpoint":
        raise ProfileError(
            f"{hp} is not an endpoint profile (format {header.get('format')!r}): profiles calibrated "
            "in-process need hidden states and the in-process model's weights; calibrate one against the "
            "server with `mnemoscope calibrate --endpoint URL --out DIR`"
        )
    prof = _load_endpoint(path, header) if is_endpoint else _load_local(path, header)
    if model is not None and not is_endpoint:
        prof.check_model(model)
    from mnemoscope.report.profile_card import NOT_MEASURED, read_validation

    prof.validation = read_validation(prof)
    if isinstance(prof.validation, dict) and prof.validation.get("status") != NOT_MEASURED:
        from mnemoscope.audit.validation import profile_status

        # the status under the current rule (what every audit it backs says), not the one recorded
        # when the card was written: `profile show` and the audits never disagree
        prof.validation = {**prof.validation, "profile_status": profile_status(prof)}
    return prof


def load_endpoint_profile(path: str | Path) -> AuditProfile:
    """:func:`load_profile` refusing an in-process profile."""
    return load_profile(path, backend="endpoint")


def _verdict_of(header: dict[str, Any]) -> VerdictModel | None:
    return None if header.get("verdict") is None else VerdictModel.from_dict(header["verdict"])


def _load_local(path: Path, header: dict[str, Any]) -> AuditProfile:
    hp = path / "profile.json"
    if header.get("format") != PROFILE_FORMAT:
        raise ProfileError(f"{hp}: format {header.get('format')!r} is not {PROFILE_FORMAT!r}")
    crm: FittedCRM | None = None
    if header.get("crm") is None:  # calibrated without CRM: profile.json is the whole profile
        got = profile_hash(header)
        if got != header.get("profile_hash"):
            raise ProfileError(f"{path}: profile hash mismatch (profile.json altered after calibration)")
    else:
        crm_path = path / header["crm"]["file"]
        if not crm_path.is_file():
            raise ProfileError(f"{path}: {crm_path.name} is missing")
        got = profile_hash(header, crm_path.read_bytes())
        if got != header.get("profile_hash"):
            raise ProfileError(
                f"{path}: profile hash mismatch (profile.json or crm.npz altered after calibration)"
            )
        try:
            crm = load_crm(crm_path)
        except ModelMismatchError as e:  # pragma: no cover - load_crm without model never raises it
            raise ProfileError(str(e)) from e
    a = header.get("anomaly")
    return AuditProfile(
        path=path,
        header=header,
        crm=crm,
        # without CRM there is no anomaly rule: the defaults stand in, never applied (no LTS)
        anomaly=AnomalyRule()
        if a is None
        else AnomalyRule(
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
        verdict=_verdict_of(header),
        token_margin=float(header.get("token_attribution", {}).get("margin", math.log(2.0))),
    )


def _load_endpoint(path: Path, header: dict[str, Any]) -> AuditProfile:
    hp = path / "profile.json"
    if header.get("format") != ENDPOINT_PROFILE_FORMAT:
        raise ProfileError(f"{hp}: format {header.get('format')!r} is not {ENDPOINT_PROFILE_FORMAT!r}")
    got = profile_hash(header)
    if got != header.get("profile_hash"):
        raise ProfileError(f"{hp}: profile hash mismatch (profile.json altered after calibration)")
    try:
        builder = builder_of(header["prompt"], tuple((header.get("layout") or {}).get("stop") or ()))
        settings = EndpointSettings(
            pair_config=EndpointPairConfig(
                builder=builder,
                template=ChatTemplate.from_dict(header["chat_template"]),
                max_new_tokens=int(header["max_new_tokens"]),
                top_k=int(header["top_k"]),
            ),
            fingerprint=EndpointFingerprint.from_dict(header["model"]["endpoint_fingerprint"]),
        )
        return AuditProfile(
            path=path,
            header=header,
            crm=None,
            anomaly=AnomalyRule(),
            repcs_tau=float(header["repcs"]["tau"]),
            repcs_params=dict(header["repcs"]["params"]),
            content_hash=got,
            model=header["model"],
            verdict=_verdict_of(header),
            token_margin=float(header["token_attribution"]["margin"]),
            backend="endpoint",
            endpoint=settings,
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ProfileError(f"{hp}: the endpoint profile is malformed ({type(e).__name__}: {e})") from e
