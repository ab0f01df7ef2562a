"""Benchmark data with known ground truth, authored offline by deterministic generators."""

__all__: list[str] = []
