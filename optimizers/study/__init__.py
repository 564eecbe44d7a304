"""Optuna studies over WHALE's switching schedule: the studies, their search space, storage, pruners
and plots. Names resolve on first use, so importing a light submodule does not import Optuna."""

from __future__ import annotations

from whale_dspy.lazy_exports import lazy_getattr

_EXPORTS = {
    "SearchSpace": "search_space",
    "save_plots": "plots",
} | {
    name: "studies"
    for name in (
        "PRUNERS",
        "RunTrial",
        "StudyConfig",
        "StudySummary",
        "TrialContext",
        "TrialReporter",
        "make_objective",
        "make_pruner",
        "open_study",
        "run_study",
        "summarize",
    )
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_getattr(__name__, _EXPORTS)
