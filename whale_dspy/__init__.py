"""whale-dspy core: records, seams, rollouts and traces, evaluation, backends, training.

Importing this package stays light: torch, vllm, peft and optuna are imported
only inside the functions that need them.
"""

from __future__ import annotations

from whale_dspy.errors import BackendError, ConfigError, HarnessError, TrainingError, WhaleError
from whale_dspy.lazy_exports import lazy_getattr
from whale_dspy.records import AdapterRef, LMCall, Rollout, SFTExample, ToolCall, TrainResult

__getattr__ = lazy_getattr(__name__, {"LM": "short_lm"})

__all__ = [
    "AdapterRef",
    "BackendError",
    "ConfigError",
    "HarnessError",
    "LM",
    "LMCall",
    "Rollout",
    "SFTExample",
    "ToolCall",
    "TrainResult",
    "TrainingError",
    "WhaleError",
]
__version__ = "0.1.0"
