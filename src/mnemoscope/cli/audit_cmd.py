"""``mnemoscope audit``: did the answer come from the context or from the model's memory?

Thin: parse, build an :class:`~mnemoscope.audit.auditor.Auditor`, call it, render.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

from mnemoscope.cli.options import add_engine_args, add_model_args, add_stop_arg, stops_from_args
from mnemoscope.cli.render import render_audit, use_colour

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "audit",
        help="audit one (context, query) or a JSONL file: context, memory or mixed, token by token",
        description="Answer the query with the context, then say where each part of the answer came from: "
        "every answer token is marked context-supported, memory/prior or neutral, and the whole answer gets "
        "a verdict (context | memory | mixed | undetermined) with p_memory and its guarantee. Without "
        "--profile the embedded default model uses its shipped profile; other models need --profile "
        "(mnemoscope calibrate).",
        epilog="Examples:\n"
        "  mnemoscope audit --context 'Quenmar lies on the river Zorblat.' "
        "--query 'Which river is Quenmar on?'\n"
        "  mnemoscope audit --passage 'Quenmar lies on the river Zorblat.' --passage 'Zorblat is a river.' "
        "--query 'Which river is Quenmar on?'\n"
        "  mnemoscope audit --context ... --query ... --json\n"
        "  mnemoscope audit --input pairs.jsonl --out audits/      # resumable; DIR/results.jsonl\n"
        "  mnemoscope audit --input pairs.jsonl --out audits/ --engine ray --workers 2   # docs/ray.md\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_args(p)
    src = p.add_argument_group("input")
    src.add_argument("--context", help="the retrieved context (may be empty)")
    src.add_argument(
        "--passage",
        action="append",
        metavar="TEXT",
        help="one retrieved passage (repeat for each, in retrieval order; the context is them joined "
        "by a blank line); not with --context",
    )
    src.add_argument("--query", help="the query")
    src.add_argument("--answer", help="score this answer instead of generating one")
    src.add_argument(
        "--input",
        metavar="FILE",
        help="JSONL of {id, context | passages, query, answer?, max_new_tokens?} records",
    )
    src.add_argument("--out", metavar="DIR", help="with --input: the results folder (resumable)")
    src.add_argument("--overwrite", action="store_true", help="with --input: start the folder afresh")
    src.add_argument(
        "--report",
        action="store_true",
        help="with --input: also write DIR/report.html (as `mnemoscope report DIR`)",
    )
    src.add_argument(
        "--store-context",
        action="store_true",
        help="with --input: store each record's context in results.jsonl (default: only its SHA-256, "
        "as contexts can be large and private; not with --engine ray)",
    )
    p.add_argument(
        "--profile",
        metavar="DIR",
        help="calibration profile (default: the shipped one, or the one cached for this model)",
    )
    p.add_argument(
        "--auto-calibrate",
        action="store_true",
        help="a model without a shipped or cached profile: calibrate one once (mnemoscope calibrate's "
        "defaults; the time is estimated first) and cache it under the model's fingerprint",
    )
    p.add_argument(
        "--rule",
        choices=["combined", "repcs", "crm-anomaly"],
        default="combined",
        help="memory rule: the calibrated combination (default), the RePCS paper rule (Z < tau), or CRM's "
        "LTS anomaly rule",
    )
    p.add_argument(
        "--max-new-tokens", "-T", type=int, default=None, help="answer length (default: profile's)"
    )
    p.add_argument("--batch-size", type=int, default=8)
    add_stop_arg(p)
    add_engine_args(p)
    from mnemoscope.cli.endpoint_args import add_endpoint_args

    add_endpoint_args(p, closed_book=True)
    p.add_argument("--json", action="store_true", help="print the audit as one JSON object")
    p.add_argument(
        "--color",
        choices=["auto", "always", "never"],
        default="auto",
        help="colour the answer (auto: on a terminal unless NO_COLOR is set)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mnemoscope.errors import InputError

    passages = getattr(args, "passage", None)
    single = args.context is not None or args.query is not None or passages is not None
    if args.input and single:
        raise InputError("give either --input FILE or --context/--passage/--query, not both")
    if args.context is not None and passages is not None:
        raise InputError(
            "give either --context or --passage (the context is the passages joined), not both",
            field="passage",
        )
    if not args.input and args.query is None:
        raise InputError(
            "give --query (and --context or --passage), or --input FILE --out DIR", field="query"
        )
    if passages is not None:  # before any model is loaded: passages[i] counts the flags from 0
        from mnemoscope.audit.requests import check_passages

        check_passages(passages)
    if args.input and not args.out:
        raise InputError("--input needs --out DIR", field="out")
    if getattr(args, "report", False) and not args.input:
        raise InputError("--report needs --input FILE --out DIR (a batch audit)", field="report")
    if args.store_context and not args.input:
        raise InputError(
            "--store-context needs --input FILE --out DIR (a batch audit)", field="store_context"
        )
    if args.store_context and args.engine == "ray":
        raise InputError(
            "--store-context is not supported with --engine ray (its rows store the context's SHA-256 only)",
            field="store_context",
        )

    from mnemoscope.audit.auditor import AuditFailure, run_audit_file
    from mnemoscope.integrations import otel

    otel.install()  # audit spans when OTEL_EXPORTER_OTLP_* is set; nothing otherwise
    if args.endpoint and getattr(args, "closed_book_test", False):
        from mnemoscope.cli.endpoint_args import closed_book_test

        return closed_book_test(args)
    if args.input and args.engine == "ray" and not args.endpoint:
        return _report(args, _run_ray(args))
    # one body for both backends: the model in process or behind --endpoint only changes the auditor
    with _auditor(args) as auditor:
        where = f" over {args.endpoint}" if args.endpoint else ""
        if args.input:
            summary = run_audit_file(
                auditor,
                args.input,
                args.out,
                progress=not args.quiet,
                overwrite=args.overwrite,
                command=getattr(args, "argv", None),
                store_context=args.store_context,
            )
            print(
                f"audited {summary['audited']} records{where} into {args.out}/results.jsonl "
                f"({summary['skipped_done']} already done, {summary['errors']} errors in {args.out}/errors.jsonl)"
            )
            return _report(args, 0)
        (res,) = auditor.audit([_request(args)])
    if isinstance(res, AuditFailure):
        raise InputError(res.message, field=res.field)
    d = res.to_dict()
    if args.json:
        print(json.dumps(d, ensure_ascii=False))
    else:
        print(render_audit(d, colour=use_colour(args.color, sys.stdout)))
        if args.endpoint:
            print(f"Backend: endpoint {d['endpoint']} ({d['endpoint_method']})")
    return 0


def _request(args: argparse.Namespace) -> Any:
    """The one request of ``--context``/``--passage`` and ``--query``."""
    from mnemoscope.audit.requests import AuditRequest

    kw = {"answer": args.answer, "max_new_tokens": args.max_new_tokens}
    if getattr(args, "passage", None) is not None:
        return AuditRequest.from_passages(args.passage, args.query, **kw)
    return AuditRequest(args.context or "", args.query, **kw)


@contextlib.contextmanager
def _auditor(args: argparse.Namespace) -> Iterator[Any]:
    """The command's auditor: the model behind ``--endpoint`` (its endpoint profile; the client
    closed afterwards) or the one ``--model`` loads (its profile: given, shipped, or calibrated
    once with ``--auto-calibrate``)."""
    from mnemoscope.audit.auditor import Auditor
    from mnemoscope.cli.options import load_from_args

    if args.endpoint:
        from mnemoscope.cli.endpoint_args import client_from_args, endpoint_auditor

        with client_from_args(args) as client:
            yield endpoint_auditor(args, client, args.rule, args.batch_size)
        return
    lm = load_from_args(args)
    profile = args.profile
    if profile is None and getattr(args, "auto_calibrate", False):
        from mnemoscope.cli.calibrate_cmd import auto_profile

        profile = auto_profile(lm, quiet=args.quiet)
    yield Auditor.for_model(
        lm, profile, rule=args.rule, batch_size=args.batch_size, layout=_asked_layout(args)
    )


def _asked_layout(args: argparse.Namespace) -> dict[str, Any]:
    """What the command line asks beyond the profile (refused by the Auditor when it differs)."""
    asked: dict[str, Any] = {}
    if args.max_new_tokens is not None:
        asked["max_new_tokens"] = args.max_new_tokens
    stops = stops_from_args(args)
    if stops is not None:
        asked["stop"] = list(stops)
    return asked


def _report(args: argparse.Namespace, rc: int) -> int:
    """With ``--report`` after a successful batch: write DIR/report.html (cli/report_cmd.py)."""
    if rc != 0 or not getattr(args, "report", False) or not args.input:
        return rc
    from mnemoscope.cli.report_cmd import build_report

    written, _, run = build_report(args.out, profile=args.profile, argv=getattr(args, "argv", None))
    print(f"report: {written} ({len(run.rows)} answers, {len(run.errors)} errors)")
    return rc


def _run_ray(args: argparse.Namespace) -> int:
    from mnemoscope.cli.options import ray_model_from_args, ray_options_from_args
    from mnemoscope.pipelines.ray import ray_audit_file

    summary = ray_audit_file(
        args.input,
        args.out,
        model=ray_model_from_args(args),
        profile=args.profile,
        rule=args.rule,
        options=ray_options_from_args(args),
        overwrite=args.overwrite,
        command=getattr(args, "argv", None),
    )
    eng = summary["engine"]
    print(
        f"audited {summary['audited']} records into {args.out}/results.jsonl (+ results.parquet) with "
        f"{eng['workers']} Ray worker(s) in {eng['seconds']:.1f} s "
        f"({summary['skipped_done']} already done, {summary['errors']} errors in {args.out}/errors.jsonl)"
    )
    return 0
