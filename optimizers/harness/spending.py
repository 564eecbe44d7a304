"""A race's error rate spent once over its looks: Lan-DeMets O'Brien-Fleming boundaries.

A race looks at its candidates after 8, 16, 32, ... selection tasks. Testing each look at the
whole error rate would adopt noise far more often than it says; splitting the rate evenly over the
looks (Bonferroni, the rule until issue 56) wastes most of it, since the looks share their tasks:
simulated at the measured spread, it realised a false-adoption rate near 0.012 of a nominal 0.05.
A spending function hands each look the share of the error rate that the information gathered so
far has earned: O'Brien-Fleming's spends almost nothing early (8 tasks cannot carry an adoption)
and leaves the last look nearly the fixed-sample bar.

The boundaries are solved look by look on the score process's density (Armitage, McPherson and
Rowe's recursive integration, as gsDesign does it), deterministic to about 1e-6 in the crossing
probability; `tests` check them against the published four-look values (3.750, 2.540, 2.016, 1.720
at a one-sided 0.05).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

GRID_POINTS = 401
"""Grid points of the density between the lower truncation and the boundary at each look."""

LOWER_SDS = 8.0
"""The density is truncated this many standard deviations below zero (mass beyond: < 1e-15)."""


def obf_spent(fraction: float, alpha: float) -> float:
    """The one-sided error rate a Lan-DeMets O'Brien-Fleming function has spent by `fraction` of the
    information: 2 - 2 Phi(z_{1 - alpha/2} / sqrt(t)), which is `alpha` at t = 1."""
    from scipy import stats

    if fraction <= 0:
        return 0.0
    return float(2 * stats.norm.sf(stats.norm.isf(alpha / 2) / math.sqrt(min(1.0, fraction))))


@functools.lru_cache(maxsize=256)
def _boundaries(fractions: tuple[float, ...], alpha: float) -> tuple[float, ...]:
    from scipy import optimize, stats

    bounds: list[float] = []
    grid = density = None
    spent_before, previous = 0.0, 0.0
    for fraction in fractions:
        share = obf_spent(fraction, alpha) - spent_before
        if grid is None:
            bound = float(stats.norm.isf(max(share, 1e-300)))
            new_grid = np.linspace(-LOWER_SDS * math.sqrt(fraction), bound * math.sqrt(fraction), GRID_POINTS)
            density = stats.norm.pdf(new_grid, scale=math.sqrt(fraction))
        else:
            step = math.sqrt(fraction - previous)
            weights = np.full(len(grid), grid[1] - grid[0])
            weights[[0, -1]] /= 2
            mass = density * weights

            def crossing(z: float, mass=mass, grid=grid, step=step, fraction=fraction, share=share) -> float:
                return float(np.sum(mass * stats.norm.sf((z * math.sqrt(fraction) - grid) / step))) - share

            bound = float(optimize.brentq(crossing, -10.0, 40.0)) if share > 0 else math.inf
            top = bound if math.isfinite(bound) else 40.0
            new_grid = np.linspace(-LOWER_SDS * math.sqrt(fraction), top * math.sqrt(fraction), GRID_POINTS)
            density = (stats.norm.pdf((new_grid[:, None] - grid[None, :]) / step) / step) @ mass
        bounds.append(bound)
        grid, spent_before, previous = new_grid, obf_spent(fraction, alpha), fraction
    return tuple(bounds)


def obf_boundaries(fractions: Sequence[float], alpha: float) -> list[float]:
    """The z boundaries of a one-sided test at the looks' information `fractions` (increasing, the
    last 1 for a race that reaches its whole slice) that together spend `alpha`."""
    fractions = tuple(float(f) for f in fractions)
    if not fractions:
        return []
    if (
        any(b <= a for a, b in zip(fractions, fractions[1:], strict=False))
        or fractions[0] <= 0
        or fractions[-1] > 1
    ):
        raise ValueError(f"information fractions must increase within (0, 1], got {fractions}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    return list(_boundaries(fractions, float(alpha)))


def look_levels(sizes: Sequence[int], alpha: float) -> list[float]:
    """Each look's nominal one-sided level (1 - Phi(boundary)) for looks after `sizes` tasks of a
    slice of `sizes[-1]`: the per-look alpha a paired t bound at that look is read at."""
    from scipy import stats

    total = sizes[-1]
    return [float(stats.norm.sf(z)) for z in obf_boundaries([n / total for n in sizes], alpha)]


__all__ = ["look_levels", "obf_boundaries", "obf_spent"]
