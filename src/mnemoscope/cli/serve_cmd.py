"""``mnemoscope serve | apikey hash``: the audit service (``calibrate`` is in calibrate_cmd, registered
here; ``log ...`` is in log_cmd)."""

from __future__ import annotations

import argparse
from typing import Any

from mnemoscope.cli.endpoint_args import add_endpoint_args
from mnemoscope.cli.options import add_stop_arg, stops_from_args


def register(sub: Any) -> None:
    from mnemoscope.cli import calibrate_cmd

    calibrate_cmd.register(sub)

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
    s.add_argument(
        "--auto-calibrate",
        action="store_true",
        help="a model without a shipped or cached profile: calibrate one once (mnemoscope calibrate's "
        "defaults) and cache it under the model's fingerprint",
    )
    add_stop_arg(s)
    add_endpoint_args(s)
    s.set_defaults(func=_serve)

    k = sub.add_parser("apikey", help="API key helpers")
    ksub = k.add_subparsers(dest="key_command", metavar="ACTION", required=True)
    h = ksub.add_parser("hash", help="print the sha256 hash of a key for api_key_hashes in a config file")
    h.add_argument("key")
    h.set_defaults(func=_hash)


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
    if args.auto_calibrate and not args.profile and not args.endpoint:
        overrides["profile"] = str(_auto_profile_for(args))
    settings = load_settings(args.config, overrides)
    if settings.device == "auto":
        settings = settings.model_copy(update={"device": None})
    engine = None
    if args.endpoint:
        from mnemoscope.cli.endpoint_args import endpoint_engine

        engine = endpoint_engine(args, settings.rule, settings.max_batch_size, settings.profile)
    stops = stops_from_args(args)
    if stops is not None:  # the profile's stop sequences are the service's: another ask is refused now
        from mnemoscope.audit.profile import check_layout
        from mnemoscope.server.app import load_engine

        if engine is None:
            engine = load_engine(settings)
        check_layout(engine.profile, {"stop": list(stops)})
    app = create_app(settings, engine=engine)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level="warning" if args.quiet else "info",
        timeout_graceful_shutdown=int(settings.shutdown_grace_s) + 1,
    )
    return 0


def _auto_profile_for(args: argparse.Namespace) -> Any:
    """``serve --auto-calibrate``: the model's profile (shipped, cached, or calibrated now)."""
    from mnemoscope.cli.calibrate_cmd import auto_profile
    from mnemoscope.models import load_model

    lm = load_model(args.model or "default", adapter=args.adapter, device=args.device, dtype=args.dtype)
    return auto_profile(lm, quiet=bool(args.quiet))


def _hash(args: argparse.Namespace) -> int:
    from mnemoscope.server.config import hash_key

    print(hash_key(args.key))
    return 0


__all__ = ["register"]
