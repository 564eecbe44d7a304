"""The harness phase: Meta-Harness search over harness code, its archive, candidate validation, the
raced acceptance decision, and the proposers that write candidates (`optimizers.harness.proposers`).
Names resolve on first use; the modules behind them are internal and may move."""

from __future__ import annotations

from whale_dspy.lazy_exports import lazy_getattr

_EXPORTS = {
    "ACCEPTANCE_RULES": "acceptance",
    "Acceptance": "acceptance",
    "HarnessArchive": "archive",
    "MetaHarnessConfig": "config",
    "MetaHarness": "meta_harness",
    "sandboxed_evaluator": "meta_harness",
    "lm_sampling": "meta_harness",
    "race": "racing",
    "Spread": "sizing",
    "PROPOSER_HELP": "proposers",
    "Jail": "proposers",
    "ProposerOptions": "proposers",
    "proposer_from_spec": "proposers",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_getattr(__name__, _EXPORTS)
