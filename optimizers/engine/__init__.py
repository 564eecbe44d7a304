"""The alternation engine: WhaleOptimizer, its configuration (`WhaleConfig`, presets, `auto`),
schedules, budget, checkpointed state, methods and reports. Names resolve on first use, as
optimizers.study's do; the modules behind them are internal and may move."""

from __future__ import annotations

from whale_dspy.lazy_exports import lazy_getattr

_EXPORTS = {
    "optimizer_kwargs": "assembly",
    "proposer_lm": "assembly",
    "AUTO": "auto",
    "auto_level": "auto",
    "BUDGET_UNITS": "budget",
    "read_state": "checkpoint",
    "METHODS": "methods",
    "get_method": "methods",
    "DEFAULT_PRESET": "presets",
    "PRESETS": "presets",
    "PRESET_HELP": "presets",
    "get_preset": "presets",
    "run_sizing": "presets",
    "load_report": "report",
    "SCHEDULE_HELP": "schedules",
    "parse_schedule": "schedules",
    "SharedEvaluations": "shared_evals",
    "EVAL_NAMESPACE": "whale",
    "WhaleOptimizer": "whale",
    "DECISION_FIELDS": "whale_config",
    "WhaleConfig": "whale_config",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_getattr(__name__, _EXPORTS)
