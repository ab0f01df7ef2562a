"""A client for OpenAI-compatible inference servers (llama.cpp, vLLM, TGI, SGLang, ...).

mnemoscope audits a served model only through what the server returns: completions with
top-k log-probabilities, the same log-probabilities over an echoed prompt (teacher forcing),
and the server's tokenizer. This module speaks HTTP; :mod:`mnemoscope.trace.endpoint` turns
the answers into a :class:`~mnemoscope.trace.types.PairTrace`.

* ``base_url`` is the server's OpenAI base URL ending in ``/v1`` (``http://127.0.0.1:8080/v1``);
  server-specific routes (``/extras/tokenize``, ``/tokenize``) are resolved against its root.
* The API key is read from an environment variable named by the caller (``api_key_env``);
  its value is never logged, stored in a record, or put in an error message.
* Every request has a timeout; connection errors, time-outs, 429 and 5xx are retried with
  exponential backoff (``retries`` times); a 4xx other than 429 is not retried.
* ``concurrency`` bounds the requests in flight from one client (threads share it).

Errors are :class:`EndpointError` (a :class:`~mnemoscope.errors.MnemoscopeError`): one line
naming the endpoint and what was missing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mnemoscope.errors import MnemoscopeError

__all__ = [
    "FINGERPRINT_PROBES",
    "ChoiceLogprobs",
    "EndpointCapabilityError",
    "EndpointClient",
    "EndpointConfig",
    "EndpointError",
    "EndpointFingerprint",
    "TokenAlignmentError",
    "choice_logprobs",
    "compare_fingerprints",
    "first_top_logprobs",
    "require_choice_logprobs",
]

log = logging.getLogger(__name__)


class EndpointError(MnemoscopeError):
    """The inference server could not be reached or answered something unusable."""

    def __init__(self, message: str, *, endpoint: str | None = None, status: int | None = None):
        self.endpoint = endpoint
        self.status = status
        self.reason = message
        super().__init__(f"endpoint {endpoint}: {message}" if endpoint else message)


class EndpointCapabilityError(EndpointError):
    """The server lacks a mechanism the audit needs (prompt log-probs, top-k, tokenization)."""


class TokenAlignmentError(EndpointError):
    """The server's tokens do not line up with the answer: positions cannot be compared."""


@dataclass(frozen=True)
class EndpointConfig:
    """How to reach one served model.

    Attributes:
        base_url: the OpenAI base URL ending in ``/v1``.
        model: the served model's name (``None``: the first of ``GET /v1/models``).
        api_key_env: name of the environment variable holding the API key (``None``: no key).
        timeout: seconds per request (connect and read).
        retries: extra attempts after a connection error, time-out, 429 or 5xx.
        backoff: first retry delay in seconds, doubled at each retry.
        concurrency: requests in flight at once from this client.
        method: how answer positions are scored (:data:`SCORE_METHODS`): ``auto`` picks ``native``
            on llama.cpp's C++ server, ``grammar`` on llama-cpp-python, else ``echo`` when the
            server echoes prompt log-probs (else ``positions``); under ``auto`` a record that the
            first path refuses (e.g. a prefix that re-tokenizes differently) is scored by the next
            sound one (:data:`FALLBACKS`). A named method is used alone. See
            :mod:`mnemoscope.trace.endpoint_score`.
    """

    base_url: str
    model: str | None = None
    api_key_env: str | None = None
    timeout: float = 120.0
    retries: int = 2
    backoff: float = 0.5
    concurrency: int = 2
    method: str = "auto"

    def __post_init__(self) -> None:
        url = self.base_url.rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise EndpointError(f"the base URL must start with http:// or https://, got {self.base_url!r}")
        if not url.endswith("/v1"):
            raise EndpointError(
                f"the base URL must end in /v1 (the OpenAI API root, e.g. http://127.0.0.1:8080/v1), "
                f"got {self.base_url!r}"
            )
        object.__setattr__(self, "base_url", url)
        if self.timeout <= 0 or self.retries < 0 or self.backoff < 0 or self.concurrency < 1:
            raise EndpointError("timeout > 0, retries >= 0, backoff >= 0 and concurrency >= 1 are required")
        if self.method not in ("auto", *SCORE_METHODS):
            raise EndpointError(
                f"method must be auto or one of {', '.join(SCORE_METHODS)}, got {self.method!r}"
            )

    @property
    def root(self) -> str:
        return self.base_url[: -len("/v1")]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready settings: the key's variable name only, never its value."""
        return {
            "base_url": self.base_url,
            "model": self.model,
            "api_key_env": self.api_key_env,
            "timeout": self.timeout,
            "retries": self.retries,
            "concurrency": self.concurrency,
            "method": self.method,
        }


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


# How answer positions are scored (mnemoscope.trace.endpoint_score); the name in endpoint_method.
SCORE_METHODS: tuple[str, ...] = ("echo", "positions", "grammar", "native")

# Under method "auto": the paths tried, in order, when one refuses a record (TokenAlignmentError or
# a capability it lacks). native needs no fallback (token ids in and out); echo has none left.
FALLBACKS: dict[str, tuple[str, ...]] = {
    "grammar": ("grammar", "positions", "echo"),
    "positions": ("positions", "grammar", "echo"),
    "native": ("native",),
    "echo": ("echo",),
}

_TOKENIZE_ROUTES: tuple[tuple[str, str], ...] = (
    # (name, path from the server root)
    ("llama-cpp-python", "/extras/tokenize"),
    ("llama.cpp", "/tokenize"),
)


@dataclass
class Capabilities:
    """What one server supports (detected by :meth:`EndpointClient.capabilities`)."""

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


class EndpointClient:
    """HTTP client of one served model (thread-safe; see the module doc)."""

    def __init__(self, config: EndpointConfig, *, transport: Any = None):
        import httpx

        self.config = config
        headers = {"Content-Type": "application/json"}
        if config.api_key_env:
            key = os.environ.get(config.api_key_env)
            if not key:
                raise EndpointError(
                    f"the API key variable {config.api_key_env} is not set (or empty)",
                    endpoint=config.base_url,
                )
            headers["Authorization"] = f"Bearer {key}"
        self._http = httpx.Client(timeout=httpx.Timeout(config.timeout), headers=headers, transport=transport)
        self._sem = threading.BoundedSemaphore(config.concurrency)
        self._model: str | None = config.model
        self._caps: Capabilities | None = None
        self._server_kind: str | None = None
        self._top_k_ok: set[int] = set()
        self._lock = threading.Lock()
        self.n_requests = 0
        # results of one-off probes of the server (e.g. whether grammar forcing reports the
        # unconstrained distribution), keyed by probe name; filled by mnemoscope.trace
        self.probes: dict[str, Any] = {}

    # -- plumbing -------------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        return self.config.base_url

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> EndpointClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self, method: str, path: str, body: dict[str, Any] | None = None, *, root: bool = False
    ) -> Any:
        """One JSON request with retries; ``path`` is under ``/v1`` unless ``root``.

        Raises:
            EndpointError: unreachable, timed out, HTTP error (status kept), or not JSON.
        """
        import httpx

        url = (self.config.root if root else self.config.base_url) + path
        delay = self.config.backoff
        last: str = ""
        status: int | None = None
        for attempt in range(self.config.retries + 1):
            if attempt:
                time.sleep(delay)
                delay *= 2
            try:
                with self._sem:
                    self.n_requests += 1
                    r = self._http.request(method, url, json=body)
            except httpx.TimeoutException:
                last, status = f"timed out after {self.config.timeout:g} s", None
                continue
            except httpx.HTTPError as e:
                last, status = f"unreachable ({type(e).__name__}: {_redact(str(e))})", None
                continue
            status = r.status_code
            if status == 429 or status >= 500:
                last = f"HTTP {status}: {_short(r.text)}"
                continue
            if status >= 400:
                raise EndpointError(
                    f"{method} {path} -> HTTP {status}: {_short(r.text)}", endpoint=url, status=status
                )
            try:
                return r.json()
            except ValueError as e:
                raise EndpointError(
                    f"{method} {path} did not return JSON", endpoint=url, status=status
                ) from e
        tries = self.config.retries + 1
        raise EndpointError(
            f"{method} {path} {last} ({tries} attempt{'s' * (tries > 1)})", endpoint=url, status=status
        )

    # -- model ----------------------------------------------------------------------------------

    def models(self) -> list[str]:
        data = self.request("GET", "/models")
        try:
            return [str(m["id"]) for m in data["data"]]
        except (KeyError, TypeError) as e:
            raise EndpointError("GET /models did not list models", endpoint=self.endpoint) from e

    @property
    def model(self) -> str:
        """The served model's name (``--endpoint-model``, else the first the server lists)."""
        with self._lock:
            if self._model is None:
                names = self.models()
                if not names:
                    raise EndpointError("the server lists no model", endpoint=self.endpoint)
                self._model = names[0]
            return self._model

    # -- tokenizer ------------------------------------------------------------------------------

    def _tokenize_via(self, route: str, text: str) -> list[int]:
        if route == "llama-cpp-python":
            data = self.request("POST", "/extras/tokenize", {"input": text, "model": self.model}, root=True)
        elif route == "llama.cpp":
            data = self.request("POST", "/tokenize", {"content": text, "add_special": True}, root=True)
        else:
            raise EndpointCapabilityError(f"unknown tokenize route {route}", endpoint=self.endpoint)
        toks = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(toks, list) or not all(isinstance(t, int) for t in toks):
            raise EndpointError(f"{route} tokenize returned no token list", endpoint=self.endpoint)
        return [int(t) for t in toks]

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
        return self._tokenize_via(route, text)

    # -- completions ----------------------------------------------------------------------------

    def completion(
        self,
        prompt: str,
        *,
        max_tokens: int,
        logprobs: int | None = None,
        echo: bool = False,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Greedy ``POST /v1/completions`` (temperature 0, no repetition penalties); the first choice."""
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "top_p": 1.0,
            "frequency_penalty": 0.0,
            "presence_penalty": 0.0,
            "echo": echo,
            "seed": 0,
        }
        if self._server_kind in ("llama-cpp-python", "llama.cpp"):
            # llama.cpp's own repetition penalty defaults to 1.1: greedy would not be greedy
            body["repeat_penalty"] = 1.0
        if logprobs is not None:
            body["logprobs"] = logprobs
        if extra:
            body.update(extra)
        data = self.request("POST", "/completions", body)
        try:
            choice = dict(data["choices"][0])
        except (KeyError, IndexError, TypeError) as e:
            raise EndpointError("POST /completions returned no choice", endpoint=self.endpoint) from e
        choice["usage"] = data.get("usage") or {}
        return choice

    def native_completion(
        self,
        prompt: list[int] | str,
        *,
        n_predict: int,
        n_probs: int = 0,
        grammar: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Greedy ``POST /completion`` on llama.cpp's C++ server (token ids or text in; ids, top-k
        log-probs of the *unconstrained* distribution and ``stop_type`` out); the prompt's KV cache
        is re-used across requests (``cache_prompt``)."""
        body: dict[str, Any] = {
            "prompt": prompt,
            "n_predict": n_predict,
            "n_probs": n_probs,
            "temperature": 0.0,
            "top_k": 0,
            "top_p": 1.0,
            "min_p": 0.0,
            "repeat_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "dry_multiplier": 0.0,
            "post_sampling_probs": False,
            "cache_prompt": True,
            "seed": 0,
        }
        if grammar is not None:
            body["grammar"] = grammar
        if extra:
            body.update(extra)
        data = self.request("POST", "/completion", body, root=True)
        if not isinstance(data, dict):
            raise EndpointError("POST /completion did not return an object", endpoint=self.endpoint)
        return dict(data)

    # -- capabilities ---------------------------------------------------------------------------

    def capabilities(self, *, refresh: bool = False) -> Capabilities:
        """Detect (once) the model id, the tokenize route and whether echoed prompt log-probs work.

        The echo probe sends a two-word prompt with ``echo: true, logprobs: 5, max_tokens: 1``
        and requires a top-k dict for every prompt token but the first.
        """
        with self._lock:
            if self._caps is not None and not refresh:
                return self._caps
        model = self.model
        server = "unknown"
        tok_route = None
        for name, _path in _TOKENIZE_ROUTES:
            try:
                ids = self._tokenize_via(name, "Hello world")
            except EndpointError:
                continue
            if ids:
                tok_route, server = name, name
                break
        self._server_kind = server
        completions, echo, max_lp = False, False, 0
        notes: list[str] = []
        if server == "llama.cpp":
            # llama-server rejects echo with log-probs ("Only no echo is supported"): its native
            # /completion route scores positions (n_probs, token-id grammars) instead
            try:
                data = self.native_completion(
                    self._tokenize_via("llama.cpp", "Hello world, this is"), n_predict=1, n_probs=5
                )
                probs = data.get("completion_probabilities") or []
                completions = bool(probs)
                max_lp = min((len(p.get("top_logprobs") or []) for p in probs), default=0)
            except EndpointError as e:
                notes.append(f"native /completion probe failed: {e.reason}")
        try:
            if server == "llama.cpp":
                raise EndpointError("skipped: llama-server does not echo prompt log-probs")
            ch = self.completion("Hello world, this is", max_tokens=1, logprobs=5, echo=True)
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
        method = self.config.method
        if method == "auto":
            if server == "llama.cpp":
                method = "native"
            elif server == "llama-cpp-python":
                method = "grammar"
            elif not echo:
                method = "positions"
            else:
                method = "echo"
        caps = Capabilities(
            model_id=model,
            server=server,
            tokenize=tok_route,
            completions=completions,
            echo_logprobs=echo,
            max_logprobs=max_lp,
            notes=notes,
            score_method=method,
            auto=self.config.method == "auto",
        )
        with self._lock:
            self._caps = caps
        return caps

    def require_teacher_forcing(self) -> Capabilities:
        """The capabilities, or an :class:`EndpointCapabilityError` saying what is missing."""
        caps = self.capabilities()
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
        if self.capabilities().score_method == "native":
            data = self.native_completion(self.tokenize("The capital of France is"), n_predict=1, n_probs=k)
            probs = data.get("completion_probabilities") or [{}]
            got = len(probs[0].get("top_logprobs") or [])
        else:
            ch = self.completion("The capital of France is", max_tokens=1, logprobs=k)
            got = len(first_top_logprobs(ch))
        if got < k:
            raise EndpointCapabilityError(
                f"the server returned {got} alternatives per position for logprobs={k}: fewer than k = {k} "
                "(it caps or ignores `logprobs`); use a smaller --top-k",
                endpoint=self.endpoint,
            )
        with self._lock:
            self._top_k_ok.add(k)

    def fingerprint(self, k: int = 10) -> EndpointFingerprint:
        """Top-k next-token log-probs of :data:`FINGERPRINT_PROBES` (greedy, one token each)."""
        self.capabilities()
        probes: dict[str, dict[str, float]] = {}
        for p in FINGERPRINT_PROBES:
            ch = self.completion(p, max_tokens=1, logprobs=k)
            top = first_top_logprobs(ch)
            if not top:
                raise EndpointCapabilityError(
                    "the server returned no top-k log-probs for the fingerprint probe (does it ignore "
                    "`logprobs`?)",
                    endpoint=self.endpoint,
                )
            probes[p] = {str(t): round(float(v), 4) for t, v in top.items() if math.isfinite(float(v))}
        return EndpointFingerprint(model_id=self.model, probes=probes)


@dataclass(frozen=True)
class ChoiceLogprobs:
    """The per-token log-probs of one completions choice, whatever format the server used.

    ``ids`` / ``top_ids``: the token ids, when the server gives them (llama.cpp's ``llama-server``
    does in the chat-style format); ``None`` otherwise.
    """

    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    ids: list[int] | None = None
    top_ids: list[dict[int, float]] | None = None


def _top_map(entry: Any) -> dict[str, float] | None:
    if entry is None:
        return None
    if isinstance(entry, Mapping):
        return {str(a): float(b) for a, b in entry.items()}
    if isinstance(entry, list):  # [{"token": ..., "logprob": ...}, ...]
        out: dict[str, float] = {}
        for e in entry:
            out.setdefault(str(e["token"]), float(e["logprob"]))
        return out
    raise ValueError("a top_logprobs entry is not a token -> logprob map")


def choice_logprobs(choice: Mapping[str, Any]) -> ChoiceLogprobs | None:
    """Parse a completions (or chat) choice's ``logprobs`` block, in either format servers use.

    * the legacy completions format (OpenAI, llama-cpp-python, vLLM): ``tokens``,
      ``token_logprobs`` and ``top_logprobs`` (a ``{token: logprob}`` map, or a list of
      ``{token, logprob}``, per position);
    * the chat-style format (OpenAI chat; llama.cpp's ``llama-server`` on ``/v1/completions``
      too): ``content`` = a list of ``{token, logprob, id?, top_logprobs: [{token, logprob,
      id?}, ...]}``.

    Within one position, a spelling that several alternatives share keeps its most probable
    (first listed) log-prob. The one parser every endpoint path uses (generation, forced
    positions, grammar, echo, the fingerprint, the proxy's served log-probs).

    Returns:
        ``None`` when the choice has no log-probs block in either format.

    Raises:
        ValueError: a block in one of the formats whose lists disagree in length or whose
            entries are malformed.

    Example:
        >>> choice_logprobs({"logprobs": {"tokens": [" Paris"], "token_logprobs": [-0.1],
        ...     "top_logprobs": [{" Paris": -0.1, " London": -4.3}]}}).top_logprobs
        [{' Paris': -0.1, ' London': -4.3}]
        >>> lp = choice_logprobs({"logprobs": {"content": [{"token": " Paris", "logprob": -0.1, "id": 7,
        ...     "top_logprobs": [{"token": " Paris", "logprob": -0.1, "id": 7}]}]}})
        >>> lp.tokens, lp.ids, lp.top_ids
        ([' Paris'], [7], [{7: -0.1}])
        >>> choice_logprobs({"text": "Paris"}) is None
        True
    """
    lp = choice.get("logprobs")
    if not isinstance(lp, Mapping):
        return None
    if isinstance(lp.get("tokens"), list):
        toks = [str(t) for t in lp["tokens"]]
        own = lp.get("token_logprobs") or [None] * len(toks)
        tops = lp.get("top_logprobs") or [None] * len(toks)
        if not (len(toks) == len(own) == len(tops)):
            raise ValueError(
                "the logprobs lists (tokens, token_logprobs, top_logprobs) have different lengths"
            )
        return ChoiceLogprobs(
            toks, [None if v is None else float(v) for v in own], [_top_map(t) for t in tops]
        )
    content = lp.get("content")
    if isinstance(content, list):
        toks, own_c, tops_c = [], [], []
        ids: list[int] | None = []
        top_ids: list[dict[int, float]] | None = []
        for e in content:
            if not isinstance(e, Mapping) or "token" not in e:
                raise ValueError("a logprobs.content entry has no token")
            toks.append(str(e["token"]))
            v = e.get("logprob")
            own_c.append(None if v is None else float(v))
            alts = e.get("top_logprobs") or []
            tops_c.append(_top_map(list(alts)))
            if ids is not None and top_ids is not None and "id" in e and all("id" in x for x in alts):
                ids.append(int(e["id"]))
                top_ids.append({int(x["id"]): float(x["logprob"]) for x in alts})
            else:
                ids, top_ids = None, None
        return ChoiceLogprobs(toks, own_c, tops_c, ids, top_ids)
    return None


def require_choice_logprobs(
    choice: Mapping[str, Any],
    *,
    endpoint: str | None,
    what: str,
    missing: type[EndpointError] = EndpointError,
) -> ChoiceLogprobs:
    """:func:`choice_logprobs`, or an error naming ``what``: :class:`EndpointError` for a
    malformed block, ``missing`` (default :class:`EndpointError`) when the server sent none."""
    try:
        lp = choice_logprobs(choice)
    except (ValueError, KeyError, TypeError) as e:
        raise EndpointError(f"the {what}'s logprobs are malformed: {e}", endpoint=endpoint) from e
    if lp is None:
        raise missing(f"the {what} has no logprobs (the server ignores `logprobs`?)", endpoint=endpoint)
    return lp


def first_top_logprobs(choice: Mapping[str, Any]) -> dict[str, float]:
    """The first position's top-k log-probs of a completions choice, ``{token: logprob}``, in either
    format (:func:`choice_logprobs`); ``{}`` when there is none or the block is malformed.

    Example:
        >>> first_top_logprobs({"logprobs": {"top_logprobs": [{" Paris": -0.1, " London": -4.3}], "tokens": [" Paris"]}})
        {' Paris': -0.1, ' London': -4.3}
        >>> first_top_logprobs({"logprobs": {"content": [{"token": " Paris", "logprob": -0.1,
        ...     "top_logprobs": [{"token": " Paris", "logprob": -0.1}, {"token": " London", "logprob": -4.3}]}]}})
        {' Paris': -0.1, ' London': -4.3}
    """
    try:
        lp = choice_logprobs(choice)
    except (ValueError, KeyError, TypeError):
        return {}
    if lp is None or not lp.top_logprobs:
        return {}
    return dict(lp.top_logprobs[0] or {})


def _short(text: str, n: int = 200) -> str:
    text = " ".join(str(text).split())
    return _redact(text[:n] + ("..." if len(text) > n else ""))


def _redact(text: str) -> str:
    """Drop anything that looks like a bearer token from a message."""
    import re

    return re.sub(r"(?i)(bearer\s+)\S+", r"\1[redacted]", text)


def map_concurrently(fn: Callable[[Any], Any], items: Sequence[Any], workers: int) -> list[Any]:
    """``[fn(x) for x in items]`` on ``workers`` threads, order kept; an exception is returned in
    place of its result (a batch keeps going)."""
    from concurrent.futures import ThreadPoolExecutor

    def safe(x: Any) -> Any:
        try:
            return fn(x)
        except Exception as e:
            return e

    if workers <= 1 or len(items) <= 1:
        return [safe(x) for x in items]
    with ThreadPoolExecutor(max_workers=workers) as ex:
        return list(ex.map(safe, items))
