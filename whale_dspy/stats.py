"""Statistics of evaluations: bootstrap intervals over tasks and paired gains (numpy only, so
reports can be drawn without importing DSPy)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from whale_dspy.errors import ConfigError

BOOTSTRAP_RESAMPLES = 2000
CI_LEVEL = 0.95
TAIL_RESAMPLES = 25
"""The fewest resamples beyond each end of an interval: a 98.75% one (four comparisons held
together) takes 4000 resamples, where 2000 would leave 12 per tail to place its ends."""


def bootstrap_ci(values: Sequence[float], *, seed: int = 0, level: float = CI_LEVEL) -> tuple[float, float]:
    """Percentile bootstrap over tasks (the unit that varies), not over correlated samples."""
    if not 0.5 <= level < 1.0:
        raise ConfigError(f"a CI level of {level} is out of range: one in [0.5, 1)")
    if len(values) == 0:
        return 0.0, 0.0
    data = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    tail = (1 - level) / 2
    means = data[rng.integers(0, len(data), size=(resamples_for(level), len(data)))].mean(axis=1)
    return float(np.percentile(means, tail * 100)), float(np.percentile(means, 100 - tail * 100))


def task_mean_ci(per_task: Mapping[str, Sequence[float]]) -> tuple[float, float, float]:
    """mean@k (the mean over tasks of each task's mean over its samples) and its 95% CI over tasks."""
    task_means = [float(np.mean(scores)) for scores in per_task.values()]
    low, high = bootstrap_ci(task_means)
    return (float(np.mean(task_means)) if task_means else 0.0), low, high


@dataclass(frozen=True)
class PairedGain:
    """`after` minus `before` on the tasks both scored: the per-task mean gain and its bootstrap CI.

    Pairing by task removes the between-task variance that two separate CIs carry, so
    "beats h0 by more than noise" is `low > 0` here, not two non-overlapping intervals.
    """

    gain: float
    low: float
    high: float
    tasks: int

    @property
    def beyond_noise(self) -> bool:
        return self.low > 0 or self.high < 0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "beyond_noise": self.beyond_noise}


def paired_gain(
    before: Mapping[str, Sequence[float]],
    after: Mapping[str, Sequence[float]],
    *,
    seed: int = 0,
    level: float = CI_LEVEL,
) -> PairedGain:
    """Compare two evaluations' per-task scores (e.g. `EvalReport.per_task` of h0 and of a searched
    harness, or one method's pooled seeds against another's) on the tasks both scored. A `level` of
    1 - 0.05/m keeps m comparisons' intervals right together 95% of the time (Bonferroni)."""
    shared = [task for task in before if task in after]
    if not shared:
        raise ConfigError("paired_gain needs evaluations that share at least one task")
    gains = [float(np.mean(after[t]) - np.mean(before[t])) for t in shared]
    low, high = bootstrap_ci(gains, seed=seed, level=level)
    return PairedGain(gain=float(np.mean(gains)), low=low, high=high, tasks=len(shared))


def seeded_gain(
    before: Sequence[Mapping[str, Sequence[float]]],
    after: Sequence[Mapping[str, Sequence[float]]],
    *,
    seed: int = 0,
    level: float = CI_LEVEL,
) -> PairedGain:
    """`after` minus `before` where each is one method's seeds (one per-task map per seed), with a
    hierarchical bootstrap CI: each resample draws each method's seeds with replacement, then the
    tasks. Tasks are crossed with seeds (every seed reads the same tasks), so one task draw serves
    every seed and the pairs stay on the same tasks. Unlike `paired_gain` over pooled seeds, the
    interval holds the spread a further seed's training would add; a method with one seed adds none.
    """
    if not 0.5 <= level < 1.0:
        raise ConfigError(f"a CI level of {level} is out of range: one in [0.5, 1)")
    if not before or not after:
        raise ConfigError("seeded_gain needs at least one seed on each side")
    shared = [task for task in before[0] if all(task in s for s in (*before, *after))]
    if not shared:
        raise ConfigError("seeded_gain needs seeds that share at least one task")
    a = np.array([[np.mean(s[t]) for t in shared] for s in after], dtype=float)
    b = np.array([[np.mean(s[t]) for t in shared] for s in before], dtype=float)
    rng = np.random.default_rng(seed)
    tail = (1 - level) / 2
    weights = task_weights(rng, resamples_for(level), len(shared))
    diffs = seed_means(a, weights, rng) - seed_means(b, weights, rng)
    low, high = np.percentile(diffs, [tail * 100, 100 - tail * 100])
    gain = float(a.mean() - b.mean())
    return PairedGain(gain=gain, low=float(low), high=float(high), tasks=len(shared))


def resamples_for(level: float) -> int:
    """Bootstrap resamples for an interval at `level`: enough to place each of its ends."""
    return max(BOOTSTRAP_RESAMPLES, math.ceil(TAIL_RESAMPLES / ((1 - level) / 2)))


def task_weights(rng: np.random.Generator, resamples: int, tasks: int) -> np.ndarray:
    """resamples x tasks: how often each task is drawn in each resample (one draw of the tasks, shared
    by every seed and method of a resample, so comparisons stay paired by task)."""
    draws = rng.integers(0, tasks, size=(resamples, tasks))
    flat = (draws + tasks * np.arange(resamples)[:, None]).ravel()
    return np.bincount(flat, minlength=resamples * tasks).reshape(resamples, tasks)


def seed_means(scores: np.ndarray, weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Per resample: the mean over resampled seeds of each seed's mean over the resampled tasks.
    `scores` is seeds x tasks (or seeds x checkpoints x tasks, giving resamples x checkpoints)."""
    per_seed = np.einsum("rt,s...t->rs...", weights, scores) / scores.shape[-1]  # resamples x seeds [x pts]
    picks = rng.integers(0, scores.shape[0], size=per_seed.shape[:2])
    picks = picks.reshape(picks.shape + (1,) * (per_seed.ndim - 2))
    return np.take_along_axis(per_seed, picks, axis=1).mean(axis=1)
