"""When a harness candidate replaces the incumbent: the acceptance rules and their paired bounds.

A harness phase that adopts the best mean on a few tasks mistakes noise for improvement (WHALE's
own warning about switching too eagerly). `paired` adopts a candidate only when the lower bound of
its per-task gain over the incumbent, scored on the same tasks with the same rollout ids, clears
`margin`; `argmax` (WHALE's and Meta-Harness's rule) and `strict` (GEPA's: a greater mean) are kept
to compare against and to reproduce the paper. Ties and leads within noise keep the incumbent.

The bound is Student's t over tasks, one-sided: a percentile bootstrap undercovers on the 8 to 64
tasks a race decides on, and t is exact enough for bounded per-task differences at that size.
`paired` spends its error rate once over a race's looks (a Lan-DeMets O'Brien-Fleming boundary,
optimizers.harness.spending) and splits it over the candidates that race; `paired-bonferroni`, the
rule until issue 56, splits it evenly over candidates x looks, which realises about a quarter of
the nominal rate and so refuses gains the same tasks could adopt. It is kept to compare against.

A race also stops what cannot win (non-binding futility, which costs no error rate): a candidate
whose conditional power, the chance its final lead clears the last look's bar given what it has
shown so far and assuming its true gain is the smallest lead the slice can adopt, falls below
`futility` leaves the race. At 0.3, simulated at the measured spread (bench/selection.py
--synthetic), a race among candidates no better than the incumbent stops after about 40% of the
rollouts its whole slice would cost.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from whale_dspy.errors import ConfigError

PAIRED, BONFERRONI, ARGMAX, STRICT = "paired", "paired-bonferroni", "argmax", "strict"
ACCEPTANCE_RULES: dict[str, str] = {
    PAIRED: "adopt only when the paired gain's lower bound over tasks clears the margin, the error "
    "rate spent once over the race's looks (O'Brien-Fleming) and split over its racers (default)",
    BONFERRONI: "the paired bound with the error rate split evenly over racers x looks (the rule "
    "until issue 56, for comparison)",
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


def spread_of(after: Mapping[str, float], before: Mapping[str, float]) -> float:
    """The sd of the per-task differences on shared tasks, with `paired_bound`'s floor for ties."""
    gains = np.asarray([after[t] - before[t] for t in after if t in before], dtype=float)
    if len(gains) < 2:
        return math.nan
    return float(gains.std(ddof=1)) or 1 / math.sqrt(len(gains))


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
    spread = spread_of(after, before)
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
    futility: float = 0.3
    """A racing candidate leaves once its conditional power under the smallest adoptable lead
    falls below this (0: never); non-binding, so it costs no error rate."""

    def __post_init__(self) -> None:
        if self.rule not in ACCEPTANCE_RULES:
            raise ConfigError(f"unknown acceptance rule {self.rule!r}; valid: {', '.join(ACCEPTANCE_RULES)}")
        if not 0.5 <= self.confidence < 1.0:
            raise ConfigError(f"acceptance confidence must be in [0.5, 1), got {self.confidence}")
        if not (math.isfinite(self.margin) and self.margin >= 0):
            raise ConfigError(f"acceptance margin must be a number >= 0, got {self.margin}")
        if not 0.0 <= self.futility < 1.0:
            raise ConfigError(f"acceptance futility must be in [0, 1), got {self.futility}")

    @property
    def races(self) -> bool:
        """Whether candidates are scored in rounds and dropped early (the other rules score all)."""
        return self.rule in (PAIRED, BONFERRONI)

    def levels(self, sizes: Sequence[int], racers: int) -> list[float]:
        """Each look's one-sided error rate for one candidate, when `racers` race over looks after
        `sizes` tasks (the last the whole slice)."""
        if not sizes:
            return []
        alpha = (1.0 - self.confidence) / max(1, racers)
        if self.rule == PAIRED:
            from optimizers.harness.spending import look_levels

            return look_levels(sizes, alpha)
        return [alpha / len(sizes)] * len(sizes)

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

    def smallest_lead(self, tasks: int, level: float, spread: float) -> float:
        """The smallest observed mean lead that clears the bound on `tasks` tasks at one-sided
        `level`, when the per-task differences spread `spread` (infinite below two tasks)."""
        from scipy import stats

        if tasks < 2:
            return math.inf
        return self.margin + float(stats.t.isf(level, tasks - 1)) * spread / math.sqrt(tasks)

    def conditional_power(
        self, bound: PairedBound, spread: float, *, total: int, lead: float, level: float
    ) -> float:
        """The chance a candidate's lead on all `total` tasks clears the last look's bar (at
        `level`), given its mean on `bound.tasks` so far and a true gain of `lead` on the rest."""
        from scipy import stats

        done = bound.tasks
        if done >= total or not math.isfinite(lead):
            return 1.0 if bound.low > self.margin else 0.0
        needed = self.smallest_lead(total, level, spread)
        expected = (done * bound.gain + (total - done) * lead) / total
        noise = spread * math.sqrt(total - done) / total
        return float(stats.norm.sf((needed - expected) / noise)) if noise > 0 else float(expected > needed)


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
    "BONFERRONI",
    "PAIRED",
    "STRICT",
    "Acceptance",
    "PairedBound",
    "mean_of",
    "paired_bound",
    "race_sizes",
    "spread_of",
]
