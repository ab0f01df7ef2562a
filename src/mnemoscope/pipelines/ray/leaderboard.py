"""``bench run`` on Ray: the leaderboard's forward passes on actors, its statistics in the driver."""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mnemoscope.pipelines.ray.actors import TokenStatsWorker
from mnemoscope.pipelines.ray.connect import RayOptions, connect
from mnemoscope.pipelines.ray.driver import RunStats, chunked, stream
from mnemoscope.pipelines.ray.runners import ray_run_pairs

__all__ = ["RayLeaderboardEngine"]


class RayLeaderboardEngine:
    """The ``engine`` of :func:`~mnemoscope.pipelines.leaderboard.run_leaderboard` on Ray.

    Each sibling's forward passes (token statistics, paired traces) run on actors that call the
    sibling's loader themselves; the statistics, cross-validation and the report stay in the
    driver, unchanged. Batches are the local ones (``batch_size`` documents in order), so the
    scores are the local scores.
    """

    def __init__(self, options: RayOptions | None = None):
        self.options = options or RayOptions()

    def token_stats(self, load: Callable[[Any], Any], texts: Sequence[str], *, batch_size: int) -> list[Any]:
        """The token statistics of ``texts`` under the sibling ``load`` loads, in order."""
        ray = connect(self.options)
        options = dataclasses.replace(self.options, batch_size=batch_size)
        chunks = chunked(list(texts), batch_size)
        got: dict[int, list[Any]] = {}

        def on_batch(row: dict[str, Any]) -> None:
            got[int(row["chunk"])] = pickle.loads(bytes(row["payload"]))

        kwargs = {"model": {"model": load}, "batch_size": batch_size, "threads": options.threads}
        stream(ray, TokenStatsWorker, kwargs, chunks, options, on_batch, "token stats (ray)", RunStats())
        return [s for i in range(len(chunks)) for s in got[i]]

    def run_pairs(
        self, load: Callable[[Any], Any], items: Sequence[Any], folder: Path, *, config: Any, batch_size: int
    ) -> Any:
        """Paired traces of ``items`` into ``folder`` (:func:`~mnemoscope.pipelines.ray.runners.ray_run_pairs`)."""
        options = dataclasses.replace(self.options, batch_size=batch_size)
        return ray_run_pairs(items, folder, config=config, model=load, options=options)
