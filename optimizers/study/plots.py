"""Optuna's own matplotlib figures for a study, saved as PNG files next to the study's summary.

Each figure needs enough data (importances: two completed trials whose
parameters vary; the E-I contour: two completed fixed-schedule trials), so a
figure that cannot be drawn yet is skipped with a log line, never an error.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna

logger = logging.getLogger(__name__)


def _figures() -> dict[str, Callable[[optuna.Study], Any]]:
    from optuna.visualization import matplotlib as plots

    return {
        "optimization_history": plots.plot_optimization_history,
        "param_importances": plots.plot_param_importances,
        "contour_epochs_iterations": lambda study: plots.plot_contour(
            study, params=["epochs", "harness_iterations"]
        ),
        "intermediate_values": plots.plot_intermediate_values,
    }


def save_plots(study: optuna.Study, out_dir: Path) -> list[Path]:
    """Write every figure that the study's trials support; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, plot in _figures().items():
        if name == "param_importances" and not _parameters_vary(study):
            logger.info("figure %s skipped: needs two completed trials whose parameters differ", name)
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                axes = plot(study)
            if not _has_data(axes):
                logger.info("figure %s skipped: not enough completed trials yet", name)
                continue
            path = out_dir / f"{name}.png"
            _figure_of(axes).savefig(path, dpi=110, bbox_inches="tight")
            written.append(path)
        except (ValueError, RuntimeError, ZeroDivisionError) as error:
            logger.info("figure %s skipped: %s", name, error)
        finally:
            plt.close("all")
    return written


def _parameters_vary(study: optuna.Study) -> bool:
    """Importances of one trial, or of identical ones, are an artefact (Optuna draws them equal)."""
    from optuna.trial import TrialState

    completed = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    names = {name for trial in completed for name in trial.params}
    return len(completed) >= 2 and any(
        len({repr(t.params.get(name)) for t in completed}) > 1 for name in names
    )


def _figure_of(axes: Any) -> Any:
    first = axes.flat[0] if hasattr(axes, "flat") else axes
    return first.figure


def _has_data(axes: Any) -> bool:
    """Optuna returns empty axes (with a warning) when a figure has nothing to show."""
    all_axes = list(axes.flat) if hasattr(axes, "flat") else [axes]
    return any(ax.has_data() for ax in all_axes)
