"""Optimizers over harnesses and weights; they see only whale_dspy's seams, never a domain."""

from __future__ import annotations

from optimizers.rft import RejectionSamplingFinetune, RFTReport
from optimizers.rft_config import RFTConfig

__all__ = [
    "RFTConfig",
    "RFTReport",
    "RejectionSamplingFinetune",
]
