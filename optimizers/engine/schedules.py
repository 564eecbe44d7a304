"""When to switch phases: pure decision functions over the current phase's signals.

A schedule holds only thresholds. Its decisions read the signals the current
phase has produced so far (and, for `Fixed`, the cycle number and the epoch
size), so a resumed run rebuilds every decision from the recorded signals and
the schedules can be tested one step at a time. Both decisions are asked
*before* a step or iteration starts: True means the phase ends now.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, ClassVar

from optimizers.signals import HarnessIteration, WeightStep, decisions_of, iterations_since_improvement
from whale_dspy.errors import ConfigError

DECISIONS, ITERATIONS = "decisions", "iterations"
COUNTS = (DECISIONS, ITERATIONS)
"""What a schedule's harness counts count: decisions (proposals raced against the incumbent; the
incoming harness's re-scoring belongs to the first), or, in runs recorded before issue 56,
iterations with the incoming harness's own evaluation as the first (so `fixed:E,1` never proposed).
A recorded schedule without `counts` is of the older kind and keeps its meaning."""


def _harness_units(iterations: Sequence[HarnessIteration], counts: str) -> Sequence[HarnessIteration]:
    return decisions_of(iterations) if counts == DECISIONS else iterations


def fixed_steps(epochs: float, cycle: int, steps_per_epoch: int) -> int:
    """Weight steps of cycle `cycle` when every cycle trains `epochs` epochs.

    Cumulative rounding: cycles 0..c together run round((c+1) * E * steps) steps,
    so a fractional E (WHALE's 0.6) neither drifts nor rounds away over cycles.
    """
    per_cycle = epochs * steps_per_epoch
    return round((cycle + 1) * per_cycle) - round(cycle * per_cycle)


@dataclass(frozen=True)
class Fixed:
    """`fixed:E,I`: E epochs of weight steps (fractional allowed), then I harness decisions.

    Each decision races proposals against the incumbent; re-scoring the incoming harness under the
    new weights is part of the first. WHALE's I=6 counted that re-scoring as an iteration of its
    own, so the paper's setting is `fixed:0.6,5`.
    """

    epochs: float = 0.6
    iterations: int = 5
    counts: str = DECISIONS
    kind: ClassVar[str] = "fixed"

    def __post_init__(self) -> None:
        if not (isinstance(self.epochs, int | float) and self.epochs > 0):
            raise ConfigError(f"fixed schedule: E (epochs per cycle) must be > 0, got {self.epochs!r}")
        if not (type(self.iterations) is int and self.iterations >= 1):
            raise ConfigError(
                f"fixed schedule: I (harness decisions) must be an int >= 1, got {self.iterations!r}"
            )
        _check_counts(self.counts)

    def weight_done(self, steps: Sequence[WeightStep], *, cycle: int, steps_per_epoch: int) -> bool:
        return len(steps) >= fixed_steps(self.epochs, cycle, steps_per_epoch)

    def harness_done(self, iterations: Sequence[HarnessIteration]) -> bool:
        return len(_harness_units(iterations, self.counts)) >= self.iterations

    def to_dict(self) -> dict[str, Any]:
        return _recorded(self)

    def spec(self) -> str:
        return f"fixed:{self.epochs:g},{self.iterations}"

    @classmethod
    def parse(cls, body: str) -> Fixed:
        """The schedule from the text after `fixed:`."""
        parts = [p.strip() for p in body.split(",")]
        if len(parts) != 2 or not all(parts):
            raise ConfigError(f"fixed schedule needs two values E,I (e.g. fixed:0.6,5), got {body!r}")
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
    `harness_min` decisions, stop when no candidate has been adopted (a decision that
    cleared the acceptance rule) for `harness_patience` decisions, or after
    `harness_max` decisions.
    """

    weight_burn_in: int = 3
    weight_window: int = 3
    weight_patience: int = 2
    weight_max: int = 50
    min_delta: float = 0.0
    harness_min: int = 2
    harness_patience: int = 2
    harness_max: int = 10
    counts: str = DECISIONS
    kind: ClassVar[str] = "patience"

    def __post_init__(self) -> None:
        problems = [
            f"{name} must be {rule}, got {getattr(self, name)!r}" for name, rule in self._violations()
        ]
        if problems:
            raise ConfigError("patience schedule: " + "; ".join(problems))
        _check_counts(self.counts)

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
        units = _harness_units(iterations, self.counts)
        if len(units) >= self.harness_max:
            return True
        if len(units) < self.harness_min:
            return False
        # the incoming harness's iteration anchors the count: decisions since the last adoption
        return iterations_since_improvement(iterations, self.min_delta) >= self.harness_patience

    def to_dict(self) -> dict[str, Any]:
        return _recorded(self)

    def spec(self) -> str:
        return "patience:" + ",".join(
            f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
            for k, v in asdict(self).items()
            if k != "counts"
        )

    @classmethod
    def parse(cls, body: str) -> Patience:
        """The schedule from the text after `patience:`."""
        valid = [f.name for f in fields(Patience) if f.name != "counts"]
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


def _recorded(schedule: Fixed | Patience) -> dict[str, Any]:
    """The schedule as a run folder records it; the older meaning is the absence of `counts`, so a
    run recorded before issue 56 reopens with the record it wrote."""
    data = {"kind": schedule.kind, **asdict(schedule)}
    return data if schedule.counts == DECISIONS else {k: v for k, v in data.items() if k != "counts"}


def _check_counts(counts: str) -> None:
    if counts not in COUNTS:
        raise ConfigError(f"a schedule counts {' or '.join(COUNTS)}, got {counts!r}")


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
        "fixed:E,I (e.g. fixed:0.6,5)",
        "E epochs of weight steps, then I harness decisions",
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
    """`fixed:0.6,5` or `patience:weight_patience=3,harness_max=8`; ConfigError says what is valid."""
    name, _, body = text.strip().partition(":")
    if name not in SCHEDULES:
        raise ConfigError(f"unknown schedule {text!r}; use {SCHEDULE_FORMS}")
    return SCHEDULES[name].cls.parse(body)


def schedule_from_dict(data: dict[str, Any]) -> Schedule:
    """The inverse of `to_dict` (a run directory's config rebuilds its schedule); a record without
    `counts` was made before issue 56 and counts iterations, as it did then."""
    kind = SCHEDULES.get(data.get("kind"))
    if kind is None:
        raise ConfigError(
            f"unknown schedule kind {data.get('kind')!r}; valid kinds are {', '.join(SCHEDULES)}"
        )
    return kind.cls(**{"counts": ITERATIONS, **{k: v for k, v in data.items() if k != "kind"}})


def as_recorded_schedule(schedule: Schedule, recorded: dict[str, Any] | None) -> Schedule:
    """`schedule` with the meaning a recorded run was started under: a run recorded before
    issue 56 counts iterations, so reopening it neither changes what it did nor refuses it."""
    if recorded is None or "counts" in recorded:
        return schedule
    return replace(schedule, counts=ITERATIONS)
