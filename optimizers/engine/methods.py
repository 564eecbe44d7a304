"""WHALE and its baselines as configurations of one engine, so they share one budget rule.

A method is a sequence of phase kinds plus whether it repeats. A repeating
method (whale, fst) asks the schedule when each phase ends; a non-repeating
one runs each of its phases until its cap (the whole budget, or for stagewise
the weight stage's share) no longer fits a unit. `prompt_only` tells the
wiring to build the harness phase in prompt-only mode (Fast-Slow Training).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from whale_dspy.errors import ConfigError

WEIGHT, HARNESS = "weight", "harness"


@dataclass(frozen=True)
class Method:
    name: str
    sequence: tuple[str, ...]
    repeat: bool
    prompt_only: bool = False
    weight_share: float | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if self.weight_share is not None and not 0 < self.weight_share < 1:
            raise ConfigError(f"{self.name}: weight_share must be in (0, 1), got {self.weight_share!r}")

    def phase_at(self, position: int) -> str | None:
        """The kind of the position-th phase of the run, or None when the method has no more."""
        if self.repeat:
            return self.sequence[position % len(self.sequence)]
        return self.sequence[position] if position < len(self.sequence) else None

    def cycle_of(self, position: int) -> int:
        return position // len(self.sequence)

    def share_of(self, kind: str) -> float | None:
        """The fraction of the budget a phase may spend up to (None: the whole budget)."""
        return self.weight_share if kind == WEIGHT else None

    @property
    def needs(self) -> frozenset[str]:
        return frozenset(self.sequence)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "description"}


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("whale", (WEIGHT, HARNESS), True, description="alternate weight and harness phases"),
        Method("weight-only", (WEIGHT,), False, description="RFT for the whole budget, seed harness"),
        Method(
            "harness-only", (HARNESS,), False, description="Meta-Harness for the whole budget, base weights"
        ),
        Method(
            "fst",
            (WEIGHT, HARNESS),
            True,
            prompt_only=True,
            description="Fast-Slow Training: prompt-only harness search alternated with RFT",
        ),
        Method(
            "stagewise",
            (WEIGHT, HARNESS),
            False,
            weight_share=0.5,
            description="all weight steps first (a share of the budget), then all harness search",
        ),
    )
}


def get_method(name: str, *, weight_share: float | None = None) -> Method:
    """A method by name; `weight_share` overrides stagewise's weight stage share."""
    if name not in METHODS:
        raise ConfigError(f"unknown method {name!r}; valid methods are {', '.join(METHODS)}")
    method = METHODS[name]
    if weight_share is None:
        return method
    if method.weight_share is None:
        raise ConfigError(f"weight_share applies to stagewise only, not {name!r}")
    return replace(method, weight_share=weight_share)
