"""HTTP transport to an OpenAI-compatible inference server: settings, errors, retries, threads.

* ``base_url`` is the server's OpenAI base URL ending in ``/v1`` (``http://127.0.0.1:8080/v1``);
  server-specific routes (``/extras/tokenize``, ``/tokenize``, ``/completion``) are resolved
  against its root.
* The API key is read from an environment variable named by the caller (``api_key_env``);
  its value is never logged, stored in a record, or put in an error message.
* Every request has a timeout; connection errors, time-outs, 429 and 5xx are retried with
  exponential backoff (``retries`` times); a 4xx other than 429 is not retried.
* ``concurrency`` bounds the requests in flight from one client (threads share it).

Errors are :class:`EndpointError` (a :class:`~mnemoscope.errors.MnemoscopeError`): one line
naming the endpoint and what was missing.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mnemoscope.errors import MnemoscopeError

__all__ = [
    "SCORE_METHODS",
    "EndpointCapabilityError",
    "EndpointConfig",
    "EndpointError",
    "EndpointTransport",
    "TokenAlignmentError",
    "map_concurrently",
]

log = logging.getLogger(__name__)

# How answer positions are scored (mnemoscope.trace.endpoint_score); the name in endpoint_method.
SCORE_METHODS: tuple[str, ...] = ("echo", "positions", "grammar", "native")


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


class EndpointTransport:
    """HTTP client of one served model (thread-safe; see the module doc): requests with retries,
    the model's name, tokenization through a named route, completions. :class:`~mnemoscope.models.endpoint.client.EndpointClient`
    adds the server's capabilities, probed once."""

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
        self._server_kind: str | None = None
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

    def __enter__(self) -> EndpointTransport:
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

    def tokenize_via(self, route: str, text: str) -> list[int]:
        """``text``'s token ids through one tokenize route (``llama-cpp-python`` or ``llama.cpp``)."""
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

    def set_server_kind(self, kind: str) -> None:
        """Record which server this is (llama.cpp's servers get ``repeat_penalty: 1``: greedy stays greedy)."""
        self._server_kind = kind

    def tokenize_pieces(self, text: str) -> list[tuple[int, bytes]]:
        """``text``'s tokens with each one's bytes, on llama.cpp's server (``/tokenize`` with
        ``with_pieces``): a token that is part of a UTF-8 character (byte-level BPE splits
        non-Latin scripts and emoji so) comes back as its raw bytes."""
        data = self.request(
            "POST", "/tokenize", {"content": text, "add_special": True, "with_pieces": True}, root=True
        )
        toks = data.get("tokens") if isinstance(data, dict) else None
        out: list[tuple[int, bytes]] = []
        try:
            for e in toks or []:
                piece = e["piece"]
                raw = piece.encode("utf-8") if isinstance(piece, str) else bytes(int(b) for b in piece)
                out.append((int(e["id"]), raw))
        except (KeyError, TypeError, ValueError) as err:
            raise EndpointError(
                "/tokenize with_pieces returned malformed pieces", endpoint=self.endpoint
            ) from err
        if not toks:
            raise EndpointError("/tokenize with_pieces returned no token list", endpoint=self.endpoint)
        return out

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


def _short(text: str, n: int = 200) -> str:
    text = " ".join(str(text).split())
    return _redact(text[:n] + ("..." if len(text) > n else ""))


def _redact(text: str) -> str:
    """Drop anything that looks like a bearer token from a message."""
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
