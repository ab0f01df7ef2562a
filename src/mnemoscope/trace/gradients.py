"""Gradient capture: d log p(target | prompt) / d h_l for every layer, in one backward per batch.

SCAR's belief drift needs the gradient of the target's log-likelihood with respect to the
residual stream at every depth. This is its own capture function (the tracer's forward is
``no_grad``): model parameters never require gradients; only the input embeddings do, and
forward hooks retain the gradient of each block's output.

Layer convention (the residual stream, ``n_layers + 1`` states): index 0 is the input of the
first block (the embeddings, after any model-specific scaling), index ``l`` the output of
block ``l`` **before** the final norm. Rows of a batch are independent (left padding with an
attention mask), so the gradient of the batch's summed log-likelihood gives every row's own
gradient exactly.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from mnemoscope.errors import InputError
from mnemoscope.models.arch import get_module
from mnemoscope.models.loader import LoadedModel
from mnemoscope.trace.hooks import HookSpec, registered_hooks

__all__ = ["GradientBatch", "Position", "encode_pair", "gradient_batch"]

log = logging.getLogger(__name__)

Position = Literal["last", "mean"]


@dataclass(frozen=True)
class GradientBatch:
    """Hidden states and log-likelihood gradients of one batch of (prompt, target) pairs.

    Attributes:
        hidden: ``[prompt layer d_model]`` residual stream at the prompt's last token
            (``position="last"``) or averaged over the prompt's tokens (``"mean"``).
        grad: ``[prompt layer d_model]`` d log p(target | prompt) / d h_l at the same positions
            (for ``"mean"``, the mean over prompt positions of the per-position gradients).
        logp: ``[prompt]`` log p(target | prompt), summed over target tokens.
        n_prompt_tokens, n_target_tokens: ``[prompt]`` token counts.
    """

    hidden: np.ndarray
    grad: np.ndarray
    logp: np.ndarray
    n_prompt_tokens: np.ndarray
    n_target_tokens: np.ndarray


def encode_pair(tokenizer: Any, prompt: str, target: str) -> tuple[list[int], list[int]]:
    """Token ids of a prompt (with the tokenizer's special tokens) and of its target.

    The target continues the prompt after one space unless it starts with whitespace or the
    prompt ends with whitespace (so ``"2 + 2 ="`` and ``"4"`` score the text ``"2 + 2 = 4"``).
    """
    p_ids = list(tokenizer(prompt, add_special_tokens=True)["input_ids"])
    joiner = "" if (not target or target[0].isspace() or (prompt and prompt[-1].isspace())) else " "
    t_ids = list(tokenizer(joiner + target, add_special_tokens=False)["input_ids"])
    return p_ids, t_ids


def _first_tensor(x: Any) -> torch.Tensor:
    return x[0] if isinstance(x, (tuple, list)) else x


def gradient_batch(
    lm: LoadedModel,
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    position: Position = "last",
) -> GradientBatch:
    """One forward and one backward over a batch of ``(prompt_ids, target_ids)`` pairs.

    Args:
        lm: a loaded model with a known architecture (``lm.arch`` set).
        pairs: token ids of each prompt and its (non-empty) target.
        position: ``"last"`` = the last prompt token; ``"mean"`` = the mean over prompt tokens.

    Returns:
        A :class:`GradientBatch` in float64 numpy arrays of the model's own precision.

    Raises:
        InputError: an empty prompt or target.
        RuntimeError: the architecture's blocks are unknown (no adapter).

    Example:
        >>> lm = load_model("default")                                   # doctest: +SKIP
        >>> g = gradient_batch(lm, [encode_pair(lm.tokenizer, "2 + 2 =", "4")])  # doctest: +SKIP
        >>> g.grad.shape                                                 # doctest: +SKIP
        (1, 31, 576)
    """
    if lm.arch is None:
        raise RuntimeError(
            f"gradient capture needs the block layout of architecture '{lm.info.architecture}' "
            "(not in mnemoscope.models.arch)"
        )
    if position not in ("last", "mean"):
        raise InputError(f"position must be 'last' or 'mean', got {position!r}", field="position")
    for i, (p, t) in enumerate(pairs):
        if len(p) == 0:
            raise InputError("prompt is empty (0 tokens)", record=i, field="prompt")
        if len(t) == 0:
            raise InputError("target is empty (0 tokens)", record=i, field="target")
    model = lm.model
    blocks = get_module(model, lm.arch.blocks)
    seqs = [list(p) + list(t) for p, t in pairs]
    width = max(len(s) for s in seqs)
    n = len(seqs)
    dev = lm.device
    pad_id = _pad_id(lm.tokenizer)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    pads: list[int] = []
    for i, s in enumerate(seqs):
        pad = width - len(s)
        ids[i, pad:] = torch.tensor(s, dtype=torch.long)
        mask[i, pad:] = 1
        pads.append(pad)
    pos_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    ids, mask, pos_ids = ids.to(dev), mask.to(dev), pos_ids.to(dev)

    states: list[torch.Tensor | None] = [None] * (len(blocks) + 1)

    def keep(index: int, x: torch.Tensor) -> None:
        if x.requires_grad:
            x.retain_grad()
        states[index] = x

    def embed_hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        keep(0, args[0] if args else kwargs["hidden_states"])

    def block_hook(index: int) -> Callable[..., None]:
        def hook(module: Any, args: Any, output: Any) -> None:
            keep(index, _first_tensor(output))

        return hook

    specs = [HookSpec(blocks[0], embed_hook, "pre")]
    specs += [HookSpec(b, block_hook(i + 1)) for i, b in enumerate(blocks)]

    max_t = max(len(t) for _, t in pairs)
    kwargs: dict[str, Any] = {"attention_mask": mask, "use_cache": False}
    params = inspect.signature(model.forward).parameters
    if "position_ids" in params:
        kwargs["position_ids"] = pos_ids
    if "logits_to_keep" in params:
        kwargs["logits_to_keep"] = max_t + 1

    frozen = [p for p in model.parameters() if p.requires_grad]
    for p in frozen:
        p.requires_grad_(False)
    try:
        with torch.enable_grad():
            embeds = model.get_input_embeddings()(ids).detach().requires_grad_(True)
            with registered_hooks(specs):
                out = model(inputs_embeds=embeds, **kwargs)
            logits = out.logits[:, -(max_t + 1) :]
            logp_rows = []
            for b, (_, t) in enumerate(pairs):
                k = len(t)
                # column j of the kept logits predicts kept column j + 1; the target is the last k tokens
                lp = logits[b, -(k + 1) : -1].log_softmax(-1)
                tgt = torch.tensor(list(t), dtype=torch.long, device=lp.device)
                logp_rows.append(lp.gather(-1, tgt[:, None]).sum())
            logp = torch.stack(logp_rows)
            logp.sum().backward()
        if any(s is None or s.grad is None for s in states):
            missing = [i for i, s in enumerate(states) if s is None or s.grad is None]
            raise RuntimeError(f"no gradient reached hidden-state indices {missing}")
        hid_rows, grad_rows = [], []
        for b, (p, _) in enumerate(pairs):
            lo, hi = pads[b], pads[b] + len(p)
            h_b = torch.stack([s[b, lo:hi].detach() for s in states])  # type: ignore[index]
            g_b = torch.stack([s.grad[b, lo:hi] for s in states])  # type: ignore[union-attr,index]
            if position == "last":
                hid_rows.append(h_b[:, -1])
                grad_rows.append(g_b[:, -1])
            else:
                hid_rows.append(h_b.mean(dim=1))
                grad_rows.append(g_b.mean(dim=1))
        return GradientBatch(
            hidden=torch.stack(hid_rows).double().cpu().numpy(),
            grad=torch.stack(grad_rows).double().cpu().numpy(),
            logp=logp.detach().double().cpu().numpy(),
            n_prompt_tokens=np.array([len(p) for p, _ in pairs], dtype=np.int64),
            n_target_tokens=np.array([len(t) for _, t in pairs], dtype=np.int64),
        )
    finally:
        for p in frozen:
            p.requires_grad_(True)
        model.zero_grad(set_to_none=True)


def _pad_id(tokenizer: Any) -> int:
    for cand in (getattr(tokenizer, "pad_token_id", None), getattr(tokenizer, "eos_token_id", None)):
        if cand is not None:
            return int(cand)
    return 0
