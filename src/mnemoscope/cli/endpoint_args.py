"""``--endpoint URL``: the flags and command bodies that audit a model behind an inference server.

Shared by ``mnemoscope audit``, ``repcs calibrate|score|eval``, ``calibrate`` and ``serve``
(each command's module adds the flags and hands over to a function here when ``--endpoint``
is given). docs/endpoint.md describes the method.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = [
    "add_endpoint_args",
    "add_endpoint_method_arg",
    "client_from_args",
    "closed_book_test",
    "endpoint_auditor",
    "endpoint_engine",
    "repcs_calibrate_inputs",
    "repcs_eval_inputs",
    "repcs_score_endpoint",
    "template_spec",
]


def add_endpoint_args(
    p: argparse.ArgumentParser, *, prompts: bool = False, closed_book: bool = False
) -> None:
    """The endpoint flags; ``prompts`` adds the ones that choose how prompts are built (commands
    that calibrate: audits reuse the profile's)."""
    g = p.add_argument_group("endpoint (a model behind an OpenAI-compatible server; docs/endpoint.md)")
    g.add_argument(
        "--endpoint",
        metavar="URL",
        default=None,
        help="the server's OpenAI base URL ending in /v1 (e.g. http://127.0.0.1:8080/v1): audit the model "
        "it serves through completions log-probs instead of loading one",
    )
    g.add_argument(
        "--endpoint-model", metavar="NAME", default=None, help="served model name (default: first listed)"
    )
    g.add_argument(
        "--api-key-env",
        metavar="VAR",
        default=None,
        help="environment variable holding the API key (never logged)",
    )
    g.add_argument("--endpoint-timeout", type=float, default=120.0, metavar="S", help="seconds per request")
    g.add_argument(
        "--endpoint-retries", type=int, default=2, metavar="N", help="retries (backoff) on 5xx/429/time-out"
    )
    g.add_argument("--endpoint-concurrency", type=int, default=2, metavar="N", help="requests in flight")
    add_endpoint_method_arg(g)
    if closed_book:
        g.add_argument(
            "--closed-book-test",
            action="store_true",
            help="chat-only APIs (no prompt log-probs): compare the answers generated with and without the "
            "context instead -- a different, weaker test, no verdict (docs/endpoint.md)",
        )
    if prompts:
        g.add_argument(
            "--chat-template",
            metavar="SRC",
            default=None,
            help="how chat prompts are rendered client-side: 'default' (the embedded model's GGUF), a .gguf "
            "file, a jinja file, or 'none' (plain prompts; llama-cpp-python then refuses, see docs)",
        )
        g.add_argument(
            "--eos-token", metavar="TEXT", default=None, help="the EOS token's text (default: from the GGUF)"
        )
        g.add_argument(
            "--top-k", type=int, default=20, help="alternatives per position over the endpoint (default 20)"
        )


def add_endpoint_method_arg(g: Any) -> None:
    """``--endpoint-method`` (also used by ``mnemoscope proxy``)."""
    g.add_argument(
        "--endpoint-method",
        choices=("auto", "positions", "grammar", "native", "echo"),
        default="auto",
        help="how answer positions are scored (docs/endpoint.md): auto (default: native on llama.cpp's "
        "llama-server, grammar on llama-cpp-python, falling back to the next sound path when one refuses "
        "a record), or one path alone",
    )


def client_from_args(args: argparse.Namespace) -> Any:
    from mnemoscope.models.endpoint import EndpointClient, EndpointConfig

    return EndpointClient(
        EndpointConfig(
            args.endpoint,
            model=args.endpoint_model,
            api_key_env=args.api_key_env,
            timeout=args.endpoint_timeout,
            retries=args.endpoint_retries,
            concurrency=args.endpoint_concurrency,
            method=getattr(args, "endpoint_method", "auto"),
        )
    )


def template_spec(args: argparse.Namespace) -> str | None:
    """The ``--chat-template`` source under ``--chat`` (``None``: plain prompts)."""
    from mnemoscope.errors import InputError

    chat: Any = getattr(args, "chat", "auto")
    if isinstance(chat, bool):
        chat = "on" if chat else "off"
    spec = args.chat_template
    if chat == "off":
        return None
    if chat == "on" and spec in (None, "none"):
        raise InputError(
            "--chat on over an endpoint needs --chat-template (the server does not expose its template)",
            field="chat_template",
        )
    return None if spec == "none" else spec


def _pair_config(args: argparse.Namespace) -> Any:
    from mnemoscope.trace.endpoint import EndpointPairConfig, load_chat_template
    from mnemoscope.trace.templates import PromptBuilder

    tpl = load_chat_template(template_spec(args), eos_text=args.eos_token)
    builder = PromptBuilder(template=args.template, chat=tpl.chat_template is not None)
    return EndpointPairConfig(
        builder=builder, template=tpl, max_new_tokens=args.max_new_tokens, top_k=args.top_k
    )


def _report_failures(failures: list[dict[str, Any]], where: str) -> None:
    for f in failures:
        print(f"mnemoscope: {where}: record {f['id']}: {f['message']}", file=sys.stderr)


# -- audit -------------------------------------------------------------------------------------------


def endpoint_auditor(args: argparse.Namespace, client: Any, rule: str, batch_size: int) -> Any:
    """The endpoint :class:`~mnemoscope.audit.auditor.Auditor` of ``--profile`` (an endpoint profile)."""
    from mnemoscope.audit.auditor import Auditor
    from mnemoscope.audit.profile import load_endpoint_profile
    from mnemoscope.errors import InputError

    if not args.profile:
        raise InputError(
            "--endpoint needs --profile DIR: an endpoint profile from `mnemoscope calibrate --endpoint URL --out DIR` "
            "(the shipped profile needs hidden states and the in-process weights)",
            field="profile",
        )
    return Auditor.from_endpoint(
        client,
        load_endpoint_profile(args.profile),
        rule=rule,  # type: ignore[arg-type]
        batch_size=batch_size,
    )


def closed_book_test(args: argparse.Namespace) -> int:
    """``mnemoscope audit --endpoint URL --closed-book-test``: the weaker test of a chat-only API."""
    from mnemoscope.errors import InputError
    from mnemoscope.pipelines.closed_book import closed_book_comparison

    if args.input or args.query is None:
        raise InputError("--closed-book-test takes one --context and --query")
    with client_from_args(args) as client:
        print(json.dumps(closed_book_comparison(client, args.context or "", args.query), ensure_ascii=False))
    return 0


def endpoint_engine(args: argparse.Namespace, rule: str, batch_size: int, profile: str | None = None) -> Any:
    """The auditor ``mnemoscope serve --endpoint`` runs (its client lives as long as the server);
    ``profile``: the settings' profile when ``--profile`` is not given."""
    if not args.profile and profile:
        args.profile = profile
    return endpoint_auditor(args, client_from_args(args), rule, batch_size)


# -- repcs ---------------------------------------------------------------------------------------------


def _traced(args: argparse.Namespace, client: Any, config: Any) -> tuple[list[Any], list[Any]]:
    from mnemoscope.audit.tracing import trace_records
    from mnemoscope.data import read_records
    from mnemoscope.errors import InputError

    records, errors = read_records(args.input, on_error=args.on_error)
    for e in errors:
        print(f"mnemoscope: skipped {args.input}: {e}", file=sys.stderr)
    if not records:
        raise InputError(f"{args.input}: no valid records")
    traced = trace_records(client, records, config, progress=not args.quiet, on_error=args.on_error)
    _report_failures(traced.failures, "skipped")
    if not traced.traces:
        raise InputError(f"no record could be traced over {client.endpoint}")
    return traced.records, traced.traces


def _detector(args: argparse.Namespace) -> Any:
    from mnemoscope.detectors.repcs import RePCS

    if args.estimator == "full":
        print(
            "mnemoscope: over an endpoint Z is the top-k estimate (full-vocabulary KL is not available)",
            file=sys.stderr,
        )
    return RePCS(
        alpha=args.alpha,
        aggregate=args.aggregate,
        direction=args.direction,
        estimator="topk",
        k=args.k or args.top_k,
        delta=args.delta,
        max_steps=None,
    )


def _identity(client: Any, config: Any) -> tuple[dict[str, Any], Any]:
    from mnemoscope.audit.tracing import endpoint_model_info

    caps = client.require_teacher_forcing()
    fp = client.fingerprint()
    return endpoint_model_info(client, fp), caps


def _pc_dict(config: Any) -> dict[str, Any]:
    return {**config.builder.to_dict(), "max_new_tokens": config.max_new_tokens, "top_k": config.top_k}


def _endpoint_inputs(args: argparse.Namespace) -> tuple[dict[str, Any], Any, Any]:
    """What ``repcs calibrate`` and ``repcs eval`` need over the endpoint: the records traced through
    it, the detector and the served model's identity; with the pair settings and its capabilities."""
    config = _pair_config(args)
    with client_from_args(args) as client:
        model, caps = _identity(client, config)
        records, traces = _traced(args, client, config)
    inputs = {
        "records": records,
        "traces": traces,
        "detector": _detector(args),
        "model": model,
        "pair_config": _pc_dict(config),
    }
    return inputs, config, caps


def repcs_calibrate_inputs(args: argparse.Namespace) -> dict[str, Any]:
    """``repcs calibrate --endpoint``: what the one calibrate body of ``repcs_cmd`` needs, traced over
    the endpoint (``records``, ``traces``, ``detector``, ``model``, ``pair_config``, the calibration
    record's extra fields: the chat template, the backend and its method)."""
    inputs, config, caps = _endpoint_inputs(args)
    return {
        **inputs,
        "record_extra": {
            "chat_template": config.template.to_dict(),
            "backend": "endpoint",
            "endpoint_method": caps.method,
        },
        "over": f"top-k Z over {args.endpoint}, ",
    }


def repcs_score_endpoint(args: argparse.Namespace) -> dict[str, Any]:
    """``repcs score --endpoint``: the same results file as in-process (``repcs_cmd`` reports it)."""
    from mnemoscope.pipelines.repcs import score_file_endpoint

    with client_from_args(args) as client:
        return score_file_endpoint(
            client,
            args.calibration,
            args.input,
            args.out,
            on_error=args.on_error,
            progress=not args.quiet,
            check_model=not args.force,
        )


def repcs_eval_inputs(args: argparse.Namespace) -> dict[str, Any]:
    """``repcs eval --endpoint``: what the one eval path of ``repcs_cmd`` needs, traced over the endpoint:
    ``records``, ``traces``, ``detector``, ``model``, ``pair_config``, the report's and the rows' extra
    fields (the backend and what it cannot measure) and the backend's name for messages."""
    from mnemoscope.errors import InputError

    if args.selfcheck:
        raise InputError("--selfcheck samples the model locally; it is not available with --endpoint")
    inputs, _, caps = _endpoint_inputs(args)
    backend = {"backend": "endpoint", "endpoint_method": caps.method}
    return {
        **inputs,
        "report_extra": {
            **backend,
            "unavailable": ["full-vocabulary KL (the report's estimator is top-k)", "hidden-state detectors"],
        },
        "row_extra": backend,
        "over": f" over {args.endpoint} ({caps.method}, top-k k={args.k or args.top_k})",
    }
