"""``mnemoscope calibrate | serve | apikey hash``: the audit service (``log ...`` is in log_cmd)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mnemoscope.cli.endpoint_args import add_endpoint_args
from mnemoscope.cli.options import add_chat_arg, add_model_args, load_from_args

SHIPPED = "shipped:context-reliance"


def register(sub: Any) -> None:
    c = sub.add_parser(
        "calibrate",
        help="fit the audit profile the server loads (CRM directions + anomaly rule, RePCS tau)",
        description="Trace (context, query) records with and without their context, fit CRM directions "
        "per layer with the calibration mean/std of LTS and a held-out anomaly threshold, an optional CRM "
        "classifier, and the RePCS threshold tau on the clean records. Labels: 0 = clean (answer from the "
        "context), 1 = from memory. Resumable.",
    )
    add_model_args(c)
    c.add_argument(
        "--input",
        default=SHIPPED,
        metavar="FILE",
        help="JSONL of {id, context, query, label?}; default: the shipped context-reliance set "
        "(150 invented-entity facts = clean, 300 well-known facts = memory), sampled by --max-records",
    )
    c.add_argument("--out", required=True, metavar="DIR", help="profile folder to write")
    c.add_argument("--max-records", type=int, default=None, help="stratified seeded sample of the input")
    c.add_argument("--template", default="A")
    c.add_argument("--task", default="plain", choices=["plain", "qa", "continuation", "summarization"])
    add_chat_arg(c)
    c.add_argument("--max-new-tokens", "-T", type=int, default=32)
    c.add_argument("--batch-size", type=int, default=8)
    c.add_argument("--classifier", choices=["auto", "lr", "xgb", "none"], default="auto")
    c.add_argument(
        "--levels", default="l2,l3", help="CRM levels of the classifier (l1 costs a 2nd generation)"
    )
    c.add_argument("--k-sigma", type=float, default=2.0, help="layer flag: |LTS - mu| > k sigma")
    c.add_argument(
        "--rule",
        choices=["calibrated", "paper"],
        default="calibrated",
        help="request flag: anomaly score over a held-out clean threshold (default) or any flagged layer (paper)",
    )
    c.add_argument("--alpha", type=float, default=0.05, help="target false-positive rate of the anomaly flag")
    c.add_argument(
        "--threshold-fraction", type=float, default=0.5, help="clean records held out for the threshold"
    )
    c.add_argument("--repcs-alpha", type=float, default=0.05, help="RePCS target false-positive rate")
    c.add_argument("--seed", type=int, default=42)
    c.add_argument("--on-error", choices=["skip", "raise"], default="skip")
    c.add_argument("--overwrite", action="store_true", help="discard traces already extracted")
    add_endpoint_args(c, prompts=True)
    c.set_defaults(func=_calibrate)

    s = sub.add_parser(
        "serve",
        help="run the audit server (FastAPI + uvicorn, dashboard at /)",
        description="Settings: defaults < --config FILE (TOML/JSON) < MNEMOSCOPE_* variables < flags. "
        "API keys: MNEMOSCOPE_API_KEYS=key1,key2 (sent as 'Authorization: Bearer <key>').",
    )
    s.add_argument("--config", metavar="FILE", help="TOML or JSON settings file")
    s.add_argument("--model", default=None, metavar="SPEC")
    s.add_argument("--adapter", default=None, metavar="DIR")
    s.add_argument("--device", default=None)
    s.add_argument("--dtype", default=None)
    s.add_argument("--profile", default=None, metavar="DIR", help="folder written by `mnemoscope calibrate`")
    s.add_argument("--db", default=None, metavar="URL_OR_PATH", help="SQLite path or postgresql:// URL")
    s.add_argument(
        "--log-key", default=None, metavar="FILE", help="checkpoint signing key (mnemoscope log keygen)"
    )
    s.add_argument("--host", default=None)
    s.add_argument("--port", type=int, default=None)
    s.add_argument("--max-batch-size", type=int, default=None)
    s.add_argument("--max-wait-ms", type=float, default=None)
    s.add_argument("--queue-size", type=int, default=None)
    s.add_argument("--threads", type=int, default=None, help="torch threads")
    s.add_argument(
        "--allow-anonymous",
        action="store_true",
        default=None,
        help="no API key required (local experiments only)",
    )
    add_endpoint_args(s)
    s.set_defaults(func=_serve)

    k = sub.add_parser("apikey", help="API key helpers")
    ksub = k.add_subparsers(dest="key_command", metavar="ACTION", required=True)
    h = ksub.add_parser("hash", help="print the sha256 hash of a key for api_key_hashes in a config file")
    h.add_argument("key")
    h.set_defaults(func=_hash)


def _sample(records: list[Any], n: int | None, seed: int) -> list[Any]:
    if n is None or n >= len(records):
        return records
    import numpy as np

    rng = np.random.default_rng(seed)
    groups: dict[Any, list[int]] = {}
    for i, r in enumerate(records):
        groups.setdefault(r.label, []).append(i)
    keep: list[int] = []
    for _, idx in sorted(groups.items(), key=lambda kv: str(kv[0])):
        share = max(1, round(n * len(idx) / len(records)))
        keep += rng.permutation(idx)[:share].tolist()
    return [records[i] for i in sorted(keep)]


def _calibrate(args: argparse.Namespace) -> int:
    from mnemoscope.data.records import read_records
    from mnemoscope.pipelines.calibrate import calibrate_profile
    from mnemoscope.pipelines.profile import CalibrationConfig

    path = args.input
    if path == SHIPPED:
        from importlib import resources

        path = str(resources.files("mnemoscope.bench") / "data" / "context_reliance.jsonl")
        if args.max_records is None:
            args.max_records = 240
    records, errors = read_records(path, on_error=args.on_error)
    for e in errors:
        print(f"skipped: {e}", file=sys.stderr)
    records = _sample(records, args.max_records, args.seed)
    if args.endpoint:
        from mnemoscope.cli.endpoint_args import calibrate_endpoint

        return calibrate_endpoint(args, records, errors)
    cfg = CalibrationConfig(
        template=args.template,
        task=args.task,
        chat={"auto": "auto", "on": True, "off": False}[args.chat],  # type: ignore[arg-type]
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
        classifier=args.classifier,
        levels=tuple(s.strip() for s in args.levels.split(",") if s.strip()),
        k_sigma=args.k_sigma,
        rule=args.rule,
        alpha=args.alpha,
        threshold_fraction=args.threshold_fraction,
        repcs_alpha=args.repcs_alpha,
        seed=args.seed,
    )
    lm = load_from_args(args)
    prof = calibrate_profile(
        lm, records, args.out, cfg, input_errors=errors, progress=not args.quiet, overwrite=args.overwrite
    )
    h = prof.header
    thr = prof.anomaly.score_threshold
    crm = (
        "no CRM"
        if prof.crm is None
        else f"{len(prof.crm.layers)} target layers {prof.crm.layers.tolist()}, classifier {prof.crm.classifier}"
    )
    print(
        f"wrote {args.out}: {crm}, anomaly threshold "
        f"{'any flagged layer' if thr is None else f'{thr:.3f}'} (n={prof.anomaly.n_threshold}), "
        f"RePCS tau {prof.repcs_tau:.3f} (n={h['repcs']['n']}); {h['data']['n_traced']} records "
        f"({h['data']['n_clean']} clean), profile hash {prof.content_hash[:16]}"
    )
    return 0


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from mnemoscope.server.app import create_app
    from mnemoscope.server.config import load_settings

    overrides = {
        k: getattr(args, k)
        for k in (
            "model",
            "adapter",
            "device",
            "dtype",
            "profile",
            "db",
            "log_key",
            "host",
            "port",
            "max_batch_size",
            "max_wait_ms",
            "queue_size",
            "threads",
            "allow_anonymous",
        )
    }
    settings = load_settings(args.config, overrides)
    if settings.device == "auto":
        settings = settings.model_copy(update={"device": None})
    engine = None
    if args.endpoint:
        from mnemoscope.cli.endpoint_args import endpoint_engine

        engine = endpoint_engine(args, settings.rule, settings.max_batch_size, settings.profile)
    app = create_app(settings, engine=engine)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level="warning" if args.quiet else "info",
        timeout_graceful_shutdown=int(settings.shutdown_grace_s) + 1,
    )
    return 0


def _hash(args: argparse.Namespace) -> int:
    from mnemoscope.server.config import hash_key

    print(hash_key(args.key))
    return 0


__all__ = ["register"]
