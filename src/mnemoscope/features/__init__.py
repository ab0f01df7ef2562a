"""Features: pure functions from traces to numbers."""

from mnemoscope.features.tokens import TokenStats

__all__ = ["TokenStats"]
