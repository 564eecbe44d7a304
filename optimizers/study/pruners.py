"""The default pruner for noisy LLM accuracy curves: the median rule, but only for a stalled trial.

Optuna's `PatientPruner` gates its wrapped pruner on "no improvement", yet it
counts a flat stretch as improving: it defers only when the recent values are
strictly worse than the earlier best. Exact-match accuracy on a small
validation set plateaus at exactly equal values (0.25, 0.25, 0.25), so a trial
stuck there would never be pruned. `PlateauPruner` treats "did not beat its own
best" as stalled. Imported only inside functions: it subclasses an Optuna class.
"""

from __future__ import annotations

import optuna


class PlateauPruner(optuna.pruners.BasePruner):
    """Ask `wrapped` only when the trial's last `patience` reports did not beat its earlier best."""

    def __init__(self, wrapped: optuna.pruners.BasePruner, patience: int):
        if patience < 1:
            raise ValueError(f"patience must be >= 1, got {patience}")
        self.wrapped, self.patience = wrapped, patience

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        values = [trial.intermediate_values[step] for step in sorted(trial.intermediate_values)]
        if len(values) <= self.patience:
            return False
        if max(values[-self.patience :]) > max(values[: -self.patience]):
            return False  # still improving: a slow starter (long first weight phase) keeps running
        return self.wrapped.prune(study, trial)
