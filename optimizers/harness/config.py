"""MetaHarness's configuration, its report, and the patience rule compile() stops by."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from optimizers.harness.acceptance import Acceptance
from optimizers.harness.archive import CandidateMeta
from optimizers.signals import HarnessIteration, iterations_since_improvement, search_stalled
from whale_dspy.defaults import DEFAULT_TEMPERATURE, DEFAULT_THREADS
from whale_dspy.errors import ConfigError


@dataclass(frozen=True)
class MetaHarnessConfig:
    """candidates: M per iteration (WHALE 3); tasks: the feedback slice, search tasks every
    candidate is scored on and proposers see with their answers; rollouts_per_task: samples per task
    (WHALE 1); min_iterations/patience/max_iterations: compile's stopping rule (WHALE 5/2/15),
    patience counting iterations without an adopted candidate; smoke_tasks: tasks a candidate must
    survive before its evaluation; prompt_only: reject changes beyond prompt text; timeout_s:
    wall-clock guard per stage (smoke, evaluation), also the default sandbox's limit per candidate
    child; threads: concurrent rollouts.

    Decisions (optimizers.harness.acceptance, optimizers.harness.racing): selection_tasks: the
    selection slice, other search tasks that only decide (never shown to a proposer; 0 decides on the feedback
    slice, as WHALE did); race_start: the first race round's tasks (rounds double up to
    selection_tasks); acceptance: `paired`, `paired-bonferroni`, `argmax` or `strict`; confidence
    and margin: the paired rule's one-sided confidence over a race's comparisons and the gain its
    lower bound must clear; racers: how many of an iteration's valid candidates race, the best on
    the feedback slice (screening; the error rate is split over them; 0: all); futility: a racing
    candidate leaves once its conditional power falls below this (0: never); spread_prior: the
    per-task sd of a paired difference a race expects, pooled as 16 paired differences with this
    run's earlier races (optimizers.harness.sizing)."""

    candidates: int = 3
    tasks: int = 20
    rollouts_per_task: int = 1
    min_iterations: int = 5
    patience: int = 2
    max_iterations: int = 15
    smoke_tasks: int = 2
    prompt_only: bool = False
    seed: int = 0
    threads: int = DEFAULT_THREADS
    temperature: float = DEFAULT_TEMPERATURE
    timeout_s: float = 600.0
    selection_tasks: int = 64
    race_start: int = 8
    acceptance: str = Acceptance.rule
    confidence: float = Acceptance.confidence
    margin: float = Acceptance.margin
    racers: int = 2
    futility: float = Acceptance.futility
    spread_prior: float = 0.33

    def __post_init__(self) -> None:
        self.decision_rule()  # checks the rule, confidence and margin
        positive = ("candidates", "tasks", "rollouts_per_task", "max_iterations", "threads", "race_start")
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"MetaHarnessConfig.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("min_iterations", "patience", "smoke_tasks", "selection_tasks", "racers"):
            if getattr(self, name) < 0:
                raise ConfigError(f"MetaHarnessConfig.{name} must be >= 0, got {getattr(self, name)}")
        if self.min_iterations > self.max_iterations:
            raise ConfigError(
                f"min_iterations ({self.min_iterations}) must be <= max_iterations ({self.max_iterations})"
            )
        if self.smoke_tasks > self.tasks:
            raise ConfigError(f"smoke_tasks ({self.smoke_tasks}) must be <= tasks ({self.tasks})")
        if self.timeout_s <= 0 or self.temperature < 0:
            raise ConfigError("timeout_s must be > 0 and temperature >= 0")
        if not (math.isfinite(self.spread_prior) and self.spread_prior > 0):
            raise ConfigError(f"MetaHarnessConfig.spread_prior must be > 0, got {self.spread_prior}")

    @classmethod
    def paper(cls, **fields: Any) -> MetaHarnessConfig:
        """WHALE's and Meta-Harness's own decision: the best mean on the tasks the proposer sees
        (argmax, no selection slice); for reproducing the paper and comparing against it."""
        return cls(**{"selection_tasks": 0, "acceptance": "argmax", **fields})

    LATER_FIELDS: ClassVar[tuple[str, ...]] = ("racers", "futility", "spread_prior")
    """Fields added by issue 56: a run record leaves them out at their defaults, so a run recorded
    before them reopens (its decisions then follow today's rule; its schedule keeps its count)."""

    def record(self) -> dict[str, Any]:
        """The config as a run folder records it."""
        return {
            key: value
            for key, value in asdict(self).items()
            if key not in self.LATER_FIELDS or value != getattr(MetaHarnessConfig, key)
        }

    def decision_rule(self) -> Acceptance:
        return Acceptance(self.acceptance, self.confidence, self.margin, self.futility)

    def racing(self, valid: int, *, selection: bool) -> int:
        """How many of `valid` candidates race: screening applies only where a selection slice
        decides (on the feedback slice the screen would be the race)."""
        return valid if not selection or not self.racers else min(valid, self.racers)


@dataclass(frozen=True)
class MetaHarnessReport:
    """What one compile() did: per-iteration signals, the winner, and what it cost."""

    iterations: tuple[HarnessIteration, ...]
    best: CandidateMeta | None
    h0_score: float
    archive_dir: str
    rollouts: int
    proposer_calls: int
    proposer_tokens: int | None
    """None: unknown (an external agent that reported no usage)."""
    stopped: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def stop_reason(history: Sequence[HarnessIteration], config: MetaHarnessConfig) -> str | None:
    """The patience rule: stop at max_iterations, after MAX_EMPTY_ITERATIONS iterations in a row
    without a candidate, or after min_iterations once no candidate has been adopted for `patience`
    iterations. None means go on."""
    last = history[-1]
    if last.iteration >= config.max_iterations:
        return "max_iterations"
    if search_stalled(history):
        return "no candidates"
    if last.iteration >= config.min_iterations and iterations_since_improvement(history) >= config.patience:
        return "patience"
    return None
