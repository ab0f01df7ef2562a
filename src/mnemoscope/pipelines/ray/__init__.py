"""The Ray engine: the local batch pipelines, fanned out over a Ray cluster with Ray Data.

``mnemoscope audit --input``, ``trace --input``, ``repcs score`` and ``bench run`` take
``--engine ray``, and the calibration's tracing step can run on it (:class:`RayTraceEngine`);
the work is the same, only where it runs changes:

* **The driver** (this process) reads and validates the input exactly as the local engine
  does (same line numbers, duplicate ids, per-record errors), skips the ids already in the
  output folder, and cuts the rest into the local engine's batches (``batch_size`` records
  each, in file order). One Ray Data row is one batch.
* **The actors** (``map_batches`` with a callable class, ``workers`` of them, each with
  ``cpus_per_worker`` CPUs / ``gpus_per_worker`` GPUs) load the model and the profile once,
  then call the pipeline's own per-batch function on each batch:
  :func:`~mnemoscope.audit.auditor.audit_batch`, :func:`~mnemoscope.trace.pipeline.trace_batch`,
  :func:`~mnemoscope.pipelines.repcs.score_batch`. Same function, same batch: the same bytes as
  the local engine (see docs/ray.md for where padding could differ).
* **The driver** streams the finished batches back and writes them the way the local engine
  does, each record exactly once (:mod:`~mnemoscope.pipelines.ray.driver` says how).

The modules, by concern: :mod:`~.connect` (options, joining a cluster, errors),
:mod:`~.actors` (the workers), :mod:`~.driver` (the streaming driver), :mod:`~.runners` (audit
file, paired traces, ``repcs score``, the tracing engine) and :mod:`~.leaderboard` (``bench run``).
Ray is imported lazily; without it the engine says, in one line, to install ``mnemoscope[ray]``.
"""

from mnemoscope.pipelines.ray.actors import ModelLoader
from mnemoscope.pipelines.ray.connect import RAY_EXTRA_HINT, RayOptions, RayUnavailableError, connect
from mnemoscope.pipelines.ray.leaderboard import RayLeaderboardEngine
from mnemoscope.pipelines.ray.runners import RayTraceEngine, ray_audit_file, ray_run_pairs, ray_score_file

__all__ = [
    "RAY_EXTRA_HINT",
    "ModelLoader",
    "RayLeaderboardEngine",
    "RayOptions",
    "RayTraceEngine",
    "RayUnavailableError",
    "connect",
    "ray_audit_file",
    "ray_run_pairs",
    "ray_score_file",
]
