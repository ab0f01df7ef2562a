"""``mnemoscope trace``: paired traces of one (context, query) or of a JSONL file."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from mnemoscope.cli.options import add_chat_arg, add_engine_args, add_model_args, chat_for, load_from_args
from mnemoscope.cli.render import render_trace_summary


def register(sub: Any) -> None:
    p = sub.add_parser(
        "trace",
        help="trace a model with and without a context (one pair, or a JSONL file)",
        description="Generate an answer with the context, teacher-force it without the context, and compare "
        "the two paths: per-step KL, entropies, hidden states at every layer.\n\n"
        "One pair:   mnemoscope trace --context TEXT --query TEXT [--json]\n"
        "A file:     mnemoscope trace --input pairs.jsonl --out traces/   (resumable)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_args(p)
    one = p.add_argument_group("one pair")
    one.add_argument("--context", default=None, help="the retrieved context (empty = both paths identical)")
    one.add_argument("--query", default=None, help="the question or prefix")
    one.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    batch = p.add_argument_group("a JSONL file of {id, context, query, label?}")
    batch.add_argument("--input", metavar="FILE")
    batch.add_argument("--out", metavar="DIR", help="trace folder (re-running resumes)")
    batch.add_argument("--batch-size", type=int, default=8)
    batch.add_argument(
        "--on-error",
        choices=["skip", "raise"],
        default="skip",
        help="skip bad records (listed in DIR/errors.jsonl) or stop at the first",
    )
    batch.add_argument(
        "--default-query",
        action="store_true",
        help="records without a query continue the first 100 characters of their context",
    )
    batch.add_argument("--overwrite", action="store_true", help="discard traces already in --out")
    add_engine_args(p)
    s = p.add_argument_group("prompt and generation")
    s.add_argument(
        "--template",
        default="A",
        help="CRM template A (standard), B (document), C (reference), D (instruction) (default: A)",
    )
    s.add_argument(
        "--task",
        default="plain",
        choices=["plain", "continuation", "summarization", "qa"],
        help="how the query is phrased (CRM appendix T; default: plain)",
    )
    add_chat_arg(s)
    s.add_argument(
        "--max-new-tokens", "-T", type=int, default=32, help="aligned generated positions (default: 32)"
    )
    s.add_argument("--top-k", type=int, default=20, help="top tokens kept per step (default: 20)")
    s.add_argument(
        "--no-answer-without",
        action="store_true",
        help="skip the greedy no-context answer (halves generation cost)",
    )
    p.set_defaults(func=run)


def _config(args: argparse.Namespace, lm: Any = None):  # type: ignore[no-untyped-def]
    """The pair config; ``--chat auto`` is decided once ``lm`` is loaded (off before, for validation)."""
    from mnemoscope.trace import PairConfig, PromptBuilder

    chat = chat_for(args, lm) if lm is not None else args.chat == "on"
    return PairConfig(
        builder=PromptBuilder(template=args.template, task=args.task, chat=chat),
        max_new_tokens=args.max_new_tokens,
        answer_without=not args.no_answer_without,
        top_k=args.top_k,
    )


def run(args: argparse.Namespace) -> int:
    from mnemoscope.errors import InputError

    if args.input and (args.context is not None or args.query is not None):
        raise InputError("use either --input/--out or --context/--query, not both")
    if args.input:
        if not args.out:
            raise InputError("--input needs --out DIR (where traces are written)")
        return _run_batch(args)
    if args.query is None:
        raise InputError("give --query (and usually --context), or --input FILE --out DIR")
    if args.batch_size < 1:
        raise InputError("--batch-size must be >= 1")
    return _run_one(args)


def _run_batch(args: argparse.Namespace) -> int:
    from mnemoscope.data import read_records
    from mnemoscope.errors import InputError
    from mnemoscope.trace.pipeline import run_pairs

    if args.batch_size < 1:
        raise InputError("--batch-size must be >= 1")
    config = _config(args)
    records, errors = read_records(args.input, default_query=args.default_query, on_error=args.on_error)
    for e in errors:
        print(f"mnemoscope: skipped {args.input}: {e}", file=sys.stderr)
    if not records:
        raise InputError(f"{args.input}: no valid records")
    if args.engine == "ray":
        summary = _ray_pairs(args, records, errors)
    else:
        lm = load_from_args(args)
        config = _config(args, lm)
        summary = run_pairs(
            lm,
            records,
            args.out,
            config=config,
            batch_size=args.batch_size,
            input_errors=errors,
            on_error=args.on_error,
            overwrite=args.overwrite,
            progress=not args.quiet,
        )
    for err in summary.errors[len(errors) :]:
        print(
            f"mnemoscope: skipped line {err['line']} (id {err['id']}): "
            + (f"field '{err['field']}': " if err["field"] else "")
            + err["message"],
            file=sys.stderr,
        )
    print(
        f"{summary.n_traced} traced, {summary.n_already_done} already done, {summary.n_errors} skipped "
        f"-> {args.out} ({summary.seconds:.1f} s)"
    )
    if summary.n_errors:
        print(
            f"mnemoscope: {summary.n_errors} record(s) skipped; see {args.out}/errors.jsonl", file=sys.stderr
        )
    return 0


def _ray_pairs(args: argparse.Namespace, records: Any, errors: Any) -> Any:
    import functools

    from mnemoscope.cli.options import ray_model_from_args, ray_options_from_args
    from mnemoscope.pipelines.ray import ray_run_pairs

    return ray_run_pairs(
        records,
        args.out,
        config=functools.partial(_config, args),  # decided by each actor once its model is loaded
        model=ray_model_from_args(args),
        input_errors=errors,
        on_error=args.on_error,
        overwrite=args.overwrite,
        options=ray_options_from_args(args),
    )


def _run_one(args: argparse.Namespace) -> int:
    import numpy as np

    from mnemoscope.trace import PairItem, Tracer, trace_pairs

    _config(args)  # bad settings fail before the model loads
    lm = load_from_args(args)
    config = _config(args, lm)
    item = PairItem(id="cli", context=args.context or "", query=args.query)
    pt = trace_pairs(Tracer(lm, batch_size=1), [item], config)[0]
    disp = np.linalg.norm(pt.displacement, axis=-1) if pt.h_with is not None else None
    tok = lm.tokenizer
    payload = {
        "model": lm.info.name,
        "model_info": lm.info.to_dict(),
        "n_layers": lm.info.n_layers,
        "hidden_size": lm.info.hidden_size,
        "template": config.to_dict(),
        "prompt_with_context": pt.prompt_with,
        "prompt_without_context": pt.prompt_without,
        "identical_prompts": pt.identical_prompts,
        "answer_with_context": pt.answer_with,
        "answer_without_context": pt.answer_without,
        "answer_tokens": tok.convert_ids_to_tokens(pt.answer_ids.tolist()),
        "stopped_at_eos": pt.stopped_at_eos,
        "n_steps": pt.n_steps,
        "kl_per_step": [float(x) for x in pt.kl_steps],
        "kl_rev_per_step": [float(x) for x in pt.kl_rev_steps],
        "kl_sum": pt.kl_sum,
        "kl_mean": pt.kl_mean,
        "entropy_with_per_step": [float(x) for x in pt.entropy_with],
        "entropy_without_per_step": [float(x) for x in pt.entropy_without],
        "displacement_norm_per_layer": [float(x) for x in disp] if disp is not None else None,
    }
    if args.json:
        print(json.dumps(payload))
        return 0
    print(render_trace_summary(payload, pt))
    return 0
