"""Forward hooks that capture hidden states without materialising every layer.

Hooks are global state on a shared model: they are registered inside a ``with``
block and removed in ``finally``, so none survives an exception.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import torch

from mnemoscope.models.arch import ArchAdapter, get_module

__all__ = ["HookSpec", "StateCapture", "counted_forwards", "eager_attention", "registered_hooks"]


@dataclass(frozen=True)
class HookSpec:
    module: torch.nn.Module
    fn: Callable[..., Any]
    kind: Literal["forward", "pre"] = "forward"


@contextmanager
def registered_hooks(specs: Sequence[HookSpec]) -> Iterator[None]:
    """Register hooks for the duration of the block; always remove them."""
    handles = []
    try:
        for s in specs:
            if s.kind == "pre":
                handles.append(s.module.register_forward_pre_hook(s.fn, with_kwargs=True))
            else:
                handles.append(s.module.register_forward_hook(s.fn))
        yield
    finally:
        for h in handles:
            h.remove()


@contextmanager
def counted_forwards(model: torch.nn.Module) -> Iterator[list[int]]:
    """Count the model's forward passes in the block (each call of the module, whatever its batch):
    ``with counted_forwards(m) as n: ...``, then ``n[0]``. The hook is removed on exit."""
    calls = [0]

    def hook(*_: Any, **__: Any) -> None:
        calls[0] += 1

    with registered_hooks([HookSpec(model, hook, "pre")]):
        yield calls


@contextmanager
def eager_attention(model: Any, needed: bool) -> Iterator[None]:
    """Switch to eager attention while attention weights are needed (sdpa returns none)."""
    current = getattr(model.config, "_attn_implementation", None)
    if not needed or current == "eager":
        yield
        return
    model.set_attn_implementation("eager")
    try:
        yield
    finally:
        model.set_attn_implementation(current)


def _first_tensor(x: Any) -> torch.Tensor:
    return x[0] if isinstance(x, (tuple, list)) else x


class StateCapture:
    """Collects block inputs/outputs at given positions during one forward pass.

    ``positions`` holds one padded-sequence index per batch row (the last prompt token
    for a plain trace; the last *prompt* token inside a teacher-forced sequence for a
    pair), so memory is O(layers x d) per row. With ``all_positions=True`` the whole
    ``[batch seq d]`` output of every block is kept instead.
    """

    def __init__(self, model: Any, arch: ArchAdapter, positions: torch.Tensor | None, all_positions: bool):
        self.blocks = get_module(model, arch.blocks)
        self.norm = get_module(model, arch.final_norm) if arch.final_norm else None
        self.positions = positions
        self.all_positions = all_positions
        self.states: list[torch.Tensor | None] = [None] * (len(self.blocks) + 1)
        self.post_norm: torch.Tensor | None = None

    def _select(self, x: torch.Tensor) -> torch.Tensor:
        if self.all_positions:
            return x.detach()
        assert self.positions is not None
        rows = torch.arange(x.shape[0], device=x.device)
        return x[rows, self.positions.to(x.device)].detach()

    def specs(self) -> list[HookSpec]:
        def embed_hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            x = args[0] if args else kwargs["hidden_states"]
            self.states[0] = self._select(x)

        def block_hook(index: int) -> Callable[..., None]:
            def hook(module: Any, args: Any, output: Any) -> None:
                self.states[index] = self._select(_first_tensor(output))

            return hook

        def norm_hook(module: Any, args: Any, output: Any) -> None:
            self.post_norm = self._select(_first_tensor(output))

        specs = [HookSpec(self.blocks[0], embed_hook, "pre")]
        specs += [HookSpec(b, block_hook(i + 1)) for i, b in enumerate(self.blocks)]
        if self.norm is not None:
            specs.append(HookSpec(self.norm, norm_hook))
        return specs

    def result(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(hidden ``[batch layer ...]`` in the output_hidden_states convention, pre-norm last block)."""
        if any(s is None for s in self.states):
            missing = [i for i, s in enumerate(self.states) if s is None]
            raise RuntimeError(f"hooks did not fire for hidden-state indices {missing}")
        states = list(self.states)
        prenorm = states[-1]
        if self.post_norm is not None:
            states[-1] = self.post_norm
        return torch.stack(states, dim=1), prenorm  # type: ignore[arg-type, return-value]
