"""Detectors: fitted estimators and scores computed from traces (never from the model)."""

from mnemoscope.detectors.base import METHODS, MembershipData, MembershipMethod

__all__ = ["METHODS", "MembershipData", "MembershipMethod"]
