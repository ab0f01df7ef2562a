"""Tracing: model + prompts -> typed traces.

* :class:`Tracer` - batched forward passes capturing hidden states at the last prompt
  token through hooks (O(layers x d) per prompt), log-probs, optional attentions.
* :func:`trace_pairs` - paired traces with and without context (CRM, RePCS).
* :class:`TraceWriter`, :func:`load_traces` - incremental, resumable storage.
"""

from mnemoscope.trace.pair import PairConfig, PairItem, prepare_pair, trace_pairs, trace_prepared
from mnemoscope.trace.store import TraceSet, TraceWriter, load_traces, save_traces
from mnemoscope.trace.templates import (
    PROMPT_TEMPLATES,
    TASK_TEMPLATES,
    PromptBuilder,
    PromptTemplate,
    TaskTemplate,
)
from mnemoscope.trace.tracer import Capture, Tracer
from mnemoscope.trace.types import PairTrace, PromptTrace

__all__ = [
    "PROMPT_TEMPLATES",
    "TASK_TEMPLATES",
    "Capture",
    "PairConfig",
    "PairItem",
    "PairTrace",
    "PromptBuilder",
    "PromptTemplate",
    "PromptTrace",
    "TaskTemplate",
    "TraceSet",
    "TraceWriter",
    "Tracer",
    "load_traces",
    "prepare_pair",
    "save_traces",
    "trace_pairs",
    "trace_prepared",
]
