"""Where a result came from: the git commit, the exact command, the software and the machine.

Every result file mnemoscope writes (reports, leaderboards, benchmark JSONs) carries
``provenance()`` under the key ``"provenance"``, so a number can be traced to the code and the
command that produced it and re-run.

>>> p = provenance(["mnemoscope", "bench", "run"])
>>> p["command"]
'mnemoscope bench run'
>>> sorted(p)[:4]
['command', 'created', 'cwd', 'git_commit']
"""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["git_commit", "provenance"]


def git_commit(path: str | Path | None = None) -> dict[str, Any]:
    """``{"commit", "dirty"}`` of the git checkout holding ``path`` (default: this package);
    ``{"commit": None}`` outside a checkout (an installed wheel) or without git."""
    where = Path(path) if path is not None else Path(__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if commit.returncode != 0:
            return {"commit": None, "dirty": None}
        status = subprocess.run(
            ["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def provenance(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The record stored with a result (JSON-ready).

    Args:
        argv: the command line (default: ``sys.argv``, with ``python`` prepended for scripts).
    """
    if argv is None:
        argv = list(sys.argv)
        if argv and argv[0].endswith(".py"):
            argv = ["python", *argv]
    from mnemoscope import __version__

    rec: dict[str, Any] = {
        "command": shlex.join(str(a) for a in argv),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cwd": os.getcwd(),
        "git_commit": None,
        "git_dirty": None,
        "mnemoscope": __version__,
        "python": platform.python_version(),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
    }
    g = git_commit()
    rec["git_commit"], rec["git_dirty"] = g["commit"], g["dirty"]
    torch = sys.modules.get("torch")
    if torch is not None:
        rec["torch"] = str(torch.__version__)
        rec["torch_threads"] = int(torch.get_num_threads())
    return rec
