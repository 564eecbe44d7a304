"""What Optuna may choose for WHALE's switching schedule, and the pure trial -> schedule mapping.

A trial picks a schedule kind, then only that kind's parameters (a conditional
space), so `fixed` trials never carry patience parameters and vice versa. The
harness phase's cap is sampled as `harness_min + harness_max_extra`, so every
sampled patience schedule satisfies harness_min <= harness_max by construction.
`config_to_params` is the inverse (for enqueueing and FixedTrial), and the
schedule's own `spec()` prints it as a ready `whale run --schedule` argument.

The harness decision's acceptance `confidence` and its race's first-round size (`race_start`)
are tuned only when the space is given a range for them (opt-in, e.g. from `--space`): the
default space, and so a recorded study's, is the schedule alone, and such a study still resumes.
A trial's values for them (`trial_to_decisions`) are MetaHarness settings of the trial's run.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, Protocol

from optimizers.engine.schedules import Fixed, Patience, Schedule
from whale_dspy.errors import ConfigError

KINDS = ("fixed", "patience")
KIND_PARAM = "schedule"
PATIENCE_KEYS = (
    "weight_burn_in",
    "weight_window",
    "weight_patience",
    "weight_max",
    "min_delta",
    "harness_min",
    "harness_patience",
)
"""Patience fields sampled directly; harness_max is harness_min + the sampled harness_max_extra."""


class SuggestingTrial(Protocol):
    """The part of `optuna.Trial` (and `optuna.trial.FixedTrial`) the mapping uses."""

    def suggest_categorical(self, name: str, choices: Any) -> Any: ...

    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None) -> float: ...

    def suggest_int(self, name: str, low: int, high: int) -> int: ...


@dataclass(frozen=True)
class FloatRange:
    """A closed float interval; `step` keeps sampled values short enough to type on a command line."""

    low: float
    high: float
    step: float | None = None

    def validate(self, name: str) -> None:
        if not (math.isfinite(self.low) and math.isfinite(self.high)) or self.low > self.high:
            raise ConfigError(f"search range {name} must satisfy low <= high, got {self.low}..{self.high}")
        if self.step is not None and self.step <= 0:
            raise ConfigError(f"search range {name}: step must be > 0, got {self.step}")

    def suggest(self, trial: SuggestingTrial, name: str) -> float:
        value = trial.suggest_float(name, self.low, self.high, step=self.step)
        return round(value, 6)

    def __contains__(self, value: object) -> bool:
        if not (isinstance(value, int | float) and self.low <= value <= self.high):
            return False
        if self.step is None:
            return True
        steps = (value - self.low) / self.step  # Optuna samples only the grid low + n * step
        return math.isclose(steps, round(steps), abs_tol=1e-6)


@dataclass(frozen=True)
class IntRange:
    """A closed integer interval."""

    low: int
    high: int

    def validate(self, name: str) -> None:
        if self.low > self.high:
            raise ConfigError(f"search range {name} must satisfy low <= high, got {self.low}..{self.high}")

    def suggest(self, trial: SuggestingTrial, name: str) -> int:
        return trial.suggest_int(name, self.low, self.high)

    def __contains__(self, value: object) -> bool:
        return isinstance(value, int) and self.low <= value <= self.high


DECISION_RANGES: dict[str, type[FloatRange] | type[IntRange]] = {
    "confidence": FloatRange,
    "race_start": IntRange,
}
"""Harness-decision settings a space may opt in to tune (MetaHarnessConfig's and `whale run`'s names)."""
DECISION_KEYS = tuple(DECISION_RANGES)


@dataclass(frozen=True)
class SearchSpace:
    """Ranges for both schedule kinds; the defaults contain the paper's settings.

    A range with low == high pins a value (weight_max by default).
    """

    kinds: tuple[str, ...] = KINDS
    epochs: FloatRange = FloatRange(0.2, 2.0, step=0.1)
    harness_iterations: IntRange = IntRange(2, 8)
    weight_window: IntRange = IntRange(2, 8)
    weight_burn_in: IntRange = IntRange(0, 6)
    weight_patience: IntRange = IntRange(1, 6)
    weight_max: IntRange = IntRange(50, 50)
    min_delta: FloatRange = FloatRange(0.0, 0.05, step=0.005)
    harness_min: IntRange = IntRange(1, 4)
    harness_patience: IntRange = IntRange(1, 4)
    harness_max_extra: IntRange = IntRange(0, 8)
    confidence: FloatRange | None = None
    """The paired rule's confidence; None (the default): not tuned, the run's own setting holds."""
    race_start: IntRange | None = None
    """The race's first-round tasks; None (the default): not tuned, the run's own setting holds."""

    def __post_init__(self) -> None:
        unknown = [kind for kind in self.kinds if kind not in KINDS]
        if not self.kinds or unknown or len(set(self.kinds)) != len(self.kinds):
            raise ConfigError(f"schedule kinds must be distinct values from {KINDS}, got {self.kinds}")
        for name, value in self.ranges().items():
            value.validate(name)
        if self.epochs.low <= 0:
            raise ConfigError(f"search range epochs must be > 0, got {self.epochs.low}..{self.epochs.high}")
        lows = {key: getattr(self, key).low for key in PATIENCE_KEYS}
        Patience(**lows, harness_max=lows["harness_min"])  # the schedule's own bounds, checked once
        if self.harness_iterations.low < 1 or self.harness_max_extra.low < 0:
            raise ConfigError("search ranges harness_iterations must be >= 1 and harness_max_extra >= 0")
        if self.confidence is not None and not 0.5 <= self.confidence.low <= self.confidence.high < 1:
            raise ConfigError(f"search range confidence must lie in [0.5, 1), got {self.confidence}")
        if self.race_start is not None and self.race_start.low < 1:
            raise ConfigError(f"search range race_start must be >= 1, got {self.race_start}")

    def ranges(self) -> dict[str, FloatRange | IntRange]:
        """Every range the space samples (the decision settings only when opted in)."""
        return {key: value for key, value in vars(self).items() if key != "kinds" and value is not None}

    def to_dict(self) -> dict[str, Any]:
        """JSON form, stored in the study's user attrs so a reopened study can check it."""
        return {**{key: asdict(value) for key, value in self.ranges().items()}, "kinds": list(self.kinds)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchSpace:
        """Ranges by name (e.g. from a JSON file); a missing range keeps its default."""
        valid = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(valid))
        if unknown:
            raise ConfigError(f"unknown search ranges {unknown}; valid names are {', '.join(valid)}")
        types = {key: type(getattr(cls, key)) for key in valid if key not in DECISION_KEYS}
        types.update(DECISION_RANGES)
        ranges = {
            key: None if value is None else types[key](**value)
            for key, value in data.items()
            if key != "kinds"
        }
        return cls(kinds=tuple(data.get("kinds", KINDS)), **ranges)

    def contains(self, schedule: Schedule) -> bool:
        """Whether `schedule` is a point of this space (enqueued trials must be, or Optuna rejects them)."""
        if schedule.kind not in self.kinds:
            return False
        params = config_to_params(schedule)
        return all(params[key] in self.ranges()[key] for key in params if key != KIND_PARAM)


def trial_to_config(trial: SuggestingTrial, space: SearchSpace) -> Schedule:
    """Sample (or, with a FixedTrial, read back) one schedule; pure apart from the trial's calls."""
    kind = trial.suggest_categorical(KIND_PARAM, list(space.kinds))
    if kind == "fixed":
        return Fixed(
            epochs=space.epochs.suggest(trial, "epochs"),
            iterations=space.harness_iterations.suggest(trial, "harness_iterations"),
        )
    values = {key: getattr(space, key).suggest(trial, key) for key in PATIENCE_KEYS}
    values["harness_max"] = values["harness_min"] + space.harness_max_extra.suggest(
        trial, "harness_max_extra"
    )
    return Patience(**values)


def trial_to_decisions(trial: SuggestingTrial, space: SearchSpace) -> dict[str, Any]:
    """The harness-decision settings the space opts in to tune, sampled (empty when it opts in to none)."""
    ranges = {key: getattr(space, key) for key in DECISION_KEYS if getattr(space, key) is not None}
    return {key: value.suggest(trial, key) for key, value in ranges.items()}


def config_to_params(schedule: Schedule) -> dict[str, Any]:
    """The inverse: Optuna's parameter dict for a schedule (`enqueue_trial` and `FixedTrial` input)."""
    if isinstance(schedule, Fixed):
        return {KIND_PARAM: "fixed", "epochs": schedule.epochs, "harness_iterations": schedule.iterations}
    params: dict[str, Any] = {
        KIND_PARAM: "patience",
        **{key: getattr(schedule, key) for key in PATIENCE_KEYS},
    }
    params["harness_max_extra"] = schedule.harness_max - schedule.harness_min
    return params


def paper_configs() -> tuple[Schedule, ...]:
    """The paper's settings, run first: fixed(E=0.6, I=6), then the adaptive (patience) default."""
    return (Fixed(epochs=0.6, iterations=5), Patience())
