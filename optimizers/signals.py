"""What each phase reports per step: the signals the switching schedules and budgets read.

The weight phase yields one `WeightStep` per RFT step and the harness phase one
`HarnessIteration` per Meta-Harness iteration (iteration 0 is the incoming
harness's own evaluation). Both count rollouts the same way, so the
alternation's x-axis is rollouts whichever phase spent them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from whale_dspy.records import AdapterRef


@dataclass(frozen=True)
class WeightStep:
    """One rejection-sampling fine-tuning step."""

    step: int
    adapter: AdapterRef | None
    mean_reward: float
    accept_rate: float
    accepted: int
    train_loss: float | None
    tokens: int
    rollouts: int
    seconds: float
    skipped: str | None = None
    lm_calls: int | None = None
    """The policy LM calls of the step's rollouts (a vote of five makes five a rollout); None: a step
    recorded before calls were counted."""
    completion_tokens: int | None = None
    """The policy completion tokens of the step's rollouts; None: recorded before they were counted."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WeightStep:
        """A step as its event recorded it, the adapter back as an AdapterRef."""
        adapter = data.get("adapter")
        return cls(**{**data, "adapter": AdapterRef(**adapter) if adapter else None})


@dataclass(frozen=True)
class HarnessIteration:
    """One Meta-Harness iteration: candidates proposed, validated, evaluated, archived."""

    iteration: int
    best_name: str
    best_score: float
    iteration_best_score: float
    candidates: int
    valid: int
    rollouts: int
    proposer_calls: int
    proposer_tokens: int | None
    """None: unknown (an external agent that reported no usage), never counted as 0."""
    seconds: float
    lm_calls: int | None = None
    """The policy LM calls of the candidates' and the race's rollouts; None: recorded before calls
    were counted."""
    completion_tokens: int | None = None
    """The policy completion tokens of those rollouts; None: recorded before they were counted."""
    decision: dict[str, Any] | None = None
    """The iteration's harness decision (optimizers.harness.racing.Decision.to_dict): who raced on which
    tasks, each paired gain, and what was adopted or why nothing was; None for the incoming
    harness's iteration 0 and for records made before decisions were raced."""

    @property
    def adopted(self) -> bool | None:
        """Whether the iteration adopted a candidate; None where no decision was recorded."""
        return None if self.decision is None else self.decision.get("adopted") is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HarnessIteration:
        """An iteration as an event or the archive recorded it (the archive's record holds more); a
        field added since (lm_calls) takes its default."""
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


def iterations_since_improvement(history: Sequence[HarnessIteration], min_delta: float = 0.0) -> int:
    """Iterations since the phase's harness last improved: since the last adopted decision, so a
    lead within noise that the acceptance rule refused is no improvement. An iteration recorded
    before decisions were raced counts as improved when its best score beat the best before it by
    more than min_delta (the rule those records were made under)."""
    best, last = float("-inf"), 0
    for index, signal in enumerate(history):
        improved = signal.adopted if signal.adopted is not None else signal.best_score > best + min_delta
        best = max(best, signal.best_score)
        if improved or index == 0:
            last = index
    return len(history) - 1 - last


def decisions_of(iterations: Sequence[HarnessIteration]) -> list[HarnessIteration]:
    """The iterations that decided: all but a phase's iteration 0, which scores the incoming
    harness and belongs to the first decision."""
    return [signal for signal in iterations if signal.iteration >= 1]


MAX_EMPTY_ITERATIONS = 3
"""Consecutive harness iterations without one candidate after which a harness phase ends. A
proposer that produces nothing (an exhausted neighbourhood, an LM whose every call fails) spends
no rollouts, so neither the budget nor a rollout-counting rule would ever stop it."""


def search_stalled(iterations: Sequence[HarnessIteration]) -> bool:
    """Whether the last MAX_EMPTY_ITERATIONS iterations all came back without a candidate."""
    recent = iterations[-MAX_EMPTY_ITERATIONS:]
    return len(recent) == MAX_EMPTY_ITERATIONS and all(i.candidates == 0 for i in recent)
