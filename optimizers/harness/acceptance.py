"""When a harness candidate replaces the incumbent: the acceptance rules and their paired bounds.

A harness phase that adopts the best mean on a few tasks mistakes noise for improvement (WHALE's
own warning about switching too eagerly). `paired` adopts a candidate only when the lower bound of
its per-task gain over the incumbent, scored on the same tasks with the same rollout ids, clears
`margin`; `argmax` (WHALE's and Meta-Harness's rule) and `strict` (GEPA's: a greater mean) are kept
to compare against and to reproduce the paper. Ties and leads within noise keep the incumbent.

The bound is Student's t over tasks, one-sided: a percentile bootstrap undercovers on the 8 to 64
tasks a race decides on, and t is exact enough for bounded per-task differences at that size. Its
error rate is split (Bonferroni) over every comparison a race may make, so looking after each
round and at several candidates does not multiply the chance of adopting noise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from whale_dspy.errors import ConfigError

PAIRED, ARGMAX, STRICT = "paired", "argmax", "strict"
ACCEPTANCE_RULES: dict[str, str] = {
    PAIRED: "adopt only when the paired gain's lower bound over tasks clears the margin (default)",
    ARGMAX: "adopt the best mean, however small its lead (WHALE's and Meta-Harness's rule)",
    STRICT: "adopt a strictly greater mean (GEPA's rule)",
}


@dataclass(frozen=True)
class PairedBound:
    """`candidate - incumbent` over the tasks both scored: mean gain and its one-sided bounds."""

    gain: float
    low: float
    high: float
    tasks: int

    def to_dict(self) -> dict[str, Any]:
        return {key: _finite(value) for key, value in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PairedBound:
        low, high = data["low"], data["high"]
        return cls(
            gain=data["gain"],
            low=-math.inf if low is None else low,
            high=math.inf if high is None else high,
            tasks=data["tasks"],
        )


def paired_bound(after: Mapping[str, float], before: Mapping[str, float], *, alpha: float) -> PairedBound:
    """One-sided (1 - alpha) bounds of the mean per-task gain `after - before` on shared tasks.

    With fewer than two tasks there is no interval (infinite bounds): nothing is adopted or dropped
    on one task. Identical differences on every task (eight ties, say) are no evidence that the
    spread is zero: the spread is then taken as if one task in n had differed by the whole score
    range (1), so a tie is neither dropped as hopeless nor a uniform lead adopted on two tasks.
    """
    from scipy import stats

    shared = [task for task in after if task in before]
    gains = np.asarray([after[t] - before[t] for t in shared], dtype=float)
    if len(gains) == 0:
        return PairedBound(0.0, -math.inf, math.inf, 0)
    mean = float(gains.mean())
    if len(gains) < 2:
        return PairedBound(mean, -math.inf, math.inf, 1)
    spread = float(gains.std(ddof=1)) or 1 / math.sqrt(len(gains))
    half = float(stats.t.ppf(1 - alpha, len(gains) - 1) * spread / math.sqrt(len(gains)))
    return PairedBound(mean, mean - half, mean + half, len(gains))


@dataclass(frozen=True)
class Acceptance:
    """The rule a harness decision is made by; one setting with named choices."""

    rule: str = PAIRED
    confidence: float = 0.95
    """The paired bound's one-sided confidence, held over every comparison of one race."""
    margin: float = 0.0
    """The gain a candidate's lower bound must exceed (the score's own units)."""

    def __post_init__(self) -> None:
        if self.rule not in ACCEPTANCE_RULES:
            raise ConfigError(f"unknown acceptance rule {self.rule!r}; valid: {', '.join(ACCEPTANCE_RULES)}")
        if not 0.5 <= self.confidence < 1.0:
            raise ConfigError(f"acceptance confidence must be in [0.5, 1), got {self.confidence}")
        if not (math.isfinite(self.margin) and self.margin >= 0):
            raise ConfigError(f"acceptance margin must be a number >= 0, got {self.margin}")

    @property
    def races(self) -> bool:
        """Whether candidates are scored in rounds and dropped early (the other rules score all)."""
        return self.rule == PAIRED

    def alpha(self, comparisons: int) -> float:
        """The error rate of one comparison when a race may make `comparisons` of them."""
        return (1.0 - self.confidence) / max(1, comparisons)

    def clears(self, bound: PairedBound, ranks: tuple[tuple[float, ...], tuple[float, ...]]) -> bool:
        """Whether a candidate is adopted over the incumbent, given its paired bound and both rank
        keys (mean first, then the cheaper-is-better tie-breaks `argmax` has always used)."""
        candidate, incumbent = ranks
        if self.rule == ARGMAX:
            return candidate > incumbent
        if self.rule == STRICT:
            return candidate[0] > incumbent[0]
        return bound.low > self.margin

    def hopeless(self, bound: PairedBound) -> bool:
        """Whether a racing candidate can no longer clear the rule against the incumbent."""
        return self.races and bound.high <= self.margin


def race_sizes(start: int, total: int) -> list[int]:
    """The growing task counts of a race's rounds: start, 2 start, 4 start, ..., total."""
    if total <= 0:
        return []
    sizes, size = [], max(1, start)
    while size < total:
        sizes.append(size)
        size *= 2
    return [*sizes, total]


def mean_of(scores: Mapping[str, float], tasks: Sequence[str]) -> float:
    """The mean over `tasks` of per-task scores (0 for no tasks)."""
    return float(np.mean([scores[t] for t in tasks])) if tasks else 0.0


def _finite(value: Any) -> Any:
    """JSON has no infinity: an unbounded side is recorded as null."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


__all__ = [
    "ACCEPTANCE_RULES",
    "ARGMAX",
    "PAIRED",
    "STRICT",
    "Acceptance",
    "PairedBound",
    "mean_of",
    "paired_bound",
    "race_sizes",
]
