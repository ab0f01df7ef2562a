"""A client for OpenAI-compatible inference servers (llama.cpp, vLLM, TGI, SGLang, ...).

mnemoscope audits a served model only through what the server returns: completions with
top-k log-probabilities, the same log-probabilities over forced answers (teacher forcing),
and the server's tokenizer. This package speaks HTTP; :mod:`mnemoscope.trace.endpoint` turns
the answers into a :class:`~mnemoscope.trace.types.PairTrace`. One module per concern:

* :mod:`~mnemoscope.models.endpoint.transport`: settings (:class:`EndpointConfig`), errors, the
  HTTP client with its retries and concurrency bound (:class:`EndpointTransport`), ``map_concurrently``;
* :mod:`~mnemoscope.models.endpoint.client`: :class:`EndpointClient`, the transport plus the
  server's capabilities probed once (what the trace and the audit use);
* :mod:`~mnemoscope.models.endpoint.capabilities`: what a server supports (:class:`Capabilities`,
  the scoring path ``auto`` picks and its fallbacks) and what identifies the served weights
  (:class:`EndpointFingerprint`);
* :mod:`~mnemoscope.models.endpoint.parsing`: the log-probs blocks servers return, in either format.
"""

from mnemoscope.models.endpoint.capabilities import (
    FALLBACKS,
    FINGERPRINT_PROBES,
    TOKENIZE_ROUTES,
    Capabilities,
    EndpointFingerprint,
    compare_fingerprints,
)
from mnemoscope.models.endpoint.client import EndpointClient
from mnemoscope.models.endpoint.parsing import (
    ChoiceLogprobs,
    choice_logprobs,
    first_top_logprobs,
    require_choice_logprobs,
)
from mnemoscope.models.endpoint.transport import (
    SCORE_METHODS,
    EndpointCapabilityError,
    EndpointConfig,
    EndpointError,
    EndpointTransport,
    TokenAlignmentError,
    map_concurrently,
)

__all__ = [
    "FALLBACKS",
    "FINGERPRINT_PROBES",
    "SCORE_METHODS",
    "TOKENIZE_ROUTES",
    "Capabilities",
    "ChoiceLogprobs",
    "EndpointCapabilityError",
    "EndpointClient",
    "EndpointConfig",
    "EndpointError",
    "EndpointFingerprint",
    "EndpointTransport",
    "TokenAlignmentError",
    "choice_logprobs",
    "compare_fingerprints",
    "first_top_logprobs",
    "map_concurrently",
    "require_choice_logprobs",
]
