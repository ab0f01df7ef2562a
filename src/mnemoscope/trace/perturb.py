"""Interventions on the residual stream for CRM's causal analyses (paper section 4.4, app. J).

* :func:`gaussian_noise`: ``h' = h + eps * sigma(h) * N(0, 1)`` added to the output of the
  chosen blocks at *every* token position. ``sigma(h)`` is the standard deviation of that
  block output over the sequence's own (non-pad) positions and hidden dimensions, per
  sequence: the paper computes it "batch-wise", which would make the noise depend on
  which other prompts share the batch; per sequence it does not.
* :func:`patch_last_token`: replaces a block's output at the last position with given
  vectors (CRM's activation patching ``h_c <- h_0`` at one layer); later layers recompute.

Both are hook context managers (removed in ``finally``). Layers are named by hidden-state
row (``1..L``, as in :mod:`mnemoscope.trace.types`): row ``l`` is the output of block
``l - 1`` (0-based), so row ``L`` is perturbed *before* the final norm. Sequences must be
left-padded, as :class:`~mnemoscope.trace.tracer.Tracer` pads them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from mnemoscope.errors import InputError
from mnemoscope.models.arch import get_module
from mnemoscope.models.loader import LoadedModel
from mnemoscope.trace.hooks import HookSpec, registered_hooks

__all__ = ["gaussian_noise", "patch_last_token", "perturbed_last_states"]


def _blocks(lm: LoadedModel) -> Any:
    if lm.arch is None:
        raise InputError(
            f"interventions need known block paths; architecture '{lm.info.architecture}' has no adapter "
            "(pass adapter=ArchAdapter(...) to load_model)"
        )
    return get_module(lm.model, lm.arch.blocks)


def _check_rows(rows: Sequence[int], n_blocks: int) -> list[int]:
    out = sorted({int(r) for r in rows})
    bad = [r for r in out if not 1 <= r <= n_blocks]
    if bad or not out:
        raise InputError(
            f"intervention layer(s) {bad or '[]'} out of range: block outputs are hidden-state rows 1..{n_blocks}",
            field="layers",
        )
    return out


def _replace_first(output: Any, new: torch.Tensor) -> Any:
    if isinstance(output, tuple):
        return (new, *output[1:])
    if isinstance(output, list):
        return [new, *output[1:]]
    return new


def _first(output: Any) -> torch.Tensor:
    return output[0] if isinstance(output, (tuple, list)) else output  # type: ignore[no-any-return]


@contextmanager
def gaussian_noise(
    lm: LoadedModel,
    rows: Sequence[int],
    eps: float,
    lengths: Sequence[int],
    generator: torch.Generator,
) -> Iterator[None]:
    """Add scaled Gaussian noise to the outputs of blocks ``rows`` during the block.

    Args:
        rows: hidden-state rows ``1..L`` (see module doc).
        eps: noise scale relative to each sequence's activation standard deviation.
        lengths: real (unpadded) length of each batch row; the batch is left-padded.
        generator: CPU generator (seeded by the caller), so runs are reproducible.
    """
    if eps < 0:
        raise InputError(f"eps must be >= 0, got {eps}", field="eps")
    blocks = _blocks(lm)
    chosen = _check_rows(rows, len(blocks))

    def hook(module: Any, args: Any, output: Any) -> Any:
        h = _first(output)
        b, width, _ = h.shape
        mask = torch.zeros(b, width, 1, dtype=h.dtype, device=h.device)
        for i, n in enumerate(lengths):
            mask[i, width - n :] = 1
        n_el = mask.sum(dim=(1, 2)) * h.shape[-1]
        mean = (h * mask).sum(dim=(1, 2)) / n_el
        var = (((h - mean[:, None, None]) * mask) ** 2).sum(dim=(1, 2)) / n_el
        sigma = var.sqrt()[:, None, None]
        noise = torch.randn(h.shape, generator=generator, dtype=torch.float32).to(h.device, h.dtype)
        return _replace_first(output, h + eps * sigma * noise * mask)

    with registered_hooks([HookSpec(blocks[r - 1], hook) for r in chosen]):
        yield


@contextmanager
def patch_last_token(lm: LoadedModel, row: int, values: torch.Tensor) -> Iterator[None]:
    """Replace block ``row``'s output at the last position (left padding) with ``values [b d]``."""
    blocks = _blocks(lm)
    (r,) = _check_rows([row], len(blocks))

    def hook(module: Any, args: Any, output: Any) -> Any:
        h = _first(output).clone()
        if values.shape != (h.shape[0], h.shape[-1]):
            raise InputError(f"patch values must be [{h.shape[0]}, {h.shape[-1]}], got {tuple(values.shape)}")
        h[:, -1] = values.to(h.device, h.dtype)
        return _replace_first(output, h)

    with registered_hooks([HookSpec(blocks[r - 1], hook)]):
        yield


def perturbed_last_states(
    tracer: Any,
    seqs: Sequence[Sequence[int]],
    intervention: Callable[[list[int]], Any] | None,
) -> np.ndarray:
    """``[b layer d]`` last-token hidden states of one batch under an intervention.

    ``intervention(lengths)`` returns the context manager to hold during the forward
    (``None`` = clean). The tracer's capture hooks are registered after the intervention's,
    so they record the perturbed states.
    """
    lengths = [len(s) for s in seqs]
    if intervention is None:
        res = tracer.forward(seqs, hidden="last", keep_logits=0)
    else:
        with intervention(lengths):
            res = tracer.forward(seqs, hidden="last", keep_logits=0)
    assert res.hidden is not None
    return res.hidden.float().cpu().numpy()  # type: ignore[no-any-return]
