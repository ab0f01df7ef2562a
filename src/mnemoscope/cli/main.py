"""``mnemoscope`` entry point. Heavy modules are imported inside the commands,
so ``mnemoscope --help`` answers instantly.

This module only builds the parser and dispatches: shared flags live in
:mod:`mnemoscope.cli.options`, human output in :mod:`mnemoscope.cli.render`, and no command
imports this module back (tests/test_architecture.py forbids import cycles).

Exit codes: 0 success; 1 an error (one line on stderr; ``--debug`` shows the traceback);
2 bad command-line usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from mnemoscope import __version__
from mnemoscope.cli.options import apply_threads, configure_logging
from mnemoscope.errors import MnemoscopeError

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    from mnemoscope.cli import (
        audit_cmd,
        bench_cmd,
        crm_cmd,
        log_cmd,
        models_cmd,
        profile_cmd,
        proxy_cmd,
        radar_cmd,
        repcs_cmd,
        report_cmd,
        scar_cmd,
        serve_cmd,
        trace_cmd,
        validate_cmd,
    )

    parser = argparse.ArgumentParser(
        prog="mnemoscope",
        description="Is a language model answering from memory or from what it was given? "
        "Trace a model with and without a context and compare its internals.",
        epilog="Examples:\n"
        "  mnemoscope audit --context 'Quenmar lies on the Zorblat.' --query 'Which river is Quenmar on?'\n"
        "  mnemoscope trace --context 'Quenmar lies on the Zorblat.' --query 'Which river is Quenmar on?'\n"
        "  mnemoscope trace --input pairs.jsonl --out traces/\n"
        "  mnemoscope validate --input pairs.jsonl\n"
        "  mnemoscope models\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"mnemoscope {__version__}")
    parser.add_argument(
        "--cache-dir",
        default=None,
        metavar="DIR",
        help="cache of converted models (default: $MNEMOSCOPE_CACHE_DIR or ~/.cache/mnemoscope)",
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bars, warnings only")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in (
        audit_cmd,
        trace_cmd,
        repcs_cmd,
        crm_cmd,
        radar_cmd,
        scar_cmd,
        serve_cmd,
        log_cmd,
        proxy_cmd,
        bench_cmd,
        models_cmd,
        profile_cmd,
        report_cmd,
        validate_cmd,
    ):
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # the command as typed, for the records a command writes (results folders, reports): sys.argv
    # is another program's when main() is called in process (tests, notebooks)
    args.argv = ["mnemoscope", *(sys.argv[1:] if argv is None else argv)]
    if not args.command:
        parser.print_help()
        return 2
    configure_logging(args.quiet, args.debug)
    try:
        apply_threads(args)
        return int(args.func(args) or 0)
    except MnemoscopeError as e:
        if args.debug:
            raise
        print(f"mnemoscope: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("mnemoscope: interrupted (finished records are saved; re-run to resume)", file=sys.stderr)
        return 130
    except (OSError, RuntimeError, ValueError) as e:
        if args.debug:
            raise
        print(
            f"mnemoscope: error: {type(e).__name__}: {e} (run with --debug for the traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
