"""Joining a Ray cluster: the engine's options, the one-line errors, and :func:`connect`.

Ray is imported here, lazily, and nowhere else at module level: without it every ``--engine ray``
command stops with one line naming ``mnemoscope[ray]``.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from typing import Any

from mnemoscope.errors import InputError, MnemoscopeError

__all__ = ["RAY_EXTRA_HINT", "RayOptions", "RayUnavailableError", "connect", "import_ray"]

RAY_EXTRA_HINT = "the Ray engine needs Ray Data: pip install 'mnemoscope[ray]'"


class RayUnavailableError(MnemoscopeError):
    """Ray is not installed, or the cluster at ``--ray-address`` cannot be reached."""


@dataclass(frozen=True)
class RayOptions:
    """Where and how wide a job runs.

    Attributes:
        address: ``None`` starts a local cluster on this machine (or joins the one already
            started in this process); ``"auto"`` joins the cluster ``ray start`` made on this
            node; ``"HOST:PORT"`` or ``"ray://HOST:PORT"`` a remote one.
        workers: actors (model replicas).
        cpus_per_worker: CPUs reserved per actor; also its torch/OpenMP thread count.
        gpus_per_worker: GPUs per actor (0 = CPU; 1 = one replica per GPU).
        batch_size: records per batch (the unit of work, of retry and of writing).
        max_retries: restarts of a dead actor, and retries of the batch it was running (Ray's).
        resubmits: when Ray gives up all the same (an actor dead more often than
            ``max_retries``), how many times the driver submits the batches not yet written
            again, on fresh actors, before the run fails (resumable: what was written stays).
        progress: a progress bar over batches.
    """

    address: str | None = None
    workers: int = 1
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0
    batch_size: int = 8
    max_retries: int = 3
    resubmits: int = 2
    progress: bool = True

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise InputError("must be >= 1", field="workers")
        if self.batch_size < 1:
            raise InputError("must be >= 1", field="batch_size")
        if self.cpus_per_worker <= 0 or self.gpus_per_worker < 0:
            raise InputError("cpus must be > 0 and gpus >= 0", field="cpus_per_worker")
        if self.max_retries < 0 or self.resubmits < 0:
            raise InputError("must be >= 0", field="max_retries" if self.max_retries < 0 else "resubmits")

    @property
    def threads(self) -> int:
        """torch/OpenMP threads per actor: its whole CPUs, at least 1."""
        return max(1, int(self.cpus_per_worker))


def import_ray() -> Any:
    """The ``ray`` module with Ray Data, or :class:`RayUnavailableError` in one line."""
    try:
        import ray
        import ray.data  # Ray Data is the part the engine needs
    except ImportError as e:
        raise RayUnavailableError(f"{RAY_EXTRA_HINT} ({e})") from None
    return ray


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise RayUnavailableError(f"--ray-address {address!r} is not HOST:PORT, ray://HOST:PORT or 'auto'")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as e:
        raise RayUnavailableError(
            f"cannot reach the Ray cluster at {address} ({e}); start one with `ray start --head` "
            "or leave out --ray-address for a local cluster"
        ) from None


def connect(options: RayOptions) -> Any:
    """Join (or start) the cluster; returns the ``ray`` module. Fails fast on a dead address."""
    ray = import_ray()
    local = options.address in (None, "", "local")
    if options.address and not local and options.address != "auto":
        _check_reachable(options.address)  # before anything else: a dead address fails in seconds
    if ray.is_initialized():
        return ray
    env = {"TOKENIZERS_PARALLELISM": "false"}
    if local:
        ray.init(
            include_dashboard=False,
            log_to_driver=options.progress,
            logging_level=logging.INFO if options.progress else logging.WARNING,
            runtime_env={"env_vars": env},
        )
        return ray
    try:
        ray.init(address=options.address, log_to_driver=options.progress, runtime_env={"env_vars": env})
    except ConnectionError as e:
        raise RayUnavailableError(f"cannot join the Ray cluster at {options.address}: {e}") from None
    return ray
