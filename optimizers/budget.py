"""Budget and cost accounting: rollouts are the x-axis, everything else is reported beside them.

The rule, the same for every method: a weight step or harness iteration starts
only if its worst-case rollout cost (the phase's own declared upper bound)
fits in what is left of the phase's cap (the whole budget, or a stage's share
for `stagewise`). A phase whose next unit does not fit ends there; so the
optimization never spends more than its budget, and when a unit reports more
rollouts than it declared, the overspend is logged and kept in the report,
never hidden. Held-out test evaluations are counted apart (`eval_rollouts`)
and never charged to the optimization budget.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, replace
from typing import Any

from optimizers.signals import HarnessIteration, WeightStep
from whale_dspy.errors import ConfigError
from whale_dspy.records import add_counts

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Budget:
    """The optimization budget in rollouts (weight-phase and harness-phase rollouts alike)."""

    rollouts: int

    def __post_init__(self) -> None:
        if not (type(self.rollouts) is int and self.rollouts >= 1):
            raise ConfigError(f"budget must be an int >= 1 rollouts, got {self.rollouts!r}")

    def cap(self, share: float | None) -> int:
        """A stage's cap: `share` of the budget (stagewise), or all of it."""
        return self.rollouts if share is None else int(self.rollouts * share)

    @staticmethod
    def fits(spent: int, cost: int, cap: int) -> bool:
        """True when a unit of worst-case `cost` rollouts may start with `spent` already spent."""
        return spent + cost <= cap


@dataclass(frozen=True)
class Spend:
    """Everything a run has spent so far; `rollouts` is what the budget counts."""

    rollouts: int = 0
    weight_rollouts: int = 0
    harness_rollouts: int = 0
    weight_steps: int = 0
    harness_iterations: int = 0
    overspent: int = 0
    eval_rollouts: int = 0
    evaluations: int = 0
    proposer_calls: int = 0
    proposer_tokens: int | None = 0
    """None once any harness iteration's proposer tokens were unknown."""
    rollout_tokens: int = 0
    """The weight steps' rollout tokens (prompt and completion)."""
    rollout_calls: int | None = 0
    """The policy LM calls of the budget's rollouts, which the budget does not count: a harness that
    votes over five samples spends five a rollout. None once any step's calls were unknown."""
    weight_seconds: float = 0.0
    harness_seconds: float = 0.0
    eval_seconds: float = 0.0
    wall_seconds: float = 0.0

    def add_weight(self, step: WeightStep, declared: int) -> Spend:
        return replace(
            self._charge(step.rollouts, declared, f"weight step {step.step}"),
            weight_rollouts=self.weight_rollouts + step.rollouts,
            weight_steps=self.weight_steps + 1,
            rollout_tokens=self.rollout_tokens + step.tokens,
            rollout_calls=add_counts(self.rollout_calls, step.lm_calls),
            weight_seconds=self.weight_seconds + step.seconds,
        )

    def add_harness(self, iteration: HarnessIteration, declared: int) -> Spend:
        return replace(
            self._charge(iteration.rollouts, declared, f"harness iteration {iteration.iteration}"),
            harness_rollouts=self.harness_rollouts + iteration.rollouts,
            harness_iterations=self.harness_iterations + 1,
            rollout_calls=add_counts(self.rollout_calls, iteration.lm_calls),
            proposer_calls=self.proposer_calls + iteration.proposer_calls,
            proposer_tokens=add_counts(self.proposer_tokens, iteration.proposer_tokens),
            harness_seconds=self.harness_seconds + iteration.seconds,
        )

    def add_evaluation(self, rollouts: int, seconds: float) -> Spend:
        return replace(
            self,
            eval_rollouts=self.eval_rollouts + rollouts,
            evaluations=self.evaluations + 1,
            eval_seconds=self.eval_seconds + seconds,
        )

    def add_wall(self, seconds: float) -> Spend:
        return replace(self, wall_seconds=self.wall_seconds + seconds)

    def _charge(self, rollouts: int, declared: int, what: str) -> Spend:
        over = max(0, rollouts - declared)
        if over:
            log.warning("%s spent %d rollouts, %d more than it declared", what, rollouts, over)
        return replace(self, rollouts=self.rollouts + rollouts, overspent=self.overspent + over)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
