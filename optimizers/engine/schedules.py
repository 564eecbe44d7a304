"""When to switch phases: pure decision functions over the current phase's signals.

A schedule holds only thresholds. Its decisions read the signals the current
phase has produced so far (and, for `Fixed`, the cycle number and the epoch
size), so a resumed run rebuilds every decision from the recorded signals and
the schedules can be tested one step at a time. Both decisions are asked
*before* a step or iteration starts: True means the phase ends now.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

from optimizers.signals import HarnessIteration, WeightStep, iterations_since_improvement
from whale_dspy.errors import ConfigError


def fixed_steps(epochs: float, cycle: int, steps_per_epoch: int) -> int:
    """Weight steps of cycle `cycle` when every cycle trains `epochs` epochs.

    Cumulative rounding: cycles 0..c together run round((c+1) * E * steps) steps,
    so a fractional E (WHALE's 0.6) neither drifts nor rounds away over cycles.
    """
    per_cycle = epochs * steps_per_epoch
    return round((cycle + 1) * per_cycle) - round(cycle * per_cycle)


@dataclass(frozen=True)
class Fixed:
    """`fixed:E,I`: E epochs of weight steps (fractional allowed), then I harness iterations.

    I counts the incoming harness's own evaluation (iteration 0), as WHALE's I=6 does.
    """

    epochs: float = 0.6
    iterations: int = 6
    kind: ClassVar[str] = "fixed"

    def __post_init__(self) -> None:
        if not (isinstance(self.epochs, int | float) and self.epochs > 0):
            raise ConfigError(f"fixed schedule: E (epochs per cycle) must be > 0, got {self.epochs!r}")
        if not (type(self.iterations) is int and self.iterations >= 1):
            raise ConfigError(
                f"fixed schedule: I (harness iterations) must be an int >= 1, got {self.iterations!r}"
            )

    def weight_done(self, steps: Sequence[WeightStep], *, cycle: int, steps_per_epoch: int) -> bool:
        return len(steps) >= fixed_steps(self.epochs, cycle, steps_per_epoch)

    def harness_done(self, iterations: Sequence[HarnessIteration]) -> bool:
        return len(iterations) >= self.iterations

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **asdict(self)}

    def spec(self) -> str:
        return f"fixed:{self.epochs:g},{self.iterations}"

    @classmethod
    def parse(cls, body: str) -> Fixed:
        """The schedule from the text after `fixed:`."""
        parts = [p.strip() for p in body.split(",")]
        if len(parts) != 2 or not all(parts):
            raise ConfigError(f"fixed schedule needs two values E,I (e.g. fixed:0.6,6), got {body!r}")
        return cls(
            epochs=float(_number(parts[0], "fixed schedule E")),
            iterations=_number(parts[1], "fixed schedule I"),
        )


def window_means(rewards: Sequence[float], window: int) -> list[float]:
    """Sliding-window means; the first window-1 entries average what exists so far."""
    return [
        sum(rewards[max(0, i - window + 1) : i + 1]) / (i + 1 - max(0, i - window + 1))
        for i in range(len(rewards))
    ]


def steps_since_improvement(values: Sequence[float], min_delta: float) -> int:
    """How many entries came after the last one that beat the best before it by more than min_delta."""
    best, last = float("-inf"), -1
    for index, value in enumerate(values):
        if value > best + min_delta:
            best, last = value, index
    return len(values) - 1 - last


@dataclass(frozen=True)
class Patience:
    """`patience:key=value,...`: stop a phase when its signal stops improving.

    Weight phase: after `weight_burn_in` steps, stop when the `weight_window`-step
    mean training reward has not beaten its best by more than `min_delta` for
    `weight_patience` steps, or after `weight_max` steps. Harness phase: after
    `harness_min` iterations (the incoming harness's evaluation included), stop
    when no candidate has been adopted (a decision that cleared the acceptance rule)
    for `harness_patience` iterations, or after `harness_max` iterations.
    """

    weight_burn_in: int = 3
    weight_window: int = 3
    weight_patience: int = 2
    weight_max: int = 50
    min_delta: float = 0.0
    harness_min: int = 2
    harness_patience: int = 2
    harness_max: int = 10
    kind: ClassVar[str] = "patience"

    def __post_init__(self) -> None:
        problems = [
            f"{name} must be {rule}, got {getattr(self, name)!r}" for name, rule in self._violations()
        ]
        if problems:
            raise ConfigError("patience schedule: " + "; ".join(problems))

    def _violations(self) -> list[tuple[str, str]]:
        ints = {
            "weight_burn_in": 0,
            "weight_window": 1,
            "weight_patience": 1,
            "weight_max": 1,
            "harness_min": 1,
            "harness_patience": 1,
            "harness_max": 1,
        }
        bad = [
            (name, f"an int >= {low}")
            for name, low in ints.items()
            if not _int_at_least(getattr(self, name), low)
        ]
        if not (isinstance(self.min_delta, int | float) and self.min_delta >= 0):
            bad.append(("min_delta", "a number >= 0"))
        if not bad and self.harness_max < self.harness_min:
            bad.append(("harness_max", f">= harness_min ({self.harness_min})"))
        return bad

    def weight_done(self, steps: Sequence[WeightStep], *, cycle: int = 0, steps_per_epoch: int = 0) -> bool:
        if len(steps) >= self.weight_max:
            return True
        if len(steps) < max(self.weight_burn_in, 1):
            return False
        means = window_means([s.mean_reward for s in steps], self.weight_window)
        return steps_since_improvement(means, self.min_delta) >= self.weight_patience

    def harness_done(self, iterations: Sequence[HarnessIteration]) -> bool:
        if len(iterations) >= self.harness_max:
            return True
        if len(iterations) < self.harness_min:
            return False
        return iterations_since_improvement(iterations, self.min_delta) >= self.harness_patience

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **asdict(self)}

    def spec(self) -> str:
        return "patience:" + ",".join(
            f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in asdict(self).items()
        )

    @classmethod
    def parse(cls, body: str) -> Patience:
        """The schedule from the text after `patience:`."""
        valid = [f.name for f in fields(Patience)]
        values: dict[str, Any] = {}
        for item in filter(None, (p.strip() for p in body.split(","))):
            key, sep, text = item.partition("=")
            key = key.strip()
            if not sep or key not in valid:
                raise ConfigError(f"patience schedule: bad entry {item!r}; valid keys are {', '.join(valid)}")
            number = _number(text.strip(), f"patience schedule {key}")
            values[key] = float(number) if key == "min_delta" else number
        return cls(**values)


Schedule = Fixed | Patience


def _int_at_least(value: Any, low: int) -> bool:
    return type(value) is int and value >= low


def _number(text: str, what: str) -> float | int:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{what}: {text!r} is not a number") from None


@dataclass(frozen=True)
class ScheduleKind:
    cls: type[Schedule]
    """Owns its parsing (`cls.parse(text after "kind:")`) and its serialized form (`to_dict`)."""
    form: str
    about: str


SCHEDULES: dict[str, ScheduleKind] = {
    Fixed.kind: ScheduleKind(
        Fixed,
        "fixed:E,I (e.g. fixed:0.6,6)",
        "E epochs of weight steps, then I harness iterations",
    ),
    Patience.kind: ScheduleKind(
        Patience,
        "patience:key=value,... (e.g. patience:weight_patience=3)",
        "leave a phase when its signal stops improving",
    ),
}
"""The one registry of schedule kinds: adding one is its class plus an entry here."""

SCHEDULE_FORMS = " or ".join(kind.form for kind in SCHEDULES.values())
SCHEDULE_HELP = "; ".join(f"{kind.form}: {kind.about}" for kind in SCHEDULES.values())


def parse_schedule(text: str) -> Schedule:
    """`fixed:0.6,6` or `patience:weight_patience=3,harness_max=8`; ConfigError says what is valid."""
    name, _, body = text.strip().partition(":")
    if name not in SCHEDULES:
        raise ConfigError(f"unknown schedule {text!r}; use {SCHEDULE_FORMS}")
    return SCHEDULES[name].cls.parse(body)


def schedule_from_dict(data: dict[str, Any]) -> Schedule:
    """The inverse of `to_dict` (a run directory's config rebuilds its schedule)."""
    kind = SCHEDULES.get(data.get("kind"))
    if kind is None:
        raise ConfigError(
            f"unknown schedule kind {data.get('kind')!r}; valid kinds are {', '.join(SCHEDULES)}"
        )
    return kind.cls(**{k: v for k, v in data.items() if k != "kind"})
