"""``mnemoscope proxy --upstream URL``: an OpenAI-compatible front that audits every answer.

Thin: parse, build the endpoint auditor and the log store, run
:func:`mnemoscope.server.proxy.create_proxy_app` with uvicorn. docs/proxy.md.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "proxy",
        help="OpenAI-compatible audit proxy in front of an inference server (answers unchanged, audits logged)",
        description="Forward /v1/chat/completions and /v1/completions (and every other route) to --upstream "
        "unchanged, return the upstream's answer unchanged, and audit it through the endpoint backend on the "
        "application's own prompt: its messages as sent, and the same messages with only the retrieved context "
        "removed. Where the context is: with a profile calibrated on the app's prompt (calibrate --prompt), "
        "by its {context} placeholder (a request that differs from that prompt is marked 'not the "
        "calibrated prompt'); else an `mnemoscope` object in the request body ({'context': TEXT | "
        "{'message': I, 'start': S, 'end': E}}), --context-role, or by default <context>...</context> tags or a "
        "'Context:' block in the last user message or the system prompt (docs/proxy.md). The audit is written to "
        "the tamper-evident log (--db), returned in the X-Mnemoscope-Audit header and in an extra `mnemoscope` "
        "field of the JSON answer. Streams pass through as they come; the verdict follows [DONE] as an "
        "`event: mnemoscope` (OpenAI clients ignore it) and is logged (GET /mnemoscope/audits/<id>).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Example:\n"
        "  mnemoscope proxy --upstream http://127.0.0.1:8080/v1 --profile prof/ --port 8090\n"
        "  # then point the OpenAI client at http://127.0.0.1:8090/v1\n",
    )
    p.add_argument("--upstream", required=True, metavar="URL", help="the inference server's /v1 base URL")
    p.add_argument(
        "--profile", required=True, metavar="DIR", help="endpoint profile (mnemoscope calibrate --endpoint)"
    )
    p.add_argument(
        "--audit-endpoint",
        metavar="URL",
        default=None,
        help="audit through this server instead of the upstream (same model; e.g. a llama.cpp copy of it)",
    )
    p.add_argument("--endpoint-model", metavar="NAME", default=None, help="served model name for the audit")
    p.add_argument(
        "--api-key-env", metavar="VAR", default=None, help="API key variable for the audit requests"
    )
    p.add_argument(
        "--upstream-api-key-env",
        metavar="VAR",
        default=None,
        help="replace the client's Authorization with this variable's key when forwarding",
    )
    p.add_argument(
        "--context-role",
        metavar="ROLE",
        default=None,
        help="chat role whose (single) message is the context, when a request names none",
    )
    p.add_argument(
        "--query-role", metavar="ROLE", default="user", help="chat role of the query (its last message)"
    )
    p.add_argument("--rule", choices=["combined", "repcs"], default="combined")
    p.add_argument(
        "--db", default="mnemoscope-proxy.db", metavar="URL_OR_PATH", help="SQLite path or postgresql:// URL"
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8090)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per upstream request")
    p.add_argument("--no-header", action="store_true", help="do not add the X-Mnemoscope-Audit header")
    p.add_argument(
        "--audit-queue",
        type=int,
        default=16,
        metavar="N",
        help="audits in flight at most (running + waiting); beyond it an answer passes with its audit "
        "'skipped' (shed, logged)",
    )
    p.add_argument("--audit-workers", type=int, default=1, metavar="N", help="audits running at once")
    p.add_argument(
        "--accept-layout",
        action="append",
        default=[],
        metavar="LAYOUT",
        help="audit this context layout (user, system, prompt, message:ROLE) although the profile was not "
        "calibrated on it (recorded as uncalibrated); repeatable",
    )
    p.add_argument(
        "--audit-wait",
        type=float,
        default=None,
        metavar="S",
        help="a JSON answer waits at most S seconds for its audit, then returns with status 'pending' "
        "(the audit is logged when done); default: wait for the verdict",
    )
    p.add_argument(
        "--no-audit",
        action="store_true",
        help="forward only: nothing is audited or logged (to measure the proxy's own cost)",
    )
    p.add_argument(
        "--no-stream-verdict",
        action="store_true",
        help="do not append the `event: mnemoscope` verdict to streams (the audit is still logged)",
    )
    from mnemoscope.cli.endpoint_args import add_endpoint_method_arg

    add_endpoint_method_arg(p)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    import uvicorn

    from mnemoscope.audit.auditor import Auditor
    from mnemoscope.audit.profile import load_endpoint_profile
    from mnemoscope.models.endpoint import EndpointClient, EndpointConfig
    from mnemoscope.server.proxy import ProxySettings, create_proxy_app
    from mnemoscope.server.storage import open_store

    client = EndpointClient(
        EndpointConfig(
            args.audit_endpoint or args.upstream,
            model=args.endpoint_model,
            api_key_env=args.api_key_env,
            timeout=args.timeout,
            method=args.endpoint_method,
        )
    )
    auditor = Auditor.from_endpoint(client, load_endpoint_profile(args.profile), rule=args.rule)
    store = open_store(args.db)
    app = create_proxy_app(
        ProxySettings(
            upstream=args.upstream,
            context_role=args.context_role,
            query_role=args.query_role,
            upstream_api_key_env=args.upstream_api_key_env,
            timeout=args.timeout,
            header=not args.no_header,
            audit_queue=args.audit_queue,
            audit_workers=args.audit_workers,
            accept_layouts=tuple(args.accept_layout),
            stream_verdict=not args.no_stream_verdict,
            audit=not args.no_audit,
            audit_wait=args.audit_wait,
        ),
        auditor=auditor,
        store=store,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning" if args.quiet else "info")
    return 0
