"""llama.cpp servers on loopback ports, for the tests and the benchmarks (not part of the package).

* :class:`LlamaCppServer`: llama-cpp-python's OpenAI server (``python -m llama_cpp.server``),
  built by ``scripts/ci_services.sh``.
* :class:`LlamaServerNative`: llama.cpp's own C++ ``llama-server`` binary, found at
  ``$MNEMOSCOPE_LLAMA_SERVER`` (see docs/endpoint.md for building it from the sources that
  llama-cpp-python vendors).

Both wait until ``GET /v1/models`` answers (or the process exits: its log tail is raised), are
terminated by :meth:`stop` (killed after 10 s) and work as context managers. ``pid`` is the
server process (benchmarks read its CPU time from ``/proc``).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mnemoscope.models.endpoint import EndpointError


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LlamaCppServer:
    """``python -m llama_cpp.server`` on a loopback port, for tests and benchmarks.

    Started as ``python -m llama_cpp.server --model GGUF --host 127.0.0.1 --port P --n_ctx 4096
    --n_threads T --model_alias ALIAS``; :meth:`start` waits until ``GET /v1/models`` answers
    (or the process exits: its log tail is raised), :meth:`stop` terminates it (kill after 10 s).
    Use as a context manager.
    """

    name = "llama_cpp.server"

    def __init__(
        self,
        gguf: str | os.PathLike[str],
        *,
        port: int | None = None,
        alias: str = "smollm2",
        n_ctx: int = 4096,
        n_threads: int = 2,
        log_path: str | os.PathLike[str] | None = None,
        extra_args: Sequence[str] = (),
    ):
        self.gguf = str(gguf)
        self.port = port or free_port()
        self.alias = alias
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.log_path = str(log_path) if log_path is not None else None
        self.extra_args = list(extra_args)
        self.proc: Any = None
        self._log: Any = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def command(self) -> list[str]:
        import sys

        return [
            sys.executable, "-m", "llama_cpp.server",
            "--model", self.gguf,
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--n_ctx", str(self.n_ctx),
            "--n_threads", str(self.n_threads),
            "--model_alias", self.alias,
            *self.extra_args,
        ]  # fmt: skip

    def start(self, timeout: float = 120.0) -> LlamaCppServer:
        import subprocess
        import tempfile

        import httpx

        if self.log_path is None:
            self.log_path = tempfile.mkstemp(prefix="llama-server-", suffix=".log")[1]
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(self.command, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = open(self.log_path, "rb").read()[-2000:].decode("utf-8", "replace")  # noqa: SIM115
                self.stop()
                raise EndpointError(f"{self.name} exited with {self.proc.returncode}:\n{tail}")
            try:
                if httpx.get(self.base_url + "/models", timeout=2.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.stop()
        raise EndpointError(f"{self.name} did not answer within {timeout:g} s", endpoint=self.base_url)

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else int(self.proc.pid)

    def stop(self) -> None:
        import subprocess

        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> LlamaCppServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def native_server_binary() -> str | None:
    """The ``llama-server`` binary: ``$MNEMOSCOPE_LLAMA_SERVER``, else one on ``PATH``."""
    env = os.environ.get("MNEMOSCOPE_LLAMA_SERVER")
    if env:
        return env if Path(env).is_file() else None
    return shutil.which("llama-server")


class LlamaServerNative(LlamaCppServer):
    """llama.cpp's C++ ``llama-server``: ``llama-server -m GGUF --host 127.0.0.1 --port P -c N_CTX
    -t T -np 1 --alias ALIAS`` (one slot: requests queue; the prompt cache is the slot's)."""

    def __init__(self, gguf: str | os.PathLike[str], *, binary: str | None = None, **kw: Any):
        super().__init__(gguf, **kw)
        self.binary = binary or native_server_binary()
        if not self.binary:
            raise EndpointError("no llama-server binary (set MNEMOSCOPE_LLAMA_SERVER)")

    name = "llama-server"

    @property
    def command(self) -> list[str]:
        return [
            str(self.binary), "-m", self.gguf,
            "--host", "127.0.0.1", "--port", str(self.port),
            "-c", str(self.n_ctx), "-t", str(self.n_threads), "-tb", str(self.n_threads),
            "-np", "1", "--alias", self.alias, "--no-webui",
            *self.extra_args,
        ]  # fmt: skip
