"""The weight phase: online rejection-sampling fine-tuning of a LoRA adapter, and the data it trains on.
Names resolve on first use; the modules behind them are internal and may move."""

from __future__ import annotations

from whale_dspy.lazy_exports import lazy_getattr

_EXPORTS = {
    "RFTConfig": "config",
    "STEP_EVENT": "rft",
    "RejectionSamplingFinetune": "rft",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_getattr(__name__, _EXPORTS)
