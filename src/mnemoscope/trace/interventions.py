"""RADAR's capture: the logit-lens trajectory, attentions and residual stream of a prompt, and
causal interventions on the model (zero-ablation of attention outputs or heads, last-token
state patching from a corrupted prompt) measured on the top-token log-probability.

Everything here touches the model; the features computed from the result are pure functions
in :mod:`mnemoscope.features.radar`. Hooks are registered with
:func:`~mnemoscope.trace.hooks.registered_hooks` (removed in ``finally``) and the hook
builders below are context-free :class:`HookSpec` lists, so they compose.

Interventions are batched: one forward runs ``B`` copies of the prompt, row ``r`` carrying
its own intervention (row-indexed hooks), so the per-layer ablation of a 30-layer model costs
one forward of batch 31 rather than 31 forwards.

Definitions (all effects are drops in nats of ``log p(top | prompt)``, where ``top`` is the
clean model's most likely next token; positive = the intervention hurt the prediction):

* ablation (``unit="layer"``): the attention module's output of layer l is zeroed at every
  position; (``unit="head"``): head h's slice of the input of the attention output
  projection is zeroed at every position.
* direct effect of layer l: ``log p_top(norm(x_L)) - log p_top(norm(x_L - o_l))`` with
  ``x_L`` the last block's output at the last token and ``o_l`` layer l's attention output
  there: the layer's contribution through the residual stream alone, later layers frozen.
  Exact for pre-norm blocks that add the attention output to the residual stream (llama,
  qwen, mistral, gpt2, ...); approximate where a post-attention norm sits before the
  addition (gemma).
* corruption (Meng et al. 2022): Gaussian noise of standard deviation
  ``noise_scale x std(embeddings of the prompt)`` added to the input embeddings of every
  prompt token except the last (seeded per prompt).
* patching effect of layer l: the clean run with the last token's output of block l
  replaced by the corrupted run's.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from mnemoscope.errors import InputError, MnemoscopeError
from mnemoscope.models.arch import get_module
from mnemoscope.models.loader import LoadedModel
from mnemoscope.trace.hooks import HookSpec, registered_hooks
from mnemoscope.trace.tracer import Capture, Tracer
from mnemoscope.trace.types import PromptTrace

__all__ = [
    "AblationUnit",
    "AttentionUnavailableError",
    "CausalEffects",
    "LensNorm",
    "RadarCaptureConfig",
    "RadarTrace",
    "ablate_attention",
    "ablate_heads",
    "attention_module",
    "blocks_of",
    "capture_radar",
    "embedding_noise",
    "gaussian_noise",
    "logit_lens",
    "measure_effects",
    "patch_last_token",
    "patched_last_token",
    "perturbed_last_states",
]

log = logging.getLogger(__name__)

AblationUnit = Literal["layer", "head"]
LensNorm = Literal["final_norm", "raw"]

_ATTN_NAMES = ("self_attn", "attn", "attention", "self_attention")
_OUT_PROJ_NAMES = ("o_proj", "c_proj", "dense", "out_proj")


class AttentionUnavailableError(MnemoscopeError):
    """The model returned no attention weights (RADAR's mechanistic features need them)."""


@dataclass(frozen=True)
class RadarCaptureConfig:
    """What :func:`capture_radar` records (stored with every features file and fitted model).

    Attributes:
        lens: ``"final_norm"`` applies the model's final norm before the LM head at every
            layer (the usual logit lens; at the last layer it reproduces the model's output),
            ``"raw"`` applies the LM head to the raw residual stream.
        measured: also run the interventions of the ``"measured"`` feature set.
        ablation: ablate each layer's attention output (L rows) or each head (L x H rows).
        noise_scale: corruption noise in units of the prompt's embedding standard deviation.
        seed: seeds the corruption noise (combined with a hash of the prompt's token ids).
        max_rows: intervention rows per forward (memory bound).
    """

    lens: LensNorm = "final_norm"
    measured: bool = False
    ablation: AblationUnit = "layer"
    noise_scale: float = 3.0
    seed: int = 0
    max_rows: int = 64

    def __post_init__(self) -> None:
        if self.lens not in ("final_norm", "raw"):
            raise InputError(f"lens must be 'final_norm' or 'raw', got {self.lens!r}")
        if self.ablation not in ("layer", "head"):
            raise InputError(f"ablation must be 'layer' or 'head', got {self.ablation!r}")
        if self.max_rows < 1 or self.noise_scale < 0:
            raise InputError("max_rows must be >= 1 and noise_scale >= 0")

    def to_dict(self) -> dict[str, Any]:
        return {
            "lens": self.lens,
            "measured": self.measured,
            "ablation": self.ablation,
            "noise_scale": self.noise_scale,
            "seed": self.seed,
        }


@dataclass(frozen=True)
class CausalEffects:
    """Measured interventions on one prompt (nats of top-token log-prob drop; see module doc).

    Attributes:
        unit: what was ablated.
        ablation: ``[L]`` (layers) or ``[L H]`` (heads) zero-ablation effects.
        direct: ``[L]`` direct effect of each layer's attention output.
        patching: ``[L]`` last-token patching effect at each block output.
        corruption: effect of the corruption itself (the corrupted run's drop).
        clean_logprob: ``log p(top)`` of the clean run.
    """

    unit: AblationUnit
    ablation: np.ndarray
    direct: np.ndarray
    patching: np.ndarray
    corruption: float
    clean_logprob: float


@dataclass(frozen=True)
class RadarTrace:
    """One prompt as RADAR sees it.

    Attributes:
        prompt: the prompt text.
        n_tokens: prompt length in tokens.
        confidence: ``[L]`` max softmax probability of the logit lens at layers 1..L.
        entropy: ``[L]`` entropy (nats) of the same distributions.
        top_token: the model's most likely next token.
        attentions: ``[L H S S]`` attention weights.
        states: ``[L+1 S d]`` residual stream (row 0 embeddings, row L the last block's
            output before the final norm).
        effects: measured interventions (``None`` unless captured with ``measured=True``).
        final_confidence: max probability of the model's own next-token distribution.
    """

    prompt: str
    n_tokens: int
    confidence: np.ndarray
    entropy: np.ndarray
    top_token: int
    attentions: np.ndarray
    states: np.ndarray
    effects: CausalEffects | None = None
    final_confidence: float = float("nan")


# --------------------------------------------------------------------------- modules


def blocks_of(lm: LoadedModel) -> Any:
    """The model's decoder blocks (interventions need the architecture's block path)."""
    if lm.arch is None:
        raise InputError(
            f"interventions need known block paths; architecture '{lm.info.architecture}' has no adapter "
            "(pass adapter=ArchAdapter(...) to load_model)"
        )
    return get_module(lm.model, lm.arch.blocks)


def _final_norm(lm: LoadedModel) -> Callable[[torch.Tensor], torch.Tensor]:
    if lm.arch is None or lm.arch.final_norm is None:
        return lambda x: x
    return get_module(lm.model, lm.arch.final_norm)  # type: ignore[no-any-return]


def _child(module: Any, names: Sequence[str], what: str) -> Any:
    for name in names:
        child = getattr(module, name, None)
        if isinstance(child, torch.nn.Module):
            return child
    raise InputError(f"{type(module).__name__} has no {what} (looked for {', '.join(names)})")


def attention_module(block: Any) -> torch.nn.Module:
    """The self-attention module of a decoder block."""
    return _child(block, _ATTN_NAMES, "attention module")  # type: ignore[no-any-return]


def _replace_first(output: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """A module output with its first element (the hidden states) replaced by ``fn`` of it."""
    if isinstance(output, tuple):
        return (fn(output[0]), *output[1:])
    if isinstance(output, list):
        return [fn(output[0]), *output[1:]]
    return fn(output)


def _first(output: Any) -> torch.Tensor:
    return output[0] if isinstance(output, (tuple, list)) else output  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- hook builders


def ablate_attention(blocks: Any, rows_by_layer: dict[int, list[int]]) -> list[HookSpec]:
    """Zero the attention output of layer ``l`` (0-based) in batch rows ``rows_by_layer[l]``."""
    specs = []
    for layer, rows in rows_by_layer.items():
        idx = torch.tensor(rows, dtype=torch.long)

        def hook(module: Any, args: Any, output: Any, idx: torch.Tensor = idx) -> Any:
            def zero(t: torch.Tensor) -> torch.Tensor:
                t = t.clone()
                t[idx.to(t.device)] = 0
                return t

            return _replace_first(output, zero)

        specs.append(HookSpec(attention_module(blocks[layer]), hook))
    return specs


def ablate_heads(blocks: Any, n_heads: int, rows: dict[tuple[int, int], list[int]]) -> list[HookSpec]:
    """Zero head ``h`` of layer ``l`` (the input slice of the attention output projection) in rows ``rows[(l, h)]``."""
    by_layer: dict[int, list[tuple[int, int]]] = {}
    for (layer, head), rs in rows.items():
        by_layer.setdefault(layer, []).extend((r, head) for r in rs)
    specs = []
    for layer, pairs in by_layer.items():
        proj = _child(attention_module(blocks[layer]), _OUT_PROJ_NAMES, "attention output projection")

        def pre(module: Any, args: Any, kwargs: Any, pairs: list[tuple[int, int]] = pairs) -> Any:
            x = args[0].clone()
            hd = x.shape[-1] // n_heads
            for r, h in pairs:
                x[r, ..., h * hd : (h + 1) * hd] = 0
            return (x, *args[1:]), kwargs

        specs.append(HookSpec(proj, pre, "pre"))
    return specs


def patch_last_token(
    blocks: Any, rows_by_state: Mapping[int, Sequence[int]], states: torch.Tensor | Mapping[int, torch.Tensor]
) -> list[HookSpec]:
    """Set the last token's output of block ``l - 1`` (= residual state ``l``) to ``states[l]`` in
    batch rows ``rows_by_state[l]``.

    ``states[l]`` is one vector ``[d]`` for all those rows (RADAR's patching from a corrupted
    run) or one per row ``[len(rows) d]`` (CRM's ``h_c <- h_0``). Sequences are left-padded.
    """
    specs = []
    for state, rows in rows_by_state.items():
        if not 1 <= state <= len(blocks):
            raise InputError(
                f"patch layer {state} out of range: block outputs are hidden-state rows 1..{len(blocks)}",
                field="layers",
            )
        idx = torch.tensor(list(rows), dtype=torch.long)
        value = states[state]
        if value.ndim == 2 and value.shape[0] != len(idx):
            raise InputError(
                f"patch values for layer {state} must be [{len(idx)}, d], got {tuple(value.shape)}"
            )

        def hook(
            module: Any, args: Any, output: Any, idx: torch.Tensor = idx, value: torch.Tensor = value
        ) -> Any:
            def patch(t: torch.Tensor) -> torch.Tensor:
                t = t.clone()
                t[idx.to(t.device), -1] = value.to(t.device, t.dtype)
                return t

            return _replace_first(output, patch)

        specs.append(HookSpec(blocks[state - 1], hook))
    return specs


def embedding_noise(model: Any, noise: torch.Tensor) -> list[HookSpec]:
    """Add ``noise`` ``[S d]`` to the input embeddings of every row (zero rows leave a token clean)."""

    def hook(module: Any, args: Any, output: Any) -> Any:
        return _replace_first(output, lambda t: t + noise.to(t.device, t.dtype))

    return [HookSpec(model.get_input_embeddings(), hook)]


def _capturing(blocks: Any) -> tuple[list[HookSpec], dict[str, Any]]:
    """Hooks recording row 0's last-token attention outputs and block outputs."""
    store: dict[str, Any] = {"attn": [None] * len(blocks), "block": [None] * len(blocks)}

    def attn_hook(i: int) -> Callable[..., None]:
        def hook(module: Any, args: Any, output: Any) -> None:
            store["attn"][i] = _first(output)[0, -1].detach().clone()

        return hook

    def block_hook(i: int) -> Callable[..., None]:
        def hook(module: Any, args: Any, output: Any) -> None:
            store["block"][i] = _first(output)[0, -1].detach().clone()

        return hook

    specs = [HookSpec(attention_module(b), attn_hook(i)) for i, b in enumerate(blocks)]
    specs += [HookSpec(b, block_hook(i)) for i, b in enumerate(blocks)]
    return specs, store


# --------------------------------------------------------------------------- logit lens


@torch.no_grad()
def logit_lens(lm: LoadedModel, states: torch.Tensor, lens: LensNorm = "final_norm") -> torch.Tensor:
    """``[n vocab]`` float64 log-probabilities of the LM head applied to ``[n d]`` residual states."""
    head = lm.model.get_output_embeddings()
    x = states.to(lm.device, next(head.parameters()).dtype)
    if lens == "final_norm":
        x = _final_norm(lm)(x)
    return head(x).double().log_softmax(-1)  # type: ignore[no-any-return]


def _lens_trajectory(
    lm: LoadedModel, t: PromptTrace, lens: LensNorm
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(confidence ``[L]``, entropy ``[L]``, residual stream ``[L+1 S d]``) of one prompt trace."""
    assert t.hidden_all is not None
    hall = t.hidden_all
    if t.hidden_prenorm_all is not None:
        states = np.concatenate([hall[:-1], t.hidden_prenorm_all[None]], axis=0)
    elif lens == "final_norm" and lm.arch is not None and lm.arch.final_norm is not None:
        raise InputError("the trace lacks the pre-norm last layer the logit lens needs")
    else:  # no final norm: the last row is the raw block output already
        states = hall
    logp = logit_lens(lm, torch.from_numpy(states[1:, -1]), lens)
    p = logp.exp()
    conf = p.max(-1).values.cpu().numpy()
    ent = -(p * logp).nan_to_num(0.0).sum(-1).cpu().numpy()
    return conf, ent, states


# --------------------------------------------------------------------------- interventions


def _top_logprobs(tracer: Tracer, seq: list[int], n_rows: int, hooks: list[HookSpec], top: int) -> np.ndarray:
    with registered_hooks(hooks):
        res = tracer.forward([seq] * n_rows, hidden="none", keep_logits=1)
    assert res.logits is not None
    return res.logits[:, -1].double().log_softmax(-1)[:, top].cpu().numpy()  # type: ignore[no-any-return]


def _chunks(n: int, size: int) -> Iterator[range]:
    for s in range(0, n, size):
        yield range(s, min(n, s + size))


@torch.no_grad()
def measure_effects(
    lm: LoadedModel,
    seq: Sequence[int],
    config: RadarCaptureConfig | None = None,
    tracer: Tracer | None = None,
) -> tuple[CausalEffects, int]:
    """Run the interventions of the measured feature set on one tokenised prompt.

    Returns:
        ``(effects, top)`` with ``top`` the clean model's most likely next token.
    """
    cfg = config or RadarCaptureConfig(measured=True)
    tracer = tracer or Tracer(lm)
    seq = [int(s) for s in seq]
    blocks = blocks_of(lm)
    n_layers = len(blocks)

    # clean run (row 0), recording each layer's attention output and the last block's output
    cap_hooks, store = _capturing(blocks)
    with registered_hooks(cap_hooks):
        res = tracer.forward([seq], hidden="none", keep_logits=1)
    assert res.logits is not None
    clean = res.logits[0, -1].double().log_softmax(-1)
    top = int(clean.argmax())
    lp_clean = float(clean[top])

    # direct effects: remove o_l from the final residual stream, later layers frozen
    x_final = store["block"][-1]
    attn = torch.stack(store["attn"])
    lens = logit_lens(lm, torch.cat([x_final[None], x_final[None] - attn]), "final_norm")[:, top]
    direct = (lens[0] - lens[1:]).cpu().numpy()

    # zero-ablation, batched: one row per component
    if cfg.ablation == "layer":
        comps: list[tuple[int, int]] = [(layer, -1) for layer in range(n_layers)]
    else:
        n_heads = lm.info.n_heads
        if n_heads < 1:
            raise InputError("the model config states no attention heads; use ablation='layer'")
        comps = [(layer, h) for layer in range(n_layers) for h in range(n_heads)]
    abl = np.empty(len(comps))
    for chunk in _chunks(len(comps), cfg.max_rows):
        local = [comps[i] for i in chunk]
        if cfg.ablation == "layer":
            hooks = ablate_attention(blocks, {layer: [r] for r, (layer, _) in enumerate(local)})
        else:
            hooks = ablate_heads(blocks, lm.info.n_heads, {c: [r] for r, c in enumerate(local)})
        abl[chunk.start : chunk.stop] = lp_clean - _top_logprobs(tracer, seq, len(local), hooks, top)
    ablation = abl if cfg.ablation == "layer" else abl.reshape(n_layers, lm.info.n_heads)

    # corrupted run: noise on every token's embedding but the last
    emb = lm.model.get_input_embeddings()
    ids = torch.tensor([seq], dtype=torch.long, device=lm.device)
    base = _first(emb(ids))[0].double()
    sigma = float(base.std()) * cfg.noise_scale if base.numel() > 1 else 0.0
    gen = np.random.default_rng([cfg.seed, zlib.crc32(np.asarray(seq, dtype=np.int64).tobytes())])
    noise = torch.from_numpy(gen.normal(0.0, sigma, size=tuple(base.shape)))
    noise[-1] = 0.0
    cap_hooks, store = _capturing(blocks)
    with registered_hooks(cap_hooks + embedding_noise(lm.model, noise)):
        res = tracer.forward([seq], hidden="none", keep_logits=1)
    assert res.logits is not None
    corruption = lp_clean - float(res.logits[0, -1].double().log_softmax(-1)[top])
    corrupt_states = torch.stack(
        [torch.zeros_like(store["block"][0]), *store["block"]]
    )  # index l = block l output

    patch = np.empty(n_layers)
    for chunk in _chunks(n_layers, cfg.max_rows):
        hooks = patch_last_token(blocks, {i + 1: [r] for r, i in enumerate(chunk)}, corrupt_states)
        patch[chunk.start : chunk.stop] = lp_clean - _top_logprobs(tracer, seq, len(chunk), hooks, top)
    effects = CausalEffects(
        unit=cfg.ablation,
        ablation=ablation,
        direct=direct,
        patching=patch,
        corruption=corruption,
        clean_logprob=lp_clean,
    )
    return effects, top


# --------------------------------------------------------------------------- capture


def _check_attentions(lm: LoadedModel, tracer: Tracer) -> None:
    """A one-token probe: does this model return attention weights at all?"""
    hint = (
        f"{lm.info.name} returned no attention weights; RADAR needs them: load the model with "
        "attn_implementation='eager' or use an architecture whose attention kernel can return weights"
    )
    tok = getattr(lm.tokenizer, "bos_token_id", None) or 1
    try:
        res = tracer.forward([[int(tok)]], hidden="none", keep_logits=0, attentions=True)
    except RuntimeError as e:
        raise AttentionUnavailableError(f"{hint} ({e})") from e
    if not res.attentions or any(a is None or a.numel() == 0 for a in res.attentions):
        raise AttentionUnavailableError(hint)


def capture_radar(
    lm: LoadedModel,
    prompts: Sequence[str],
    config: RadarCaptureConfig | None = None,
    *,
    batch_size: int = 8,
    chat: bool = False,
) -> list[RadarTrace]:
    """Trace ``prompts`` for RADAR: one forward with attentions per batch, plus interventions if asked.

    Raises:
        InputError: an empty prompt, or one longer than the model's window.
        AttentionUnavailableError: the model's attention kernel returns no weights.
    """
    cfg = config or RadarCaptureConfig()
    for i, p in enumerate(prompts):
        if not isinstance(p, str) or not p.strip():
            raise InputError("prompt is empty", record=i, field="prompt")
    tracer = Tracer(lm, batch_size=batch_size)
    _check_attentions(lm, tracer)
    traces = tracer.trace(
        list(prompts), capture=Capture(hidden="all", logprobs="last", attentions=True), chat=chat
    )
    out = []
    for t in traces:
        assert t.attentions is not None and t.logprobs is not None
        conf, ent, states = _lens_trajectory(lm, t, cfg.lens)
        top = int(np.argmax(t.logprobs))
        effects = None
        if cfg.measured:
            effects, top = measure_effects(lm, t.token_ids.tolist(), cfg, tracer)
        out.append(
            RadarTrace(
                prompt=t.prompt,
                n_tokens=t.n_tokens,
                confidence=conf,
                entropy=ent,
                top_token=top,
                attentions=t.attentions,
                states=states,
                effects=effects,
                final_confidence=float(np.exp(np.max(t.logprobs))),
            )
        )
    return out


# --------------------------------------------------------------------------- CRM's causal interventions
#
# CRM's causal analyses (paper section 4.4, app. J) as context managers. Layers are named by
# hidden-state row (1..L, as in mnemoscope.trace.types): row l is the output of block l - 1
# (0-based), so row L is perturbed *before* the final norm. Sequences are left-padded.


def _check_rows(rows: Sequence[int], n_blocks: int) -> list[int]:
    out = sorted({int(r) for r in rows})
    bad = [r for r in out if not 1 <= r <= n_blocks]
    if bad or not out:
        raise InputError(
            f"intervention layer(s) {bad or '[]'} out of range: block outputs are hidden-state rows 1..{n_blocks}",
            field="layers",
        )
    return out


@contextmanager
def gaussian_noise(
    lm: LoadedModel,
    rows: Sequence[int],
    eps: float,
    lengths: Sequence[int],
    generator: torch.Generator,
) -> Iterator[None]:
    """Add ``eps * sigma(h) * N(0, 1)`` to the outputs of blocks ``rows`` at every real position.

    ``sigma(h)`` is the standard deviation of that block output over the sequence's own
    (non-pad) positions and hidden dimensions, per sequence: the paper computes it
    "batch-wise", which would make the noise depend on which other prompts share the batch.

    Args:
        rows: hidden-state rows ``1..L``.
        eps: noise scale relative to each sequence's activation standard deviation.
        lengths: real (unpadded) length of each batch row; the batch is left-padded.
        generator: CPU generator (seeded by the caller), so runs are reproducible.
    """
    if eps < 0:
        raise InputError(f"eps must be >= 0, got {eps}", field="eps")
    blocks = blocks_of(lm)
    chosen = _check_rows(rows, len(blocks))

    def noisy(h: torch.Tensor) -> torch.Tensor:
        b, width, _ = h.shape
        mask = torch.zeros(b, width, 1, dtype=h.dtype, device=h.device)
        for i, n in enumerate(lengths):
            mask[i, width - n :] = 1
        n_el = mask.sum(dim=(1, 2)) * h.shape[-1]
        mean = (h * mask).sum(dim=(1, 2)) / n_el
        var = (((h - mean[:, None, None]) * mask) ** 2).sum(dim=(1, 2)) / n_el
        sigma = var.sqrt()[:, None, None]
        noise = torch.randn(h.shape, generator=generator, dtype=torch.float32).to(h.device, h.dtype)
        return h + eps * sigma * noise * mask

    def hook(module: Any, args: Any, output: Any) -> Any:
        return _replace_first(output, noisy)

    with registered_hooks([HookSpec(blocks[r - 1], hook) for r in chosen]):
        yield


@contextmanager
def patched_last_token(lm: LoadedModel, row: int, values: torch.Tensor) -> Iterator[None]:
    """Hold :func:`patch_last_token` of every batch row: block ``row``'s output at the last
    position becomes ``values [b d]`` (CRM's activation patching ``h_c <- h_0``)."""
    blocks = blocks_of(lm)
    (r,) = _check_rows([row], len(blocks))
    with registered_hooks(patch_last_token(blocks, {r: range(values.shape[0])}, {r: values})):
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
