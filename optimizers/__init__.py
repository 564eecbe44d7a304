"""Optimizers over harnesses and weights; they see only whale_dspy's seams, never a domain.

`WhaleOptimizer` alternates the weight phase (`RejectionSamplingFinetune`) and
the harness phase (`MetaHarness`); `optimizers.study` tunes its schedule with
Optuna (imported on use).
"""

from __future__ import annotations

from optimizers.engine.methods import METHODS, Method, get_method
from optimizers.engine.report import WhaleReport, load_report
from optimizers.engine.schedules import Fixed, Patience, parse_schedule
from optimizers.engine.whale import WhaleOptimizer
from optimizers.harness.config import MetaHarnessConfig, MetaHarnessReport
from optimizers.harness.meta_harness import MetaHarness
from optimizers.harness.proposers import (
    AgenticProposer,
    CommandProposer,
    LMProposer,
    MutationProposer,
    proposer_from_spec,
)
from optimizers.weights.config import RFTConfig
from optimizers.weights.rft import RejectionSamplingFinetune, RFTReport

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
