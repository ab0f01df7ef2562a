"""``GET /v1/stats`` (the service and its counts) and ``GET /v1/profile`` (the profile's card)."""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import asdict
from typing import Any

from fastapi import APIRouter

from mnemoscope.server.deps import KEY_REQUIRED, READ_ERRORS, Ready
from mnemoscope.server.metrics import SOURCES
from mnemoscope.server.profile_view import profile_view
from mnemoscope.server.schemas import ProfileOut, StatsOut

__all__ = ["router"]

router = APIRouter(dependencies=KEY_REQUIRED, responses=READ_ERRORS, tags=["service"])


def _percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "p99": None, "mean": None}
    import numpy as np

    a = np.asarray(values)
    return {
        "p50": float(np.percentile(a, 50)),
        "p95": float(np.percentile(a, 95)),
        "p99": float(np.percentile(a, 99)),
        "mean": float(a.mean()),
    }


@router.get("/v1/stats", response_model=StatsOut)
async def stats(run: Ready) -> Any:
    """The model, the profile, counts by source and of memory flags, latency, queue, log head."""
    store, eng, b = run.store, run.engine, run.batcher
    c = await asyncio.to_thread(store.counts)
    head = await asyncio.to_thread(store.head)
    prof = eng.profile
    n = int(c["n"])
    by_source = {s: int(c["by_source"].get(s, 0)) for s in SOURCES}
    n_flag = int(c["n_memory_flag"])
    return {
        "model": eng.model_info,
        "profile": {
            "path": str(prof.path),
            "hash": prof.content_hash,
            "backend": prof.backend,
            "layers": [] if prof.crm is None else [int(v) for v in prof.crm.layers],
            "anomaly": asdict(prof.anomaly),
            "repcs_tau": prof.repcs_tau if math.isfinite(prof.repcs_tau) else None,
            "verdict": None if prof.verdict is None else prof.verdict.to_dict(),
            "rule": eng.rule,
            "classifier": None if prof.crm is None else prof.crm.classifier,
            "max_new_tokens": prof.max_new_tokens,
        },
        "n_audits": n,
        "by_source": by_source,
        "n_memory_flag": n_flag,
        "memory_flag_rate": (n_flag / n) if n else None,
        "latency_ms": _percentiles(c["recent_latency_ms"]),
        "queue": {
            "depth": b.depth,
            "in_flight": b.in_flight,
            "capacity": b.queue_size,
            "max_batch_size": b.max_batch_size,
            "max_wait_ms": b.max_wait_ms,
            "batches": b.n_batches,
        },
        "log_head": head,
        "uptime_s": time.time() - run.started,
    }


@router.get("/v1/profile", response_model=ProfileOut)
async def profile(run: Ready) -> Any:
    """The profile's card: the model, the calibration data, alpha and the n behind the guarantee,
    and the held-out validation (AUC with CI, realised false-flag rate, memory recall, 3-way
    confusion matrix) when the profile carries it ("not measured" otherwise)."""
    return await asyncio.to_thread(
        profile_view, run.engine.profile, rule=run.engine.rule, drift=run.metrics.drift.status()
    )
