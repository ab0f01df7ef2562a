"""Where the interesting modules live, per architecture.

One small table instead of string templates scattered through the tracer. A path
is a real attribute path from the ``*ForCausalLM`` object. Architectures not in
the table are probed with :func:`discover`; if that fails the tracer falls back
to ``output_hidden_states=True`` (slower, more memory, same numbers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ARCHITECTURES", "ArchAdapter", "adapter_for", "discover", "get_module"]


@dataclass(frozen=True)
class ArchAdapter:
    """Attribute paths of one architecture.

    Attributes:
        blocks: the ``ModuleList`` of decoder blocks.
        final_norm: the norm applied after the last block (``None`` if the model has none).

    The unembedding is always ``model.get_output_embeddings()``, so it needs no entry here.
    """

    blocks: str
    final_norm: str | None


_LLAMA_LIKE = ArchAdapter("model.layers", "model.norm")

ARCHITECTURES: dict[str, ArchAdapter] = {
    **{
        name: _LLAMA_LIKE
        for name in (
            "llama",
            "mistral",
            "mixtral",
            "qwen2",
            "qwen3",
            "qwen2_moe",
            "qwen3_moe",
            "gemma",
            "gemma2",
            "gemma3_text",
            "phi3",
            "olmo",
            "olmo2",
            "granite",
            "smollm3",
            "cohere",
            "starcoder2",
            "stablelm",
        )
    },
    "phi": ArchAdapter("model.layers", "model.final_layernorm"),
    "gpt2": ArchAdapter("transformer.h", "transformer.ln_f"),
    "gpt_neox": ArchAdapter("gpt_neox.layers", "gpt_neox.final_layer_norm"),
    "gptj": ArchAdapter("transformer.h", "transformer.ln_f"),
    "falcon": ArchAdapter("transformer.h", "transformer.ln_f"),
    "bloom": ArchAdapter("transformer.h", "transformer.ln_f"),
    "opt": ArchAdapter("model.decoder.layers", "model.decoder.final_layer_norm"),
}


def get_module(root: Any, path: str) -> Any:
    """Resolve a dotted attribute path; raises AttributeError naming the missing part."""
    obj = root
    for part in path.split("."):
        if not hasattr(obj, part):
            raise AttributeError(f"{type(root).__name__} has no '{path}' (missing '{part}')")
        obj = getattr(obj, part)
    return obj


def discover(model: Any) -> ArchAdapter | None:
    """Find blocks / final norm / head on an unknown architecture by trying known paths."""
    for candidate in (_LLAMA_LIKE, *ARCHITECTURES.values()):
        try:
            blocks = get_module(model, candidate.blocks)
            if candidate.final_norm is not None:
                get_module(model, candidate.final_norm)
        except AttributeError:
            continue
        n = getattr(getattr(model, "config", None), "num_hidden_layers", None)
        if n is None or len(blocks) == n:
            return candidate
    return None


def adapter_for(model: Any) -> ArchAdapter | None:
    """The adapter of ``model.config.model_type``, validated against the model, or a discovered one."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    known = ARCHITECTURES.get(model_type or "")
    if known is not None:
        try:
            get_module(model, known.blocks)
            if known.final_norm is not None:
                get_module(model, known.final_norm)
            return known
        except AttributeError:
            pass
    return discover(model)
