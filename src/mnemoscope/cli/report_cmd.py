"""``mnemoscope report DIR``: a batch audit's results folder as one self-contained HTML page
(or ``--format md``: a short Markdown summary for a pull-request comment)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["build_report", "register", "run"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "report",
        help="an HTML (or Markdown) report of a batch audit's results folder",
        description="Read the results folder of `mnemoscope audit --input FILE --out DIR` and write ONE "
        "self-contained HTML file (no network): the folder's runs (command, commit, model, profile, time, "
        "from meta.json), answers by source, the p_memory "
        "distribution with the memory threshold, every answer in a table that sorts and filters, each "
        "answer highlighted (context / memory / neutral words) with its evidence and guarantee, and the "
        "errors. A torn last line, missing fields of an older version or an empty folder are listed as "
        "skipped; the report still renders.",
        epilog="Examples:\n"
        "  mnemoscope report audits/                       # -> audits/report.html\n"
        "  mnemoscope report old-audits/ --input pairs.jsonl   # a folder of an older version: queries from FILE\n"
        "  mnemoscope report audits/ --format md           # Markdown summary on stdout\n"
        "  mnemoscope audit --input pairs.jsonl --out audits/ --report   # audit, then report\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("folder", metavar="DIR", help="the results folder (audit --out DIR)")
    p.add_argument(
        "--input",
        metavar="FILE",
        help="optional: the audit's input JSONL, for folders of older versions whose results store no query "
        "(records that differ from the audited query or context digest are noted)",
    )
    p.add_argument("--format", choices=("html", "md"), default="html", help="html (default) or md")
    p.add_argument(
        "--out",
        metavar="FILE",
        help="where to write (default: DIR/report.html; for md, stdout unless --out is given)",
    )
    p.add_argument(
        "--profile",
        metavar="DIR",
        help="the audit's profile folder, to show its validation card (default: the shipped profile "
        "when its hash matches the run's)",
    )
    p.set_defaults(func=run)


def _profile_card(meta: dict[str, Any], profile: str | None) -> dict[str, Any] | None:
    """The card of the run's profile: ``--profile DIR``, else the shipped default profile when
    its hash is the one in meta.json; ``None`` when neither is the run's profile."""
    from mnemoscope.audit.profile import load_profile
    from mnemoscope.cli.profile_cmd import shipped_default_profile
    from mnemoscope.errors import InputError
    from mnemoscope.report.profile_card import profile_card, read_validation

    try:
        path = Path(profile) if profile else shipped_default_profile()
        prof = load_profile(path)
    except InputError:
        if profile:
            raise
        return None
    if meta.get("profile_hash") and prof.content_hash != meta["profile_hash"]:
        if profile:
            raise InputError(
                f"the profile {path} (hash {prof.content_hash[:12]}) is not the one of this run "
                f"(hash {str(meta['profile_hash'])[:12]} in meta.json)",
                field="profile",
            )
        return None
    if not meta.get("profile_hash") and not profile:
        return None
    return profile_card(prof, read_validation(prof))


def build_report(
    folder: str | Path,
    *,
    fmt: str = "html",
    out: str | Path | None = None,
    input_path: str | Path | None = None,
    profile: str | None = None,
    argv: list[str] | None = None,
) -> tuple[Path | None, str | None, Any]:
    """Write the report of ``folder``; returns ``(written path or None, Markdown text or None, run)``."""
    from mnemoscope.provenance import provenance
    from mnemoscope.report.batch import load_run, render_markdown, write_report

    run_ = load_run(folder, input_path=input_path)
    if fmt == "md" and out is None:
        return None, render_markdown(run_), run_
    target = Path(out) if out else Path(folder) / ("report.md" if fmt == "md" else "report.html")
    card = _profile_card(run_.meta, profile) if fmt == "html" else None
    prov = provenance(argv if argv is not None else ["mnemoscope", *sys.argv[1:]])
    written = write_report(run_, target, fmt=fmt, profile_card=card, provenance=prov)
    return written, None, run_


def run(args: argparse.Namespace) -> int:
    written, md, run_ = build_report(
        args.folder,
        fmt=args.format,
        out=args.out,
        input_path=args.input,
        profile=args.profile,
        argv=getattr(args, "argv", None),
    )
    if md is not None:
        sys.stdout.write(md)
        return 0
    counts = ", ".join(f"{n} {s}" for s, n in run_.counts.items()) or "no answers"
    extra = f"; {len(run_.skipped)} lines skipped" if run_.skipped else ""
    print(f"wrote {written} ({len(run_.rows)} answers: {counts}; {len(run_.errors)} errors{extra})")
    if args.format == "html" and written is not None:
        print(f"open it in a browser: {written.resolve().as_uri()}")
    return 0
