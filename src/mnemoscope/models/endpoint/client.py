"""The client of one served model: the HTTP transport plus what the server supports, probed once.

:class:`EndpointClient` is what the trace and the audit use: the requests of
:class:`~mnemoscope.models.endpoint.transport.EndpointTransport`, the server's
:class:`~mnemoscope.models.endpoint.capabilities.Capabilities` (cached after the first probe), the
checks that refuse a server the audit cannot use, and tokenization through the detected route.
"""

from __future__ import annotations

from typing import Any

from mnemoscope.models.endpoint.capabilities import (
    Capabilities,
    EndpointFingerprint,
    count_top_k,
    probe_capabilities,
    probe_fingerprint,
    teacher_forcing_gaps,
)
from mnemoscope.models.endpoint.transport import (
    EndpointCapabilityError,
    EndpointConfig,
    EndpointTransport,
)

__all__ = ["EndpointClient"]


class EndpointClient(EndpointTransport):
    """HTTP client of one served model with its capabilities (thread-safe)."""

    def __init__(self, config: EndpointConfig, *, transport: Any = None):
        super().__init__(config, transport=transport)
        self._caps: Capabilities | None = None
        self._top_k_ok: set[int] = set()

    def __enter__(self) -> EndpointClient:
        return self

    def capabilities(self, *, refresh: bool = False) -> Capabilities:
        """What the server supports, probed once (:func:`~mnemoscope.models.endpoint.capabilities.probe_capabilities`)."""
        with self._lock:
            if self._caps is not None and not refresh:
                return self._caps
        caps = probe_capabilities(self)
        with self._lock:
            self._caps = caps
        return caps

    def require_teacher_forcing(self) -> Capabilities:
        """The capabilities, or an :class:`EndpointCapabilityError` saying what is missing."""
        caps = self.capabilities()
        missing = teacher_forcing_gaps(caps)
        if missing:
            raise EndpointCapabilityError(
                "cannot teacher-force the no-context path: the server lacks "
                + " and ".join(missing)
                + ". Chat-only APIs (e.g. OpenAI's hosted chat completions) return log-probs of generated "
                "tokens only, so RePCS's no-context scoring is impossible there; only the weaker "
                "closed-book generation comparison is available (`mnemoscope audit --endpoint URL --closed-book-test`, "
                "docs/endpoint.md)",
                endpoint=self.endpoint,
            )
        return caps

    def require_top_k(self, k: int) -> None:
        """Refuse a server that returns fewer than ``k`` alternatives per position (some cap
        ``logprobs``: OpenAI's legacy completions at 5)."""
        with self._lock:
            if k in self._top_k_ok:
                return
        got = count_top_k(self, self.capabilities(), k)
        if got < k:
            raise EndpointCapabilityError(
                f"the server returned {got} alternatives per position for logprobs={k}: fewer than k = {k} "
                "(it caps or ignores `logprobs`); use a smaller --top-k",
                endpoint=self.endpoint,
            )
        with self._lock:
            self._top_k_ok.add(k)

    def fingerprint(self, k: int = 10) -> EndpointFingerprint:
        """Top-k next-token log-probs of the fingerprint probes (:func:`~mnemoscope.models.endpoint.capabilities.probe_fingerprint`)."""
        self.capabilities()  # the server's kind sets the greedy settings of the probes
        return probe_fingerprint(self, k)

    def tokenize(self, text: str) -> list[int]:
        """The server's token ids for ``text`` as its completions endpoint would see it as a prompt
        (special tokens parsed, BOS added when the model adds one)."""
        route = self.capabilities().tokenize
        if route is None:
            raise EndpointCapabilityError(
                "the server exposes no tokenize endpoint (/extras/tokenize or /tokenize): token alignment "
                "cannot be checked, so the audit refuses to compare positions",
                endpoint=self.endpoint,
            )
        return self.tokenize_via(route, text)
