"""``mnemoscope profile show DIR|default``: the profile's validation card (how well its verdict works)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

__all__ = ["register", "run_show", "shipped_default_profile"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "profile",
        help="show an audit profile's validation card",
        description="What an audit profile was calibrated on and how well its verdict works on held-out "
        "data: the model, the calibration data, alpha and the n behind the guarantee, the held-out AUC "
        "with its CI, the realised false-flag rate, memory recall and the 3-way confusion matrix "
        "(figures the profile does not carry are shown as 'not measured').",
        epilog="Examples:\n  mnemoscope profile show default\n  mnemoscope profile show profiles/my-model --json\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    psub = p.add_subparsers(dest="profile_command", metavar="ACTION", required=True)
    show = psub.add_parser("show", help="print the card of a profile folder (or 'default')")
    show.add_argument(
        "profile", metavar="DIR", help="a profile folder (mnemoscope calibrate --out DIR), or 'default'"
    )
    show.add_argument("--json", action="store_true", help="print the card as JSON")
    show.set_defaults(func=run_show)


def shipped_default_profile() -> Path:
    """The profile shipped for the embedded default model (found without loading the model)."""
    from importlib import resources

    from mnemoscope.audit.profile import DEFAULT_PROFILES, ProfileError

    root = Path(str(resources.files(DEFAULT_PROFILES)))
    found = []
    for cand in sorted(root.iterdir()) if root.is_dir() else []:
        hp = cand / "profile.json"
        if not hp.is_file():
            continue
        try:
            model = json.loads(hp.read_text(encoding="utf-8")).get("model") or {}
        except json.JSONDecodeError:
            continue
        if "default" in (model.get("spec"), model.get("source")):
            found.append(cand)
    if len(found) != 1:
        raise ProfileError(
            f"expected one shipped profile for the default model under {root}, found {len(found)}; "
            "pass the profile folder instead of 'default'"
        )
    return found[0]


def run_show(args: argparse.Namespace) -> int:
    from mnemoscope.audit.profile import load_profile
    from mnemoscope.report.profile_card import profile_card, render_text

    path = shipped_default_profile() if args.profile == "default" else Path(args.profile)
    profile = load_profile(path, backend=None)
    from mnemoscope.audit.validation import profile_status

    card = profile_card(profile, profile.validation)  # its profile_status is the live one (load_profile)
    card["status"] = profile_status(profile)
    if args.json:
        print(json.dumps(card, indent=1))
        return 0
    st = card["status"]
    print(render_text(card))
    print(
        f"profile   {st['status']}: {st['summary']}"
        + ("" if st["ok"] else f"; every audit it backs says so ({'; '.join(st['reasons'])})")
    )
    return 0
