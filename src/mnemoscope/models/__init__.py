"""Model loading: one entry point from a spec string to a model ready for tracing.

Example:
    >>> from mnemoscope.models import load_model   # doctest: +SKIP
    >>> lm = load_model("default")                 # doctest: +SKIP
    >>> lm.info.n_layers, lm.info.hidden_size      # doctest: +SKIP
    (30, 576)
"""

from mnemoscope.models.arch import ArchAdapter, adapter_for
from mnemoscope.models.loader import (
    LoadedModel,
    ModelInfo,
    check_same_model,
    default_gguf_path,
    from_objects,
    load_model,
    resolve_device,
    resolve_dtype,
)
from mnemoscope.models.spec import ModelSpec

__all__ = [
    "ArchAdapter",
    "LoadedModel",
    "ModelInfo",
    "ModelSpec",
    "adapter_for",
    "check_same_model",
    "default_gguf_path",
    "from_objects",
    "load_model",
    "resolve_device",
    "resolve_dtype",
]
