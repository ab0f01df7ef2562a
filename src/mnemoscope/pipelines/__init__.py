"""Pipelines: one module per job (audit, repcs, crm, scar, radar, leaderboard).

Each pipeline loads -> traces -> computes features -> fits or scores -> returns results; the
CLI, the server, the integrations and the benchmarks are thin shells around these functions,
so one input always gets one answer. A verdict, a threshold or a model-identity check is
decided here and nowhere else. Nothing heavy is imported by this package itself.
"""
