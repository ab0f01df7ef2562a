"""The README's example output is what its main command prints on the embedded default model."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.real_model

ROOT = Path(__file__).resolve().parents[1]
_NUM = re.compile(r"-?\d+\.\d+")


def _readme_command_and_output() -> tuple[list[str], list[str]]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    cmd = re.search(r"bash scripts/setup\.sh && (mnemoscope audit [^\n]+)", readme)
    assert cmd, "the README's first command no longer runs `mnemoscope audit`"
    block = re.search(r"The first command ends with the audit.*?```\n(.*?)```", readme, re.S)
    assert block, "the README's example output block is missing"
    return shlex.split(cmd.group(1)), block.group(1).rstrip("\n").splitlines()


def _same(shown: str, got: str) -> bool:
    """Equal lines, numbers allowed to differ by one unit of their last printed digit (a 1-thread
    and a 2-thread run may round a value on either side)."""
    if _NUM.sub("#", shown) != _NUM.sub("#", got):
        return False
    for a, b in zip(_NUM.findall(shown), _NUM.findall(got), strict=True):
        unit = 10.0 ** -len(a.split(".")[1])
        if abs(float(a) - float(b)) > unit * 1.01:
            return False
    return True


def test_the_readme_example_output_is_the_commands_real_output(real_lm: object) -> None:
    argv, shown = _readme_command_and_output()
    assert argv[:2] == ["mnemoscope", "audit"]
    proc = subprocess.run(
        [sys.executable, "-m", "mnemoscope", *argv[1:], "--color", "never"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**__import__("os").environ, "OMP_NUM_THREADS": "1", "NO_COLOR": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = proc.stdout.rstrip("\n").splitlines()
    assert len(got) == len(shown), (got, shown)
    bad = [(s, g) for s, g in zip(shown, got, strict=True) if not _same(s, g)]
    assert not bad, bad
