"""Optimizers over harnesses and weights; they see only whale_dspy's seams, never a domain.

`WhaleOptimizer` alternates the weight phase (`RejectionSamplingFinetune`) and
the harness phase (`MetaHarness`); `optimizers.study` tunes its schedule with
Optuna (imported on use).
"""

from __future__ import annotations

from optimizers.meta_harness import MetaHarness
from optimizers.meta_harness_config import MetaHarnessConfig, MetaHarnessReport
from optimizers.methods import METHODS, Method, get_method
from optimizers.proposers import (
    AgenticProposer,
    CommandProposer,
    LMProposer,
    MutationProposer,
    proposer_from_spec,
)
from optimizers.rft import RejectionSamplingFinetune, RFTReport
from optimizers.rft_config import RFTConfig
from optimizers.schedules import Fixed, Patience, parse_schedule
from optimizers.whale import WhaleOptimizer
from optimizers.whale_report import WhaleReport, load_report

__all__ = [
    "METHODS",
    "AgenticProposer",
    "CommandProposer",
    "Fixed",
    "LMProposer",
    "MetaHarness",
    "MetaHarnessConfig",
    "MetaHarnessReport",
    "Method",
    "MutationProposer",
    "Patience",
    "RFTConfig",
    "RFTReport",
    "RejectionSamplingFinetune",
    "WhaleOptimizer",
    "WhaleReport",
    "get_method",
    "load_report",
    "parse_schedule",
    "proposer_from_spec",
]
