"""``mnemoscope validate``: check a JSONL file without loading a model."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser(
        "validate",
        help="check a JSONL input file (no model needed)",
        description="Check every line of a JSONL file of {id, context, query, label?} records "
        "and report each bad line with its number and field. Exit 1 if any line is bad.",
    )
    p.add_argument("--input", required=True, metavar="FILE")
    p.add_argument(
        "--default-query",
        action="store_true",
        help="records without a query continue the first 100 characters of their context",
    )
    p.add_argument("--require-label", action="store_true", help="every record must have a label")
    p.add_argument("--json", action="store_true", help="print a JSON summary")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mnemoscope.data import read_records

    records, errors = read_records(
        args.input, default_query=args.default_query, require_label=args.require_label
    )
    labels = [r.label for r in records if r.label is not None]
    summary = {
        "input": args.input,
        "valid": len(records),
        "invalid": len(errors),
        "labelled": len(labels),
        "positives": int(sum(labels)),
        "defaulted_queries": sum(r.query_defaulted for r in records),
        "errors": [e.to_dict() for e in errors],
    }
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        for e in errors:
            print(f"{args.input}: {e}", file=sys.stderr)
        print(
            f"{len(records)} valid, {len(errors)} invalid; {len(labels)} labelled "
            f"({summary['positives']} positive)"
        )
    return 1 if errors else 0
