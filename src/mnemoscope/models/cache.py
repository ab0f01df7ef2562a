"""Cache of de-quantized GGUF models as safetensors folders.

De-quantizing the embedded SmolLM2 GGUF takes ~25 s; reloading the converted
folder takes well under a second. The cache is

* keyed by the SHA-256 of the GGUF file's content (memoised per path+size+mtime,
  so the hash is computed once per file version);
* written atomically: the model is saved into a temporary sibling folder, a marker
  file is written last, and the folder is renamed into place. A killed process
  leaves only a ``.tmp-*`` folder, which is never loaded and is swept later;
* verified on load: a folder without its marker, or whose marker names another
  key, is ignored and rebuilt.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mnemoscope.io import atomic_write

__all__ = ["MARKER", "CacheEntry", "file_sha256", "gguf_cache_entry", "list_cached", "publish"]

log = logging.getLogger(__name__)

MARKER = "mnemoscope-cache.json"
CACHE_FORMAT = 1


def file_sha256(path: Path, memo_dir: Path | None = None) -> str:
    """SHA-256 of a file, memoised in ``memo_dir/hashes.json`` keyed by path, size and mtime."""
    path = path.resolve()
    st = path.stat()
    key = f"{path}|{st.st_size}|{st.st_mtime_ns}"
    memo_file = memo_dir / "hashes.json" if memo_dir else None
    memo: dict[str, str] = {}
    if memo_file and memo_file.is_file():
        try:
            memo = json.loads(memo_file.read_text())
        except (OSError, json.JSONDecodeError):
            memo = {}
        if key in memo:
            return memo[key]
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    digest = h.hexdigest()
    if memo_file:
        memo[key] = digest
        atomic_write(memo_file, json.dumps(memo, indent=1))
    return digest


@dataclass(frozen=True)
class CacheEntry:
    """One converted model in the cache."""

    folder: Path
    key: str
    source: str

    @property
    def complete(self) -> bool:
        marker = self.folder / MARKER
        if not marker.is_file():
            return False
        try:
            meta = json.loads(marker.read_text())
        except (OSError, json.JSONDecodeError):
            return False
        return bool(meta.get("key") == self.key and meta.get("format") == CACHE_FORMAT)


def gguf_cache_entry(gguf: Path, root: Path) -> CacheEntry:
    """The cache slot of a GGUF file (computes or recalls its content hash)."""
    digest = file_sha256(gguf, memo_dir=root)
    stem = gguf.name[: -len(".gguf")] if gguf.name.lower().endswith(".gguf") else gguf.name
    return CacheEntry(
        folder=root / "models" / f"{stem}-{digest[:16]}", key=digest, source=str(gguf.resolve())
    )


def publish(entry: CacheEntry, save_into: Callable[[Path], None]) -> None:
    """Fill ``entry.folder`` atomically: ``save_into(tmp)`` writes the files, then the marker, then rename."""
    entry.folder.parent.mkdir(parents=True, exist_ok=True)
    _sweep_stale_tmp(entry.folder.parent)
    tmp = entry.folder.parent / f".tmp-{entry.folder.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir()
        save_into(tmp)
        meta = {"key": entry.key, "source": entry.source, "format": CACHE_FORMAT, "created": time.time()}
        atomic_write(tmp / MARKER, json.dumps(meta, indent=1))
        if entry.folder.exists():
            # An incomplete or stale folder from an older version; replace it.
            shutil.rmtree(entry.folder, ignore_errors=True)
        try:
            os.rename(tmp, entry.folder)
        except OSError:
            if not entry.complete:  # someone else did not win the race either
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _sweep_stale_tmp(parent: Path, older_than_s: float = 3600.0) -> None:
    now = time.time()
    for p in parent.glob(".tmp-*"):
        with contextlib.suppress(OSError):
            if now - p.stat().st_mtime > older_than_s:
                shutil.rmtree(p, ignore_errors=True)


def list_cached(root: Path) -> list[dict[str, object]]:
    """Complete cache entries with their source, size on disk and creation time."""
    out: list[dict[str, object]] = []
    models = root / "models"
    if not models.is_dir():
        return out
    for folder in sorted(models.iterdir()):
        marker = folder / MARKER
        if folder.name.startswith(".") or not marker.is_file():
            continue
        try:
            meta = json.loads(marker.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
        out.append(
            {
                "folder": str(folder),
                "source": meta.get("source"),
                "bytes": size,
                "created": meta.get("created"),
            }
        )
    return out
