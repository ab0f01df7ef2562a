"""Run a command and record how it ran: what ``calibration_results.py record`` reads.

Usage:
    python benchmarks/timed_run.py NAME RUN_DIR -- COMMAND [ARGS...]

Writes ``RUN_DIR/command.txt``, ``RUN_DIR/run_start.json`` (name, UTC start, ``uptime`` line with
the load average, the number of python processes running, the git commit) before the command and
``RUN_DIR/run_end.json`` (end, exit code, wall seconds, load, python processes) after it; the
command's stdout/stderr go to ``RUN_DIR/stdout.txt`` / ``stderr.txt``. Exits with the command's
exit code.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.rstrip("\n")


def _python_jobs() -> int:
    out = subprocess.run(["ps", "-eo", "comm"], capture_output=True, text=True).stdout.split()
    return sum(1 for c in out if c.startswith("python") or c in ("mnemoscope", "llama-server"))


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    name, run_dir, cmd = argv[0], Path(argv[1]), argv[3:]
    run_dir.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    (run_dir / "command.txt").write_text(shlex.join(cmd) + "\n")
    start = {
        "name": name,
        "start": _now(),
        "uptime_start": _uptime(),
        "git_commit": commit,
        "jobs_start": _python_jobs(),
    }
    (run_dir / "run_start.json").write_text(json.dumps(start, indent=1) + "\n")
    t0 = time.perf_counter()
    with open(run_dir / "stdout.txt", "w") as out, open(run_dir / "stderr.txt", "w") as err:
        rc = subprocess.run(cmd, stdout=out, stderr=err).returncode
    end = {
        "end": _now(),
        "rc": rc,
        "wall_seconds": time.perf_counter() - t0,
        "uptime_end": _uptime(),
        "jobs_end": _python_jobs(),
    }
    (run_dir / "run_end.json").write_text(json.dumps(end, indent=1) + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
