"""Budget and cost accounting: rollouts are the x-axis, everything else is reported beside them.

The rule, the same for every method: a weight step or harness iteration starts
only if its worst-case cost (the phase's own declared upper bound in rollouts,
in the budget's unit) fits in what is left of the phase's cap (the whole budget,
or a stage's share for `stagewise`). A phase whose next unit does not fit ends
there; when a unit spends more than it declared, the overspend is logged and kept
in the report in the budget's unit (`overspent_in_unit`), with the rollouts
figure beside it (`overspent`), never hidden. Held-out test evaluations are
counted apart (`eval_rollouts`) and never charged to the optimization budget.

The unit is one setting: rollouts (WHALE's), policy LM calls, or completion
tokens. A harness that votes over five samples pays five calls a rollout under
`calls`, in search, training and evaluation alike, so a search cannot buy accuracy
with calls a rollout budget does not see. A unit's cost in calls or tokens is its
rollouts times what a rollout has cost in this run so far (evaluations included),
never less than one call or one token. Before the run has measured any rollout,
a rollout is estimated to cost `calls_per_rollout` calls of
`max_tokens` completion tokens each (the run's completion budget per call), so a
first unit that may cost thousands of tokens is not let in as costing one (an estimate: a
harness may spend more, and the excess is reported as overspend).
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from optimizers.signals import HarnessIteration, WeightStep
from whale_dspy.defaults import SERVED_LM_SAMPLING
from whale_dspy.errors import ConfigError
from whale_dspy.records import add_counts

log = logging.getLogger(__name__)


BUDGET_UNITS: dict[str, str] = {
    "rollouts": "rollouts, however many LM calls each makes (WHALE's unit)",
    "calls": "policy LM calls (a vote of five is five)",
    "tokens": "policy completion tokens",
}


FIRST_CALLS_PER_ROLLOUT = 8
"""The LM calls a rollout is estimated to make before a run has measured any: a vote of five and a
four-turn agent fit. An estimate, not a guarantee: a harness may make more calls, and ask for more
tokens a call than the run's `max_tokens` (up to the sandbox's ceiling); what it spends beyond is
charged and reported as overspend in the budget's unit."""


@dataclass(frozen=True)
class Budget:
    """The optimization budget: `amount` of `unit` (weight-phase and harness-phase rollouts alike).

    `max_tokens` and `calls_per_rollout` estimate what a rollout costs before any was measured
    (FIRST_CALLS_PER_ROLLOUT says why it is an estimate, not a bound)."""

    amount: int
    unit: str = "rollouts"
    max_tokens: int = int(SERVED_LM_SAMPLING["max_tokens"])
    calls_per_rollout: int = FIRST_CALLS_PER_ROLLOUT

    def __post_init__(self) -> None:
        if self.unit not in BUDGET_UNITS:
            raise ConfigError(f"unknown budget unit {self.unit!r}; valid: {', '.join(BUDGET_UNITS)}")
        if not (type(self.amount) is int and self.amount >= 1):
            raise ConfigError(f"budget must be an int >= 1 {self.unit}, got {self.amount!r}")
        if self.max_tokens < 1 or self.calls_per_rollout < 1:
            raise ConfigError(
                f"max_tokens and calls_per_rollout must be >= 1, got {self.max_tokens}, "
                f"{self.calls_per_rollout}"
            )

    def cap(self, share: float | None) -> int:
        """A stage's cap: `share` of the budget (stagewise), or all of it."""
        return self.amount if share is None else int(self.amount * share)

    def spent(self, spend: Spend) -> int:
        """What the budget has counted so far, in its unit."""
        value = in_unit(self.unit, spend.rollouts, spend.rollout_calls, spend.completion_tokens)
        if value is None:
            raise ConfigError(f"this run's records do not count {self.unit}: resume it under rollouts")
        return value

    def cost(self, rollouts: int, spend: Spend) -> int:
        """A unit of `rollouts` worst-case rollouts in the budget's unit: at this run's rate so far,
        or, before any rollout was measured, at the estimate of what one costs."""
        rate = spend.per_rollout(self.unit)
        return math.ceil(rollouts * (self.first_rate() if rate is None else max(1.0, rate)))

    def first_rate(self) -> int:
        """What a rollout may cost at most in the budget's unit while nothing has been measured."""
        calls = self.calls_per_rollout
        return {"rollouts": 1, "calls": calls, "tokens": calls * self.max_tokens}[self.unit]

    @staticmethod
    def fits(spent: int, cost: int, cap: int) -> bool:
        """True when a unit of worst-case `cost` rollouts may start with `spent` already spent."""
        return spent + cost <= cap


def in_unit(unit: str, rollouts: int, calls: int | None, tokens: int | None) -> int | None:
    """A spend in `unit` (None: not counted)."""
    return {"rollouts": rollouts, "calls": calls, "tokens": tokens}[unit]


@dataclass(frozen=True)
class Declared:
    """What a unit declared it may cost in the budget's unit, before it started."""

    unit: str
    amount: int

    @classmethod
    def from_event(cls, event: dict[str, Any]) -> Declared | None:
        """The declaration a unit's event records (None in events from before they recorded one)."""
        cost = event.get("declared_cost")
        return None if cost is None else cls(cost["unit"], cost["amount"])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Spend:
    """Everything a run has spent so far; `rollouts` is what the budget counts."""

    rollouts: int = 0
    weight_rollouts: int = 0
    harness_rollouts: int = 0
    weight_steps: int = 0
    harness_iterations: int = 0
    overspent: int = 0
    """Rollouts the units spent beyond the rollouts they declared."""
    overspent_in_unit: int = 0
    """What the units spent beyond their declared cost, in the budget's unit (the check that counts
    under `calls` or `tokens`, where a unit may overspend on rollouts it declared exactly)."""
    eval_rollouts: int = 0
    evaluations: int = 0
    proposer_calls: int = 0
    proposer_tokens: int | None = 0
    """None once any harness iteration's proposer tokens were unknown."""
    rollout_tokens: int = 0
    """The weight steps' rollout tokens (prompt and completion)."""
    rollout_calls: int | None = 0
    """The policy LM calls of the budget's rollouts (what a `calls` budget counts): a harness that
    votes over five samples spends five a rollout. None once any step's calls were unknown."""
    completion_tokens: int | None = 0
    """The policy completion tokens of the budget's rollouts (what a `tokens` budget counts); None
    once any unit's were unknown (recorded before they were counted)."""
    eval_calls: int | None = 0
    eval_completion_tokens: int | None = 0
    """What the held-out evaluations' rollouts cost in calls and tokens (never charged)."""
    weight_seconds: float = 0.0
    harness_seconds: float = 0.0
    eval_seconds: float = 0.0
    wall_seconds: float = 0.0

    def add_weight(self, step: WeightStep, declared: int, cost: Declared | None = None) -> Spend:
        """A weight step that declared `declared` rollouts, and `cost` in the budget's unit."""
        spent = (step.rollouts, step.lm_calls, step.completion_tokens)
        return replace(
            self._charge(spent, declared, cost, f"weight step {step.step}"),
            weight_rollouts=self.weight_rollouts + step.rollouts,
            weight_steps=self.weight_steps + 1,
            rollout_tokens=self.rollout_tokens + step.tokens,
            rollout_calls=add_counts(self.rollout_calls, step.lm_calls),
            completion_tokens=add_counts(self.completion_tokens, step.completion_tokens),
            weight_seconds=self.weight_seconds + step.seconds,
        )

    def add_harness(self, iteration: HarnessIteration, declared: int, cost: Declared | None = None) -> Spend:
        """A harness iteration that declared `declared` rollouts, and `cost` in the budget's unit."""
        spent = (iteration.rollouts, iteration.lm_calls, iteration.completion_tokens)
        return replace(
            self._charge(spent, declared, cost, f"harness iteration {iteration.iteration}"),
            harness_rollouts=self.harness_rollouts + iteration.rollouts,
            harness_iterations=self.harness_iterations + 1,
            rollout_calls=add_counts(self.rollout_calls, iteration.lm_calls),
            completion_tokens=add_counts(self.completion_tokens, iteration.completion_tokens),
            proposer_calls=self.proposer_calls + iteration.proposer_calls,
            proposer_tokens=add_counts(self.proposer_tokens, iteration.proposer_tokens),
            harness_seconds=self.harness_seconds + iteration.seconds,
        )

    def add_evaluation(
        self, rollouts: int, seconds: float, calls: int | None = None, tokens: int | None = None
    ) -> Spend:
        """An evaluation's rollouts (its calls and completion tokens: None when not recorded)."""
        return replace(
            self,
            eval_rollouts=self.eval_rollouts + rollouts,
            evaluations=self.evaluations + 1,
            eval_seconds=self.eval_seconds + seconds,
            eval_calls=add_counts(self.eval_calls, calls),
            eval_completion_tokens=add_counts(self.eval_completion_tokens, tokens),
        )

    def per_rollout(self, unit: str) -> float | None:
        """What a rollout of this run has cost in `unit` so far, evaluations included (None: nothing
        measured yet)."""
        if unit == "rollouts":
            return 1.0
        counts = {
            "calls": (self.rollout_calls, self.eval_calls),
            "tokens": (self.completion_tokens, self.eval_completion_tokens),
        }[unit]
        measured = [count for count in counts if count is not None]
        rollouts = self.rollouts + self.eval_rollouts
        return sum(measured) / rollouts if rollouts and measured else None

    def add_wall(self, seconds: float) -> Spend:
        return replace(self, wall_seconds=self.wall_seconds + seconds)

    def _charge(
        self, spent: tuple[int, int | None, int | None], declared: int, cost: Declared | None, what: str
    ) -> Spend:
        """Count a unit's rollouts, and what it spent beyond its declaration: in rollouts, and in
        the budget's unit (a record from before units declared theirs counts rollouts only)."""
        rollouts = spent[0]
        over = max(0, rollouts - declared)
        if over:
            log.warning("%s spent %d rollouts, %d more than it declared", what, rollouts, over)
        cost = cost or Declared("rollouts", declared)
        used = in_unit(cost.unit, *spent)
        over_unit = 0 if used is None else max(0, used - cost.amount)
        if over_unit and cost.unit != "rollouts":
            log.warning(
                "%s spent %d %s, %d more than the %d it declared",
                what,
                used,
                cost.unit,
                over_unit,
                cost.amount,
            )
        return replace(
            self,
            rollouts=self.rollouts + rollouts,
            overspent=self.overspent + over,
            overspent_in_unit=self.overspent_in_unit + over_unit,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
