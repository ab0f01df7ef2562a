"""``mnemoscope calibrate``: fit the audit profile of a model, its labels verified on that model,
with a validation card (registered by :mod:`mnemoscope.cli.serve_cmd`); ``--auto-calibrate`` of
``audit`` and ``serve`` (:func:`auto_profile`)."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mnemoscope.cli.endpoint_args import add_endpoint_args
from mnemoscope.cli.options import (
    add_chat_arg,
    add_engine_args,
    add_model_args,
    add_stop_arg,
    load_from_args,
    stops_from_args,
    verdict_signals,
)

__all__ = ["SHIPPED", "auto_profile", "print_card", "register", "shipped_records"]

SHIPPED = "shipped:context-reliance"
#: --prompt-from-log: the logged requests with a prompt template read by default
LOG_SAMPLE = 500
#: ... and the most records read to find them (records without one are skipped)
LOG_SCAN_FACTOR = 20


def register(sub: Any) -> None:
    c = sub.add_parser(
        "calibrate",
        help="fit the audit profile of a model: labels verified on it, a held-out validation card",
        description="Trace (context, query) records with and without their context (once; resumable), "
        "verify every label on the model being calibrated (a memory item must be answered closed-book and "
        "with the context, a clean item only with the context, a knowledge-conflict item is labelled by the "
        "answer it gives; --labels given skips this), split the kept items by fact, fit RePCS tau and the "
        "verdict model on one part (its conformal threshold certified on clean answers it does not fit on; "
        "with --with-crm also CRM's directions, classifier and anomaly rule), audit the held-out part and "
        "print the validation card. Labels: 0 = clean (answer from the context), 1 = from memory.",
        epilog="Examples:\n"
        "  mnemoscope calibrate --model qwen.gguf --out profiles/qwen   # until 300 per class verify\n"
        "  mnemoscope calibrate --model qwen.gguf --out profiles/qwen --max-records 200   # a budget, balanced\n"
        "  mnemoscope calibrate --model qwen.gguf --out profiles/qwen --budget 10   # ten minutes of tracing\n"
        "  mnemoscope calibrate --model qwen.gguf --out profiles/app --prompt app_prompt.json   # the app's prompt\n"
        "  mnemoscope calibrate --model qwen.gguf --out profiles/app --prompt-from-log proxy-audits.db   # as logged\n"
        "  mnemoscope calibrate --model gemma.gguf --out profiles/gemma --labels given --input mine.jsonl\n"
        "  mnemoscope calibrate --endpoint http://127.0.0.1:8080/v1 --chat-template qwen.gguf --out p/\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_args(c)
    add_engine_args(c)
    c.add_argument(
        "--input",
        default=SHIPPED,
        metavar="FILE",
        help="JSONL of {id, context, query, label, answer, aliases?, kind?, fact_id?, context_answer?}; "
        "default: the shipped calibration data (well-known facts = memory, invented facts = clean, "
        "knowledge conflicts when shipped; shipped:calibration+public adds the real SQuAD passages and entity-swap "
        "conflicts of docs/data.md), drawn until 300 answers of each class verify (at most 2400 "
        "records traced) unless --max-records or --per-class is given",
    )
    c.add_argument("--out", required=True, metavar="DIR", help="profile folder to write")
    c.add_argument(
        "--max-records",
        type=int,
        default=None,
        help="a budget of records: alone (labels verified), drawn in rounds, easiest facts first, the "
        "verified classes balanced, with the expected card printed after the first round; with --labels "
        "given, a stratified seeded sample; with --per-class: the most records traced",
    )
    c.add_argument(
        "--budget",
        type=float,
        default=None,
        metavar="MINUTES",
        help="a time budget for tracing: drawn in rounds as --max-records alone, stopping when the next round "
        "would not fit at the rate measured so far (the fit and the card come after it)",
    )
    app = c.add_argument_group("the application's own prompt (instead of template A)")
    which = app.add_mutually_exclusive_group()
    which.add_argument(
        "--prompt",
        default=None,
        metavar="FILE",
        help='calibrate on the application\'s own prompt: JSON chat messages (or {"prompt": ...}) with one '
        "{context} and one {query} placeholder where the app puts them (system prompt, few-shot turns, the "
        "context in any message); the profile records its fingerprint, and the proxy finds the context by it "
        "(docs/proxy.md)",
    )
    which.add_argument(
        "--prompt-from-log",
        default=None,
        metavar="LOG",
        help="calibrate on the application's prompt as the audit proxy logged it: LOG is the proxy's audit "
        "log (a SQLite path or a postgresql:// URL, as 'mnemoscope log --db'); its most recent requests' "
        "prompt templates (the messages with {context} and {query} where the proxy located them) are "
        "grouped by fingerprint and the most common one is calibrated on, as --prompt FILE would "
        "(docs/calibrate.md)",
    )
    app.add_argument(
        "--log-sample",
        type=int,
        default=None,
        metavar="N",
        help=f"with --prompt-from-log: the N most recent logged requests with a prompt template (default {LOG_SAMPLE})",
    )
    app.add_argument(
        "--log-template",
        default=None,
        metavar="SHA",
        help="with --prompt-from-log: calibrate on this template (its fingerprint, or a prefix of it) "
        "instead of the most common one",
    )
    c.add_argument(
        "--per-class",
        type=int,
        default=None,
        metavar="N",
        help="draw records in rounds until N answers of each class (memory, context-needed) verify on "
        "this model, the input runs out or --max-records are traced; memory facts are drawn easiest first "
        "(by a 'difficulty' field when present), each round sized by the yield so far (docs/calibrate.md)",
    )
    c.add_argument(
        "--labels",
        choices=["verify", "given"],
        default="verify",
        help="verify every label on this model (default; needs each record's answer) or take them as given",
    )
    c.add_argument(
        "--held-out-fraction",
        type=float,
        default=1 / 3,
        help="share of the facts held out for the validation card (default 1/3; 0 = none)",
    )
    c.add_argument(
        "--min-per-class",
        type=int,
        default=10,
        help="with --labels verify: fewer verified items of a class is an error (default 10)",
    )
    c.add_argument("--template", default="A")
    c.add_argument("--task", default="plain", choices=["plain", "qa", "continuation", "summarization"])
    add_chat_arg(c)
    add_stop_arg(c)
    c.add_argument("--max-new-tokens", "-T", type=int, default=32)
    c.add_argument(
        "--batch-size",
        type=int,
        default=16,  # CalibrationConfig.batch_size (not imported here: --help stays instant)
        help="records decoded together: both paths and the closed-book answer, 3 rows per record (default 16)",
    )
    crm = c.add_argument_group(
        "CRM (hidden states; any of these options implies --with-crm)",
    )
    crm.add_argument(
        "--with-crm",
        action="store_true",
        help="also trace the hidden states and fit CRM: its classifier (for --verdict-signals "
        "crm_probability, which implies this) and its anomaly rule (audit --rule crm-anomaly). Off by "
        "default: the verdict's default signals are black-box; in process only (an endpoint serves no "
        "hidden states)",
    )
    crm.add_argument("--classifier", choices=["auto", "lr", "xgb", "none"], default=None, help="default auto")
    crm.add_argument(
        "--levels",
        default=None,
        help="CRM levels of the classifier (default l2,l3; l1 costs a 2nd generation)",
    )
    crm.add_argument(
        "--k-sigma", type=float, default=None, help="layer flag: |LTS - mu| > k sigma (default 2)"
    )
    crm.add_argument(
        "--rule",
        choices=["calibrated", "paper"],
        default=None,
        help="request flag: anomaly score over a held-out clean threshold (default) or any flagged layer (paper)",
    )
    crm.add_argument(
        "--alpha",
        type=float,
        default=None,
        help="target false-positive rate of the anomaly flag (default 0.05)",
    )
    crm.add_argument(
        "--threshold-fraction",
        type=float,
        default=None,
        help="clean records held out for the anomaly threshold (default 0.5)",
    )
    c.add_argument("--repcs-alpha", type=float, default=0.05, help="RePCS target false-positive rate")
    c.add_argument(
        "--verdict-signals",
        default=None,
        metavar="LIST",
        help="comma-separated signals the verdict may combine (default: every black-box one: repcs_z, "
        "closed_book_logprob, context_token_fraction, the answer-bearing words' fact_cb_logratio, "
        "fact_cb_rank, fact_switched, fact_cb_entropy, fact_pmi, and closed_book_agreement, which costs "
        "audits one closed-book generation; add crm_probability for CRM's classifier, in process: "
        "docs/calibrate.md)",
    )
    c.add_argument(
        "--certify",
        choices=["marginal", "per-kind"],
        default="marginal",
        help="the verdict's false-flag bound over all context-needed calibration answers (default) or "
        "within every item kind, e.g. knowledge conflicts the model followed (higher threshold, lower "
        "recall; docs/calibrate.md)",
    )
    c.add_argument("--seed", type=int, default=42)
    c.add_argument("--on-error", choices=["skip", "raise"], default="skip")
    c.add_argument("--overwrite", action="store_true", help="discard traces already extracted")
    c.add_argument("--json", action="store_true", help="print the validation card as JSON")
    c.add_argument(
        "--time-audits",
        type=int,
        default=0,
        metavar="N",
        help="audit N held-out records live, one at a time, to time an audit for the card (default 0: the "
        "held-out figures score the calibration traces, and the card says the audit time was not measured)",
    )
    add_endpoint_args(c, prompts=True)
    c.set_defaults(func=run)


def shipped_records() -> str:
    """The shipped calibration data's path (the grown set when installed, else context-reliance)."""
    try:
        from mnemoscope.bench import calibration_data  # type: ignore[attr-defined]

        path = getattr(calibration_data, "default_path", None)
        if callable(path):
            return str(path())
    except ImportError:
        pass
    from importlib import resources

    return str(resources.files("mnemoscope.bench") / "data" / "context_reliance.jsonl")


def sample_records(records: list[Any], n: int | None, seed: int) -> list[Any]:
    """A seeded sample of ``n`` records, balanced across classes (memory, clean, knowledge
    conflict, unlabelled: an equal share each, what one class cannot fill going to the others)
    and, within a class, stratified by kind. Balanced because the clean answers are what the
    verdict's conformal certification needs (19 for alpha = 0.05): a sample proportional to a
    set of mostly well-known facts would spend the budget on memory items."""
    if n is None or n >= len(records):
        return records
    import numpy as np

    rng = np.random.default_rng(seed)
    classes: dict[str, dict[str, list[int]]] = {}
    for i, r in enumerate(records):
        kind = str((getattr(r, "extra", None) or {}).get("kind"))
        cls = "conflict" if kind == "conflict" else {1: "memory", 0: "clean"}.get(r.label, "unlabelled")
        classes.setdefault(cls, {}).setdefault(kind, []).append(i)
    sizes = {c: sum(len(v) for v in kinds.values()) for c, kinds in classes.items()}
    quota: dict[str, int] = {}
    left = n
    order = sorted(sizes, key=lambda c: sizes[c])  # small classes first: what they cannot fill moves on
    for j, c in enumerate(order):
        quota[c] = min(sizes[c], left // (len(order) - j))
        left -= quota[c]
    keep: list[int] = []
    for c in sorted(classes):
        kinds = classes[c]
        for kind in sorted(kinds):
            idx = kinds[kind]
            k = round(quota[c] * len(idx) / sizes[c])
            keep += rng.permutation(idx)[:k].tolist()
    return [records[i] for i in sorted(keep)]


def run(args: argparse.Namespace) -> int:
    """One body for both backends: the model in process (``--model``) or behind ``--endpoint``
    only changes the tracer handed to :func:`mnemoscope.audit.calibrate.calibrate`."""
    from mnemoscope.audit import calibrate as cal
    from mnemoscope.audit.profile import DEFAULT_MAX_TRACED, DEFAULT_PER_CLASS
    from mnemoscope.data.records import read_records
    from mnemoscope.errors import InputError

    app_prompt, prompt_origin = app_prompt_from_args(args)  # before the data and any model
    path = args.input
    from mnemoscope.bench.calibration_data import PUBLIC_SPEC, resolve_shipped

    if path in (SHIPPED, "shipped:calibration", PUBLIC_SPEC):  # bench.calibration_data's specs
        # the shipped set, with PUBLIC_SPEC also the calibration split of the real public sets
        path = resolve_shipped(PUBLIC_SPEC) if path == PUBLIC_SPEC else shipped_records()
        if args.max_records is None and args.per_class is None:
            if args.budget is None:
                # draw until enough labels verify on this model (a fixed sample leaves a small model
                # with too few memory answers: docs/calibrate.md, measured figures)
                args.per_class = DEFAULT_PER_CLASS
            args.max_records = DEFAULT_MAX_TRACED  # a time budget is capped as the default draw is
    if args.budget is not None and args.budget <= 0:
        raise InputError(
            f"--budget must be a positive number of minutes, got {args.budget:g}", field="budget"
        )
    if args.budget is not None and args.labels == "given":
        raise InputError(
            "--budget draws records by what verifies on the model: it needs --labels verify", field="budget"
        )
    records, errors = read_records(path, on_error=args.on_error)
    for e in errors:
        print(f"skipped: {e}", file=sys.stderr)
    if args.per_class is None and args.labels == "given" and args.max_records is not None:
        records = sample_records(records, args.max_records, args.seed)  # nothing to verify: a fixed sample
    t0 = time.perf_counter()
    cfg = calibration_config(args, app_prompt)
    if args.endpoint and getattr(args, "engine", "local") == "ray":
        raise InputError(
            "--engine ray traces in process on Ray actors; over --endpoint the server does the work "
            "(raise --endpoint-concurrency instead)",
            field="engine",
        )
    if args.endpoint and cfg.with_crm:
        raise InputError(
            "--with-crm needs the model's hidden states, and an endpoint serves none (only tokens and "
            "their log-probabilities come back over HTTP): calibrate in process (--model) to fit CRM",
            field="with_crm",
        )
    fitter = None
    if cfg.with_crm:  # CRM is a research job: plugged in only when asked
        from mnemoscope.pipelines.crm.fitter import CRMFitter

        fitter = CRMFitter(progress=not args.quiet)
    with _tracer(args) as tracer:
        prof = cal.calibrate(
            tracer,
            records,
            args.out,
            cfg,
            fitter=fitter,
            input_errors=errors,
            progress=not args.quiet,
            overwrite=args.overwrite,
            timing_sample=args.time_audits,
            prompt_origin=prompt_origin,
        )
    print(_summary(args.out, prof))
    print_card(prof, args.json, time.perf_counter() - t0)
    return 0


def calibration_config(args: argparse.Namespace, app_prompt: Any = None) -> Any:
    """The :class:`~mnemoscope.audit.profile.CalibrationConfig` of the command line (both backends);
    ``app_prompt``: the application's prompt (:func:`app_prompt_from_args`)."""
    from mnemoscope.audit.profile import CalibrationConfig

    d = CalibrationConfig()
    # CRM's options given on the command line ask for CRM (they configure nothing without it)
    crm_asked = [
        k
        for k in ("classifier", "levels", "k_sigma", "rule", "alpha", "threshold_fraction")
        if getattr(args, k) is not None
    ]
    return CalibrationConfig(
        template=args.template,
        task=args.task,
        chat={"auto": "auto", "on": True, "off": False}[args.chat],  # type: ignore[arg-type]
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
        classifier=args.classifier or d.classifier,
        levels=d.levels
        if args.levels is None
        else tuple(s.strip() for s in args.levels.split(",") if s.strip()),
        k_sigma=d.k_sigma if args.k_sigma is None else args.k_sigma,
        rule=args.rule or d.rule,
        alpha=d.alpha if args.alpha is None else args.alpha,
        threshold_fraction=d.threshold_fraction
        if args.threshold_fraction is None
        else args.threshold_fraction,
        repcs_alpha=args.repcs_alpha,
        seed=args.seed,
        verdict_candidates=verdict_signals(args),
        certify=args.certify,
        labels=args.labels,
        held_out_fraction=args.held_out_fraction,
        min_per_class=args.min_per_class,
        stop=stops_from_args(args),
        per_class=args.per_class,
        # with --per-class the most records traced; alone (labels verified) the draw's budget
        max_traced=args.max_records if (args.per_class is not None or args.labels == "verify") else None,
        budget_seconds=None if args.budget is None else 60.0 * args.budget,
        app_prompt=app_prompt,
        with_crm=bool(args.with_crm or crm_asked),
    )


def app_prompt_from_args(args: argparse.Namespace) -> tuple[Any, dict[str, Any] | None]:
    """(the application prompt to calibrate on or ``None``, where it came from or ``None``):
    ``--prompt FILE`` or ``--prompt-from-log LOG`` (:func:`app_prompt_from_log`).

    Raises:
        InputError: a bad prompt file; ``--log-sample``/``--log-template`` without
            ``--prompt-from-log``; what :func:`app_prompt_from_log` refuses.
    """
    from mnemoscope.errors import InputError
    from mnemoscope.trace.app_prompt import load_app_prompt

    log = getattr(args, "prompt_from_log", None)
    if log is None:
        for flag, val in (("--log-sample", args.log_sample), ("--log-template", args.log_template)):
            if val is not None:
                raise InputError(f"{flag} goes with --prompt-from-log LOG", field=flag[2:].replace("-", "_"))
        return (None if args.prompt is None else load_app_prompt(args.prompt)), None
    sample = LOG_SAMPLE if args.log_sample is None else args.log_sample
    return app_prompt_from_log(log, sample=sample, template=args.log_template)


def log_name(url: str) -> str:
    """The log's path or URL without credentials (a PostgreSQL URL's user, password and query)."""
    from urllib.parse import urlsplit, urlunsplit

    if not url.startswith(("postgresql://", "postgres://")):
        return url
    u = urlsplit(url)
    return urlunsplit((u.scheme, u.netloc.rsplit("@", 1)[-1], u.path, "", ""))


def _logged_with_template(log: str, sample: int) -> tuple[list[dict[str, Any]], int]:
    """The ``sample`` most recent records of the audit log ``log`` carrying a prompt template (at
    most ``LOG_SCAN_FACTOR * sample`` records read, newest first) and how many were read."""
    import sqlite3

    from mnemoscope.errors import InputError
    from mnemoscope.server.log_schema import SCHEMA_VERSION
    from mnemoscope.server.storage import StorageError, open_store

    name = log_name(log)
    try:
        store = open_store(log, readonly=True)
    except (StorageError, sqlite3.Error) as e:
        raise InputError(
            f"--prompt-from-log {name}: cannot read the audit log ({e})", field="prompt_from_log"
        ) from e
    found: list[dict[str, Any]] = []
    read = 0
    try:
        if store.schema_version < SCHEMA_VERSION:
            raise InputError(
                f"--prompt-from-log {name}: this log has schema {store.schema_version}, written before the "
                "proxy logged prompt templates: calibrate with --prompt FILE (docs/calibrate.md)",
                field="prompt_from_log",
            )
        before: int | None = None
        while len(found) < sample and read < LOG_SCAN_FACTOR * sample:
            page = store.history(limit=min(1000, LOG_SCAN_FACTOR * sample - read), before_seq=before)
            for rec in page.items:
                read += 1
                if isinstance(rec.get("prompt_template"), dict):
                    found.append(rec)
                    if len(found) == sample:
                        break
            if page.next_before_seq is None:
                break
            before = page.next_before_seq
    except StorageError as e:
        raise InputError(
            f"--prompt-from-log {name}: cannot read the audit log ({e})", field="prompt_from_log"
        ) from e
    finally:
        store.close()
    return found, read


def app_prompt_from_log(
    log: str, *, sample: int = LOG_SAMPLE, template: str | None = None, out: Any = None
) -> tuple[Any, dict[str, Any]]:
    """The application prompt to calibrate on, from the audit proxy's log (``--prompt-from-log``).

    Reads the ``sample`` most recent logged requests with a prompt template (the proxy logs the
    request's skeleton: :func:`mnemoscope.audit.prompt_match.skeleton_of`), groups them by
    fingerprint, prints the groups to ``out`` (default stderr) and returns the most common
    template (or ``template``, a fingerprint or a prefix of one) with where it came from (the
    profile's ``prompt_origin``).

    Raises:
        InputError: ``sample`` < 1; the log missing or unreadable (naming it); no logged request
            with a template; ``template`` matching none (or several) of the sample's.
    """
    from mnemoscope.audit.prompt_match import template_groups
    from mnemoscope.errors import InputError
    from mnemoscope.trace.app_prompt import AppPrompt

    out = sys.stderr if out is None else out
    if sample < 1:
        raise InputError(f"--log-sample must be at least 1, got {sample}", field="log_sample")
    name = log_name(log)
    records, read = _logged_with_template(log, sample)
    groups, bad = template_groups(records)
    if not groups:
        where = "the log holds no records" if read == 0 else f"none among its {read} most recent records"
        raise InputError(
            f"--prompt-from-log {name}: no logged request with a prompt template ({where}; the proxy logs one "
            "with each request whose context it located, so a log written before it did, or holding only "
            "undetermined, skipped or upstream-failed requests, has none): calibrate with --prompt FILE "
            "(docs/calibrate.md)",
            field="prompt_from_log",
        )
    n = sum(g.count for g in groups)
    print(
        f"mnemoscope: calibrate: {n} logged requests with a prompt template (of the {read} most recent "
        f"records of {name}), {len(groups)} templates:",
        file=out,
    )
    for g in groups[:10]:
        print(f"  {_group_line(g)}", file=out)
    if len(groups) > 10:
        rest = groups[10:]
        print(f"  ... and {len(rest)} more templates ({sum(g.count for g in rest)} requests)", file=out)
    if bad:
        print(f"  ({bad} logged templates were not valid prompts and are left out)", file=out)
    if template is None:
        chosen = groups[0]
    else:
        want = template.strip().lower()
        hits = [g for g in groups if g.sha256.startswith(want)] if want else []
        if len(hits) != 1:
            present = ", ".join(f"{g.sha256[:12]} ({g.count})" for g in groups[:20])
            why = "matches none" if not hits else f"matches {len(hits)}"
            raise InputError(
                f"--log-template {template} {why} of the {len(groups)} templates in the sample of {name}: "
                f"{present}{' ...' if len(groups) > 20 else ''}",
                field="log_template",
            )
        chosen = hits[0]
    print(
        f"mnemoscope: calibrate: calibrating on template {chosen.sha256[:12]} ({chosen.count} of {n} "
        f"requests, {100 * chosen.share:.1f}%)",
        file=out,
    )
    if chosen.share < 0.5:
        print(
            f"mnemoscope: calibrate: warning: template {chosen.sha256[:12]} covers only "
            f"{100 * chosen.share:.1f}% of the sample: the profile's guarantee covers the requests that "
            "follow it; the proxy audits the others as 'not the calibrated prompt' (or refuses another "
            "layout). Calibrate one profile per template that matters (--log-template)",
            file=out,
        )
    app = AppPrompt(messages=chosen.app.messages, prompt=chosen.app.prompt, source=f"proxy log {name}")
    origin = {
        "from": "proxy log",
        "log": name,
        "records_read": read,
        "sample": n,
        "template": chosen.sha256,
        "count": chosen.count,
        "share": round(chosen.share, 4),
        "statuses": chosen.statuses,
        "n_templates": len(groups),
        "newest": chosen.newest,
        "oldest": chosen.oldest,
    }
    return app, origin


def _group_line(g: Any) -> str:
    """One template of the log's sample: fingerprint, count, share, layout, roles, system text."""
    fp = g.app.fingerprint()
    roles = ",".join(fp["roles"]) if fp["roles"] is not None else "completion prompt"
    text = g.system_text()
    head = repr(text[:80]) + ("..." if len(text) > 80 else "")
    what = "prompt" if g.app.messages is None else "system"
    return (
        f"{g.sha256[:12]}  {g.count:>5} ({100 * g.share:5.1f}%)  layout {fp['layout']}  roles {roles}  "
        f"{what}: {head if text else '(none)'}"
    )


@contextlib.contextmanager
def _tracer(args: argparse.Namespace) -> Iterator[Any]:
    """The calibration's tracer: the model behind ``--endpoint`` (its client closed afterwards)
    or the one ``--model`` loads."""
    from mnemoscope.audit.tracing import EndpointTracer, LocalTracer

    if args.endpoint:
        from mnemoscope.cli.endpoint_args import client_from_args, template_spec

        with client_from_args(args) as client:
            yield EndpointTracer(
                client, chat_template=template_spec(args), eos_text=args.eos_token, top_k=args.top_k
            )
        return
    lm = load_from_args(args)
    engine = None
    if getattr(args, "engine", "local") == "ray":  # the records not yet traced, on Ray actors
        from mnemoscope.cli.options import ray_options_from_args
        from mnemoscope.pipelines.ray import RayTraceEngine

        engine = RayTraceEngine.for_model(lm, ray_options_from_args(args))
    yield LocalTracer(lm, engine=engine)


def _summary(out: str, prof: Any) -> str:
    """One line on what was fitted (the card follows)."""
    h = prof.header
    d = h["data"]
    for f in d.get("failures") or []:
        print(f"mnemoscope: calibrate: record {f['id']}: {f['message']}", file=sys.stderr)
    lab = h.get("labels") or {}
    v = prof.verdict
    traced = (
        f"RePCS tau {prof.repcs_tau:.3f} (n={h['repcs']['n']}); verdict signals {[] if v is None else list(v.selected_)}; "
        f"{d['n_traced']} records traced ({d['n_errors']} failed), {d.get('n_verified')} kept "
        f"({lab.get('mode')}), {d['n_fit']} fitted ({d['n_fit_clean']} clean); profile hash {prof.content_hash[:16]}"
    )
    if prof.backend == "endpoint":
        return (
            f"wrote {out}: endpoint profile for {h['model']['name']} at {h['endpoint']['base_url']} "
            f"(fingerprint {h['model']['fingerprint'][:21]}), method {h['endpoint_method']}, top-k "
            f"k={h['top_k']}; {traced}"
        )
    thr = prof.anomaly.score_threshold
    crm = (
        "no CRM (--with-crm fits it)"
        if prof.crm is None
        else f"{len(prof.crm.layers)} target layers {prof.crm.layers.tolist()}, classifier {prof.crm.classifier}, "
        f"anomaly threshold {'any flagged layer' if thr is None else f'{thr:.3f}'} (n={prof.anomaly.n_threshold})"
    )
    return f"wrote {out}: {crm}, {traced}"


def print_card(prof: Any, as_json: bool, seconds: float) -> None:
    """Print a fresh profile's validation card (``profile show`` prints the same)."""
    import json

    from mnemoscope.report.profile_card import profile_card, render_text

    card = profile_card(prof, prof.validation)
    if as_json:
        print(json.dumps(card, indent=1))
    else:
        print(render_text(card))
        print(f"calibrate wall time {seconds:.0f} s")


def auto_profile(lm: Any, *, quiet: bool = False, cache: str | None = None) -> Path:
    """The profile of ``lm``: the shipped or cached one, else calibrate it once (the default
    ``mnemoscope calibrate`` settings on the shipped data) into ``<cache>/profiles/<fingerprint>/``."""
    from mnemoscope.audit.calibrate import calibrate_profile
    from mnemoscope.audit.profile import (
        DEFAULT_MAX_TRACED,
        DEFAULT_PER_CLASS,
        CalibrationConfig,
        ProfileError,
        cached_profile_dir,
        default_profile_path,
        estimate_calibration_seconds,
    )
    from mnemoscope.data.records import read_records

    try:
        return default_profile_path(lm.info)
    except ProfileError:
        pass
    out = cached_profile_dir(lm.info, cache)
    records, _ = read_records(shipped_records())
    eta = estimate_calibration_seconds(lm.info)
    print(
        f"mnemoscope: no profile for {lm.info.name}; calibrating one into {out} "
        f"(drawing until {DEFAULT_PER_CLASS} answers of each class verify: about {eta / 60:.0f} min "
        "on one thread; resumable)",
        file=sys.stderr,
    )
    config = CalibrationConfig(labels="verify", per_class=DEFAULT_PER_CLASS, max_traced=DEFAULT_MAX_TRACED)
    calibrate_profile(lm, records, out, config, progress=not quiet)
    return out
