"""Dynamic batching with backpressure: one model, one worker, a bounded queue.

Requests are collected until ``max_batch_size`` are waiting or ``max_wait_ms`` have passed
since the first one, then run as one batch on a single worker thread (the model is never
used concurrently). Results are stored (durably) *before* any waiting request is answered,
so every acknowledged audit is in the log.

The queue counts audit items, not HTTP requests: a batch request of k items is admitted
whole or not at all. When it would not fit, :class:`QueueFull` is raised at once (the
server answers 503 with ``Retry-After``); memory stays bounded by ``queue_size`` items.

Shutdown (:meth:`Batcher.stop`): new work is refused (:class:`ShuttingDown`), queued work
is finished within the grace period, and whatever is left is rejected explicitly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Batcher", "Job", "QueueFull", "ShuttingDown"]

log = logging.getLogger(__name__)


class QueueFull(Exception):
    """The queue cannot take the request now (retry later)."""


class ShuttingDown(Exception):
    """The server is stopping and takes no new work."""


@dataclass
class Job:
    payload: Any
    future: asyncio.Future[Any]
    enqueued: float = field(default_factory=time.perf_counter)
    cancelled: bool = False


class Batcher:
    """Collects jobs and runs ``process(payloads, enqueue_times) -> results`` on one thread.

    Args:
        process: a blocking function, called with a list of payloads (and their enqueue
            times) and returning one result per payload (a result may be an exception
            instance, which is raised to that job's caller).
        max_batch_size, max_wait_ms, queue_size: see the module doc.
    """

    def __init__(
        self,
        process: Callable[[list[Any], list[float]], Sequence[Any]],
        *,
        max_batch_size: int = 8,
        max_wait_ms: float = 10.0,
        queue_size: int = 64,
        on_batch: Callable[[int], None] | None = None,
    ):
        self.process = process
        self.max_batch_size = max_batch_size
        self.max_wait_ms = max_wait_ms
        self.queue_size = queue_size
        self.on_batch = on_batch
        self._queue: deque[Job] = deque()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mnemoscope-model")
        self._closing = False
        self.in_flight = 0
        self.n_batches = 0

    @property
    def depth(self) -> int:
        return len(self._queue)

    async def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="mnemoscope-batcher")

    def submit_nowait(self, payloads: Sequence[Any]) -> list[asyncio.Future[Any]]:
        """Enqueue all payloads or none; returns their futures."""
        if self._closing:
            raise ShuttingDown("the server is shutting down")
        if len(self._queue) + len(payloads) > self.queue_size:
            raise QueueFull(
                f"the audit queue is full ({len(self._queue)} of {self.queue_size} queued); retry later"
            )
        loop = asyncio.get_running_loop()
        futs = []
        for p in payloads:
            job = Job(p, loop.create_future())
            self._queue.append(job)
            futs.append(job.future)
        assert self._wake is not None
        self._wake.set()
        return futs

    async def submit(self, payloads: Sequence[Any], timeout: float | None = None) -> list[Any]:
        """Enqueue and wait for the results (raises :class:`QueueFull`, :class:`ShuttingDown`,
        :class:`TimeoutError`)."""
        futs = self.submit_nowait(payloads)
        try:
            return list(await asyncio.wait_for(asyncio.gather(*futs), timeout))
        except (TimeoutError, asyncio.TimeoutError):
            for j in self._queue:
                if j.future in futs:
                    j.cancelled = True
            raise TimeoutError("the audit did not finish within the request timeout") from None

    async def _collect(self) -> list[Job]:
        assert self._wake is not None
        while not self._queue:
            if self._closing:
                return []
            self._wake.clear()
            await self._wake.wait()
        first = self._queue[0].enqueued
        while len(self._queue) < self.max_batch_size and not self._closing:
            left = self.max_wait_ms / 1000 - (time.perf_counter() - first)
            if left <= 0:
                break
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await asyncio.wait_for(self._wake.wait(), left)
        batch: list[Job] = []
        while self._queue and len(batch) < self.max_batch_size:
            job = self._queue.popleft()
            if job.cancelled or job.future.done():
                continue
            batch.append(job)
        return batch

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._collect()
            if not batch:
                if self._closing and not self._queue:
                    return
                continue
            self.in_flight = len(batch)
            try:
                results = await loop.run_in_executor(
                    self._executor, self.process, [j.payload for j in batch], [j.enqueued for j in batch]
                )
                if len(results) != len(batch):  # pragma: no cover - a bug in process
                    raise RuntimeError(f"process returned {len(results)} results for {len(batch)} jobs")
            except Exception as e:  # the whole batch failed (e.g. storage down): tell every caller
                log.exception("audit batch failed")
                results = [e] * len(batch)
            finally:
                self.in_flight = 0
            self.n_batches += 1
            if self.on_batch is not None:
                self.on_batch(len(batch))
            for job, res in zip(batch, results, strict=True):
                if job.future.done():
                    continue
                if isinstance(res, BaseException):
                    job.future.set_exception(res)
                else:
                    job.future.set_result(res)

    async def stop(self, grace_s: float = 30.0) -> int:
        """Refuse new work, finish queued work within ``grace_s``, reject the rest; returns
        how many queued jobs were rejected."""
        self._closing = True
        if self._wake is not None:
            self._wake.set()
        rejected = 0
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), grace_s)
            except (TimeoutError, asyncio.TimeoutError):
                while self._queue:
                    job = self._queue.popleft()
                    if not job.future.done():
                        job.future.set_exception(ShuttingDown("the server shut down before this audit ran"))
                        rejected += 1
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._task
        self._executor.shutdown(wait=True)
        return rejected
