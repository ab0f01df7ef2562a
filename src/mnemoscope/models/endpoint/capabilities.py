"""What a served model supports and what identifies it: capability probing and the fingerprint.

The probes are a few tiny greedy requests: the tokenize route (``/extras/tokenize`` on
llama-cpp-python, ``/tokenize`` on llama.cpp's server), whether completions echo prompt
log-probs, how many alternatives per position the server returns, and the top-k next-token
log-probs of fixed probes that identify the served weights (:class:`EndpointFingerprint`).
The :class:`~mnemoscope.models.endpoint.client.EndpointClient` caches their answers.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mnemoscope.models.endpoint.parsing import first_top_logprobs
from mnemoscope.models.endpoint.transport import EndpointCapabilityError, EndpointError

if TYPE_CHECKING:
    from mnemoscope.models.endpoint.transport import EndpointTransport

__all__ = [
    "FALLBACKS",
    "FINGERPRINT_PROBES",
    "TOKENIZE_ROUTES",
    "Capabilities",
    "EndpointFingerprint",
    "compare_fingerprints",
    "count_top_k",
    "probe_capabilities",
    "probe_fingerprint",
    "teacher_forcing_gaps",
]


# The fixed probe whose top-k log-probs identify a served model (with a tolerance).
FINGERPRINT_PROBES: tuple[str, ...] = (
    "The capital of France is",
    "1, 2, 3, 4, 5,",
    "Once upon a time, there was a",
)


@dataclass(frozen=True)
class EndpointFingerprint:
    """What identifies a served model: its reported id and the top-k next-token log-probs of
    fixed probes (greedy, no sampling).

    Two servers serving the same weights with the same quantization give the same top-k tokens
    and log-probs equal within numerical noise (thread counts and batch sizes change the last
    digits). ``digest`` hashes the probes' top-5 token sets, for display; identity is decided by
    :func:`compare_fingerprints` with a tolerance.
    """

    model_id: str
    probes: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        h = hashlib.sha256()
        for p in sorted(self.probes):
            top = sorted(self.probes[p].items(), key=lambda kv: -kv[1])[:5]
            h.update(json.dumps([p, sorted(t for t, _ in top)], ensure_ascii=False).encode())
        return h.hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return {"model_id": self.model_id, "digest": self.digest, "probes": self.probes}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EndpointFingerprint:
        return cls(model_id=str(d.get("model_id")), probes={k: dict(v) for k, v in d["probes"].items()})


def compare_fingerprints(a: EndpointFingerprint, b: EndpointFingerprint, tol: float = 0.25) -> str | None:
    """``None`` when ``a`` and ``b`` look like the same served model, else the reason they differ.

    Same model: for every probe, the top-3 tokens of each are in the other's top-k and every
    shared token's log-prob differs by at most ``tol`` nats. The reported model ids are *not*
    compared (an alias changes with the server's flags; the numbers do not).
    """
    for p in sorted(set(a.probes) | set(b.probes)):
        if p not in a.probes or p not in b.probes:
            return f"probe {p!r} missing on one side"
        x, y = a.probes[p], b.probes[p]
        for mine, other in ((x, y), (y, x)):
            for tok, _ in sorted(mine.items(), key=lambda kv: -kv[1])[:3]:
                if tok not in other:
                    return f"probe {p!r}: top token {tok!r} of one model is not in the other's top-k"
        shared = set(x) & set(y)
        worst = max((abs(x[t] - y[t]) for t in shared), default=0.0)
        if worst > tol:
            return f"probe {p!r}: log-probs differ by up to {worst:.3f} nats (tolerance {tol})"
    return None


# Under method "auto": the paths tried, in order, when one refuses a record (TokenAlignmentError or
# a capability it lacks, or any other error of that path's requests: a 4xx refusal, a 5xx after the
# retries, an unparsable answer). echo has none left.
FALLBACKS: dict[str, tuple[str, ...]] = {
    "grammar": ("grammar", "positions", "echo"),
    "positions": ("positions", "grammar", "echo"),
    "native": ("native", "positions"),
    "echo": ("echo",),
}

TOKENIZE_ROUTES: tuple[tuple[str, str], ...] = (
    # (name, path from the server root)
    ("llama-cpp-python", "/extras/tokenize"),
    ("llama.cpp", "/tokenize"),
)


@dataclass
class Capabilities:
    """What one server supports (detected by :meth:`~mnemoscope.models.endpoint.client.EndpointClient.capabilities`)."""

    model_id: str
    server: str
    tokenize: str | None
    completions: bool
    echo_logprobs: bool
    max_logprobs: int
    chat_logprobs: bool | None = None
    notes: list[str] = field(default_factory=list)
    score_method: str = "echo"

    auto: bool = False

    @property
    def method(self) -> str:
        """The log-prob mechanism the audit uses, as reported in ``endpoint_method``. Every
        mechanism gives top-k log-probs only: the KL is the truncated top-k estimate."""
        return self.method_name(self.score_method)

    def method_name(self, score_method: str) -> str:
        """``endpoint_method`` of one scoring path on this server (``none``: it cannot run here)."""
        if score_method == "native" and self.tokenize == "llama.cpp":
            return "native-grammar-forced-topk+llama.cpp"
        if score_method == "grammar" and self.completions and self.tokenize:
            return f"completions-grammar-forced-topk+{self.tokenize}"
        if score_method == "positions" and self.completions and self.tokenize:
            return f"answer-positions-logit-bias-topk+{self.tokenize}"
        if score_method == "echo" and self.completions and self.echo_logprobs and self.tokenize:
            return f"completions-echo-logprobs+{self.tokenize}"
        return "none"

    @property
    def fallbacks(self) -> tuple[str, ...]:
        """The scoring paths tried in order for one record: the chosen one alone unless ``auto``."""
        return FALLBACKS.get(self.score_method, (self.score_method,)) if self.auto else (self.score_method,)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model_id": self.model_id,
            "server": self.server,
            "tokenize": self.tokenize,
            "completions": self.completions,
            "echo_logprobs": self.echo_logprobs,
            "max_logprobs": self.max_logprobs,
            "chat_logprobs": self.chat_logprobs,
            "score_method": self.score_method,
            "method": self.method,
            "auto": self.auto,
            "notes": list(self.notes),
        }


def probe_capabilities(client: EndpointTransport) -> Capabilities:
    """Detect the model id, the tokenize route, whether echoed prompt log-probs work and the
    scoring path ``auto`` picks (the client caches the answer: :meth:`~mnemoscope.models.endpoint.client.EndpointClient.capabilities`).

    The echo probe sends a two-word prompt with ``echo: true, logprobs: 5, max_tokens: 1``
    and requires a top-k dict for every prompt token but the first.
    """
    model = client.model
    server = "unknown"
    tok_route = None
    for name, _path in TOKENIZE_ROUTES:
        try:
            ids = client.tokenize_via(name, "Hello world")
        except EndpointError:
            continue
        if ids:
            tok_route, server = name, name
            break
    client.set_server_kind(server)
    completions, echo, max_lp = False, False, 0
    notes: list[str] = []
    if server == "llama.cpp":
        # llama-server rejects echo with log-probs ("Only no echo is supported"): its native
        # /completion route scores positions (n_probs, token-id grammars) instead
        try:
            data = client.native_completion(
                client.tokenize_via("llama.cpp", "Hello world, this is"), n_predict=1, n_probs=5
            )
            probs = data.get("completion_probabilities") or []
            completions = bool(probs)
            max_lp = min((len(p.get("top_logprobs") or []) for p in probs), default=0)
        except EndpointError as e:
            notes.append(f"native /completion probe failed: {e.reason}")
    try:
        if server == "llama.cpp":
            raise EndpointError("skipped: llama-server does not echo prompt log-probs")
        ch = client.completion("Hello world, this is", max_tokens=1, logprobs=5, echo=True)
        completions = True
        lp = ch.get("logprobs") or {}
        tops = lp.get("top_logprobs") or []
        prompt_tops = [t for t in tops[:-1] if t]
        echo = bool(str(ch.get("text", "")).startswith("Hello world, this is")) and len(prompt_tops) >= 2
        max_lp = min((len(t) for t in tops if t), default=0)
        if not echo:
            notes.append("completions ignore echo+logprobs: no prompt log-probabilities")
    except EndpointError as e:
        if e.status in (404, 405):
            notes.append("no /v1/completions endpoint (chat-only server)")
        else:
            notes.append(f"completions probe failed: {e.reason}")
    method = client.config.method
    if method == "auto":
        if server == "llama.cpp":
            method = "native"
        elif server == "llama-cpp-python":
            method = "grammar"
        elif not echo:
            method = "positions"
        else:
            method = "echo"
    return Capabilities(
        model_id=model,
        server=server,
        tokenize=tok_route,
        completions=completions,
        echo_logprobs=echo,
        max_logprobs=max_lp,
        notes=notes,
        score_method=method,
        auto=client.config.method == "auto",
    )


def teacher_forcing_gaps(caps: Capabilities) -> list[str]:
    """What the server lacks to teacher-force the no-context path on ``caps.score_method``
    (empty: nothing; :meth:`~mnemoscope.models.endpoint.client.EndpointClient.require_teacher_forcing` raises on the rest)."""
    missing = []
    if caps.score_method == "native" and caps.server != "llama.cpp":
        missing.append("llama.cpp's native /completion route (method 'native')")
    elif caps.score_method == "grammar" and caps.server != "llama-cpp-python":
        missing.append("llama-cpp-python's GBNF `grammar` on /v1/completions (method 'grammar')")
    elif not caps.completions:
        missing.append(
            "a /v1/completions endpoint" if caps.server != "llama.cpp" else "a working /completion"
        )
    elif caps.score_method == "echo" and not caps.echo_logprobs:
        missing.append("prompt log-probabilities (completions with echo=true and logprobs)")
    if caps.tokenize is None:
        missing.append("a tokenize endpoint (/extras/tokenize or /tokenize) for exact token alignment")
    return missing


def count_top_k(client: EndpointTransport, caps: Capabilities, k: int) -> int:
    """How many alternatives the server returns at one position when asked for ``k``."""
    if caps.score_method == "native" and caps.tokenize is not None:
        ids = client.tokenize_via(caps.tokenize, "The capital of France is")
        data = client.native_completion(ids, n_predict=1, n_probs=k)
        probs = data.get("completion_probabilities") or [{}]
        return len(probs[0].get("top_logprobs") or [])
    ch = client.completion("The capital of France is", max_tokens=1, logprobs=k)
    return len(first_top_logprobs(ch))


def probe_fingerprint(client: EndpointTransport, k: int = 10) -> EndpointFingerprint:
    """Top-k next-token log-probs of :data:`FINGERPRINT_PROBES` (greedy, one token each)."""
    probes: dict[str, dict[str, float]] = {}
    for p in FINGERPRINT_PROBES:
        ch = client.completion(p, max_tokens=1, logprobs=k)
        top = first_top_logprobs(ch)
        if not top:
            raise EndpointCapabilityError(
                "the server returned no top-k log-probs for the fingerprint probe (does it ignore `logprobs`?)",
                endpoint=client.endpoint,
            )
        probes[p] = {str(t): round(float(v), 4) for t, v in top.items() if math.isfinite(float(v))}
    return EndpointFingerprint(model_id=client.model, probes=probes)
