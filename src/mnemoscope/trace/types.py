"""Typed traces: what the tracer returns and what every detector consumes.

Index conventions (identical to transformers' ``output_hidden_states=True``):

* ``hidden[0]`` is the embedding output (the input of block 1);
* ``hidden[l]`` for ``1 <= l < L`` is the output of block ``l``;
* ``hidden[L]`` is the output of the last block **after the final norm** (what the
  LM head sees), as transformers reports it for llama, qwen2, gemma3, gpt2, ...;
* ``hidden_prenorm`` is the output of block ``L`` *before* the final norm.

So a hidden array has ``L + 1`` rows for a model with ``L`` blocks.
All arrays are numpy, float32 for states and log-probabilities, int64 for token ids.
Shapes are written as dimension names: ``layer`` = L + 1, ``d`` = hidden size,
``seq`` = prompt tokens, ``step`` = generated positions, ``vocab``, ``head``, ``k``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

import numpy as np

__all__ = ["Array", "CRMExtras", "PairTrace", "PromptTrace"]

# A numpy array annotated with its dimension names, e.g. Array["layer d"]; documentation only.
Array = Annotated[np.ndarray, "shape"]


@dataclass(frozen=True)
class PromptTrace:
    """One forward pass over one prompt.

    Attributes:
        prompt: the prompt text (``""`` when the caller passed token ids).
        token_ids: ``[seq]`` the prompt's tokens, special tokens included, no padding.
        tokens: the token strings.
        hidden: ``[layer d]`` hidden states at the last prompt token (see module doc).
        hidden_prenorm: ``[d]`` output of the last block before the final norm, last token
            (``None`` when the architecture is unknown and the tracer fell back to
            ``output_hidden_states``).
        logprobs: ``[vocab]`` next-token log-probabilities after the last prompt token.
        hidden_all: ``[layer seq d]`` hidden states at every position (opt-in).
        hidden_prenorm_all: ``[seq d]`` last block before the final norm, every position (opt-in).
        logprobs_all: ``[seq vocab]`` row ``t`` = log p(next token | tokens[: t + 1]) (opt-in).
        attentions: ``[layer head seq seq]`` attention weights, ``layer`` = L here (opt-in).
        token_logprobs: ``[seq-1]`` log p(token t+1 | tokens[: t + 1]) (opt-in, ``token_stats``).
        token_mu: ``[seq-1]`` E_z[log p(z)] under the distribution at position t (= -entropy).
        token_sigma: ``[seq-1]`` standard deviation of log p(z) under that distribution.
    """

    prompt: str
    token_ids: np.ndarray
    tokens: tuple[str, ...]
    hidden: np.ndarray | None = None
    hidden_prenorm: np.ndarray | None = None
    logprobs: np.ndarray | None = None
    hidden_all: np.ndarray | None = None
    hidden_prenorm_all: np.ndarray | None = None
    logprobs_all: np.ndarray | None = None
    attentions: np.ndarray | None = None
    token_logprobs: np.ndarray | None = None
    token_mu: np.ndarray | None = None
    token_sigma: np.ndarray | None = None

    @property
    def n_tokens(self) -> int:
        return int(self.token_ids.shape[0])


@dataclass(frozen=True)
class PairTrace:
    """The unit of analysis of CRM and RePCS: one (context, query) traced with and without context.

    The answer ``y`` is generated greedily on the with-context path (up to
    ``max_new_tokens``, stopping after EOS, which is counted as a step). Both paths are
    then teacher-forced on ``y`` so that step ``t`` compares
    ``p_with(. | c, q, y_<t)`` and ``p_without(. | q, y_<t)`` at the *same* answer
    position, whatever the two prompts' lengths.

    Attributes:
        id: record id.
        context, query: the inputs.
        prompt_with, prompt_without: the rendered prompts (same template, empty context).
        n_prompt_tokens_with, n_prompt_tokens_without: prompt lengths in tokens.
        h_with, h_without: ``[layer d]`` states at the last prompt token of each path.
        h_with_prenorm, h_without_prenorm: ``[d]`` last block before the final norm (or ``None``).
        answer_ids: ``[step]`` generated token ids (EOS included when generated).
        answer_with: decoded with-context answer (special tokens removed).
        kl_steps: ``[step]`` KL(p_with || p_without) in nats at each aligned position.
        kl_rev_steps: ``[step]`` KL(p_without || p_with).
        entropy_with, entropy_without: ``[step]`` entropies (nats) of the two distributions.
        logprob_answer_with, logprob_answer_without: ``[step]`` log p(y_t) on each path.
        topk_ids_with, topk_logprobs_with: ``[step k]`` top-k of the with-context distribution.
        topk_ids_without, topk_logprobs_without: ``[step k]`` top-k of the no-context distribution.
        stopped_at_eos: the answer ended with EOS before ``max_new_tokens``.
        identical_prompts: the two prompts are the same token sequence (empty context):
            every statistic comparing the paths is 0 by construction, not evidence of memorization.
        answer_without_ids, answer_without: greedy answer of the no-context path (opt-in).
        label: 1 = the flagged condition (member/memorized), 0 = not, ``None`` = unknown.
        template: the prompt builder settings used.
        answer_cut: ``None`` when the answer was not cut; when a stop sequence of the prompt
            layout ended it (:func:`mnemoscope.trace.pair.cut_at_stop`): ``{"at", "stop",
            "token"}`` (character offset of the stop in the generated text, the stop, the index
            of the first token not audited).
        backend: empty for an in-process trace; for a served model
            (:mod:`mnemoscope.trace.endpoint`) ``{"kind": "endpoint", "endpoint", "model",
            "method", "kl_estimator", "k", "unmeasured", "notes"}``: hidden states are then
            ``None``, entropies NaN (not measured) and ``kl_steps`` the top-k estimate.
            An in-process trace of passages records its leave-one-passage-out scoring under
            ``"passage_ablation"`` (:mod:`mnemoscope.trace.ablation`).
        passages: the retrieved passages the context was joined from
            (:func:`mnemoscope.trace.passages.join_passages`; ``context`` equals their join),
            ``None`` when the caller gave one context string.
        passage_ablated: the indices ``j`` into ``passages`` that were left out and scored, in the
            rows' order of ``passage_logprobs`` (empty: none was).
        passage_logprobs: ``[len(passage_ablated) step]`` log p(y_t | context without passage j,
            query, y_<t) of the same answer (teacher-forced, aligned like ``logprob_answer_with``);
            ``None`` when no passage was ablated.
    """

    id: str
    context: str
    query: str
    prompt_with: str
    prompt_without: str
    n_prompt_tokens_with: int
    n_prompt_tokens_without: int
    h_with: np.ndarray | None
    h_without: np.ndarray | None
    h_with_prenorm: np.ndarray | None
    h_without_prenorm: np.ndarray | None
    answer_ids: np.ndarray
    answer_with: str
    kl_steps: np.ndarray
    kl_rev_steps: np.ndarray
    entropy_with: np.ndarray
    entropy_without: np.ndarray
    logprob_answer_with: np.ndarray
    logprob_answer_without: np.ndarray
    topk_ids_with: np.ndarray
    topk_logprobs_with: np.ndarray
    topk_ids_without: np.ndarray
    topk_logprobs_without: np.ndarray
    stopped_at_eos: bool
    identical_prompts: bool
    answer_without_ids: np.ndarray | None = None
    answer_without: str | None = None
    label: int | None = None
    template: dict[str, object] = field(default_factory=dict)
    answer_cut: dict[str, Any] | None = None
    backend: Any = field(default_factory=dict)  # dict[str, Any] (Any: constructors pass **arrays)
    # typed Any like ``backend`` (constructors pass **arrays); __post_init__ makes them tuples
    passages: Any = None  # tuple[str, ...] | None
    passage_ablated: Any = ()  # tuple[int, ...]
    passage_logprobs: np.ndarray | None = None

    def __post_init__(self) -> None:
        # a stored trace gives lists back (JSON); a caller may pass any sequence
        if self.passages is not None and not isinstance(self.passages, tuple):
            object.__setattr__(self, "passages", tuple(str(p) for p in self.passages))
        if not isinstance(self.passage_ablated, tuple):
            object.__setattr__(self, "passage_ablated", tuple(int(j) for j in self.passage_ablated))

    @property
    def n_steps(self) -> int:
        """Number of aligned generated positions (``<= max_new_tokens``)."""
        return int(self.kl_steps.shape[0])

    @property
    def kl_sum(self) -> float:
        return float(self.kl_steps.sum())

    @property
    def kl_mean(self) -> float:
        return float(self.kl_steps.mean()) if self.n_steps else 0.0

    @property
    def displacement(self) -> np.ndarray:
        """``[layer d]`` h_with - h_without (CRM's d_l)."""
        if self.h_with is None or self.h_without is None:
            raise ValueError(f"pair {self.id}: hidden states were not captured")
        return self.h_with - self.h_without


@dataclass(frozen=True)
class CRMExtras:
    """Per-record arrays CRM's baselines need beyond the pair trace (``mnemoscope crm extract``).

    Attributes:
        id: the record id (matches the pair trace).
        logit_lens_kl: ``[layer]`` KL(p_with || p_without) of the logit lens at the last
            prompt token: each layer's state through the final norm and the LM head
            (row L is already normed).
        attn_flow: ``[L]`` attention mass from the last prompt token to the context tokens,
            summed over context positions and averaged over heads, per layer.
        n_context_tokens: how many prompt tokens the context occupies.
        static_hidden: ``[d]`` final-layer (post-norm) state at the last token of the
            document alone, without any prompt (the static MIA baseline).
        doc_token_logprobs, doc_token_mu, doc_token_sigma: ``[seq-1]`` token statistics of
            the document alone (the likelihood baselines).
        grad_norm: ``[layer]`` ||d NLL(answer | c, q) / d h_l|| over all positions (optional).
    """

    id: str
    logit_lens_kl: np.ndarray | None = None
    attn_flow: np.ndarray | None = None
    n_context_tokens: int | None = None
    static_hidden: np.ndarray | None = None
    doc_token_logprobs: np.ndarray | None = None
    doc_token_mu: np.ndarray | None = None
    doc_token_sigma: np.ndarray | None = None
    grad_norm: np.ndarray | None = None
