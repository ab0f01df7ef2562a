"""CRM's causal analyses (paper section 4.4, appendix J): they must run the model.

For each intervention the last-prompt-token states of both prompts of every pair are
recomputed, the displacement replaced, and CRM-LTS (L3 only, logistic regression, the
configured protocol) is cross-validated again. Level 1 and 2 are left out on purpose: the
answer is not regenerated, so only the hidden-state features change. ``delta`` is the
AUC under intervention minus the AUC of the same pipeline on clean states recomputed in
the same way (same batches), so the difference is due to the intervention alone.

* Noise: ``h' = h + eps * sigma(h) * N(0, 1)`` at all positions of a block of layers, in
  both passes (independent draws), eps in {0.1, 0.5, 1.0}. Blocks: ``early_control``
  (the first quarter of the blocks, the paper's universal baseline), ``peak_block`` (the
  best single-layer-AUC layer +- 2), ``late_block`` (the last quarter) and ``peak_layer``
  (that layer alone). The peak comes from the layer sweep on all samples; this choice of
  *where* to perturb is descriptive, as in the paper.
* Patching: the with-context state at one layer's last position is replaced by the
  no-context state (h_c <- h_0); later layers recompute.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from mnemoscope.detectors.crm import crm_pipeline
from mnemoscope.errors import InputError
from mnemoscope.features.crm import CRMData
from mnemoscope.models.loader import LoadedModel
from mnemoscope.pipelines.crm.eval import CRMEvalConfig, lts_kwargs, run_method
from mnemoscope.trace.interventions import gaussian_noise, patched_last_token, perturbed_last_states
from mnemoscope.trace.tracer import Tracer, batch_ranges
from mnemoscope.trace.types import PairTrace

__all__ = ["causal_analyses", "default_blocks", "vocab_back_projection"]

log = logging.getLogger(__name__)


def default_blocks(n_blocks: int, peak: int) -> dict[str, list[int]]:
    """Hidden-state rows (1..L) of the default noise blocks (see the module doc).

    Example:
        >>> default_blocks(30, 12)["peak_block"]
        [10, 11, 12, 13, 14]
    """
    q = max(2, n_blocks // 4)
    peak = min(max(int(peak), 1), n_blocks)
    return {
        "early_control": list(range(1, q + 1)),
        "peak_block": list(range(max(1, peak - 2), min(n_blocks, peak + 2) + 1)),
        "late_block": list(range(n_blocks - q + 1, n_blocks + 1)),
        "peak_layer": [peak],
    }


def _states(
    tracer: Tracer,
    seqs: list[list[int]],
    batch_size: int,
    make: Callable[[int, list[int]], Any] | None,
) -> np.ndarray:
    out = []
    for k, idx in enumerate(batch_ranges(len(seqs), batch_size)):
        batch = [seqs[i] for i in idx]
        inter = None if make is None else (lambda lengths, k=k: make(k, lengths))
        out.append(perturbed_last_states(tracer, batch, inter))
    return np.concatenate(out).astype(np.float32)


def _l3_auc(data: CRMData, disp: np.ndarray, y: np.ndarray, c: CRMEvalConfig) -> dict[str, Any]:
    d = replace(data, disp=disp)
    cv = run_method(crm_pipeline(levels=("l3",), **lts_kwargs(c)), d, y, c)
    return {"roc_auc": cv.auc.estimate, "roc_auc_ci": [cv.auc.ci_low, cv.auc.ci_high]}


def causal_analyses(
    lm: LoadedModel,
    pairs: Sequence[PairTrace],
    data: CRMData,
    config: CRMEvalConfig | None = None,
    *,
    peak_layer: int,
    eps: Sequence[float] = (0.1, 0.5, 1.0),
    blocks: dict[str, list[int]] | None = None,
    patch_layers: Sequence[int] | None = None,
    batch_size: int = 8,
    chat: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """Noise injection and activation patching; returns AUCs and deltas per condition."""
    c = config or CRMEvalConfig()
    if data.labels is None:
        raise InputError("causal analyses need labels", field="label")
    y = np.asarray(data.labels)
    tracer = Tracer(lm, batch_size=batch_size)
    n_blocks = lm.info.n_layers
    blocks = blocks or default_blocks(n_blocks, peak_layer)
    if patch_layers is None:
        patch_layers = sorted(
            {
                max(1, min(n_blocks - 1, v))
                for v in (n_blocks // 4, n_blocks // 2, 3 * n_blocks // 4, peak_layer)
            }
        )
    ids_w = [tracer.encode(p.prompt_with, chat=chat) for p in pairs]
    ids_o = [tracer.encode(p.prompt_without, chat=chat) for p in pairs]
    for p, a in zip(pairs, ids_w, strict=True):
        if len(a) != p.n_prompt_tokens_with:
            raise InputError(
                f"re-encoding the prompt gives {len(a)} tokens, the trace has {p.n_prompt_tokens_with} "
                "(another tokenizer, or chat flag mismatch?)",
                record=p.id,
                field="prompt_with",
            )
    n_cond = 1 + len(blocks) * len(eps) + len(patch_layers)
    bar = tqdm(total=n_cond, desc="crm causal", unit="cond", disable=not progress)
    hw = _states(tracer, ids_w, batch_size, None)
    ho = _states(tracer, ids_o, batch_size, None)
    clean = _l3_auc(data, hw - ho, y, c)
    bar.update(1)
    result: dict[str, Any] = {
        "clean": clean,
        "noise": [],
        "patching": [],
        "blocks": blocks,
        "peak_layer": int(peak_layer),
        "features": "L3 only (LTS) + LR; the answer is not regenerated",
        "sigma": "per sequence, over its non-pad positions and hidden dimensions",
    }
    base = clean["roc_auc"]
    for name, rows in blocks.items():
        for e in eps:
            seed = zlib.crc32(f"{c.seed}:{name}:{e}".encode())

            def make(
                k: int,
                lengths: list[int],
                rows: list[int] = rows,
                e: float = e,
                seed: int = seed,
                tag: int = 0,
            ) -> Any:
                g = torch.Generator().manual_seed(seed + 7919 * k + tag)
                return gaussian_noise(lm, rows, e, lengths, g)

            def make_without(k: int, lengths: list[int], make: Callable[..., Any] = make) -> Any:
                return make(k, lengths, tag=1)

            nw = _states(tracer, ids_w, batch_size, make)
            no = _states(tracer, ids_o, batch_size, make_without)
            r = _l3_auc(data, nw - no, y, c)
            result["noise"].append(
                {"block": name, "layers": rows, "eps": e, **r, "delta": r["roc_auc"] - base}
            )
            bar.update(1)
    for row in patch_layers:
        vals = torch.from_numpy(ho[:, row])

        def make_patch(k: int, lengths: list[int], row: int = row, vals: torch.Tensor = vals) -> Any:
            idx = list(batch_ranges(len(ids_w), batch_size))[k]
            return patched_last_token(lm, row, vals[list(idx)])

        pw = _states(tracer, ids_w, batch_size, make_patch)
        r = _l3_auc(data, pw - ho, y, c)
        result["patching"].append({"layer": int(row), **r, "delta": r["roc_auc"] - base})
        bar.update(1)
    bar.close()
    return result


def vocab_back_projection(
    lm: LoadedModel, data: CRMData, config: CRMEvalConfig | None = None, *, k: int = 10
) -> list[dict[str, Any]]:
    """Top-``k`` tokens of each target layer's PC1 direction through the unembedding
    (paper appendix U.2): ``W_U v_l`` ranked by score. Directions are fitted on all samples
    (descriptive). The final norm is not applied: a direction is not a state."""
    from mnemoscope.detectors.crm import LTSProjector

    c = config or CRMEvalConfig()
    proj = LTSProjector(direction="pc", selection=c.selection, variance_threshold=c.variance_threshold).fit(
        data
    )
    head = lm.model.get_output_embeddings()
    if head is None:
        raise InputError("the model has no output embeddings; vocabulary back-projection needs one")
    W = head.weight.detach().float().cpu()
    out = []
    with torch.no_grad():
        for layer, v in zip(proj.layers_, proj.directions_, strict=True):
            scores = W @ torch.from_numpy(v).float()
            top = torch.topk(scores, k).indices.tolist()
            out.append({"layer": int(layer), "tokens": [lm.tokenizer.decode([t]) for t in top], "ids": top})
    return out
