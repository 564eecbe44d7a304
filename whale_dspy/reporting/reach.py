"""Rollouts to reach the strongest baseline's peak: the paper's finding (1) ("harness search alone
reaches weight-only's peak with fewer rollouts") read from a comparison's test curves. The peak and
the first checkpoint at it are both noisy, so the rollouts to it come with an interval over seeds,
then tasks, the peak found again in every resample."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from whale_dspy.reporting.tables import SWEPT, checkpoint_slots, finished, group_by_method
from whale_dspy.stats import CI_LEVEL, resamples_for, seed_means, task_weights

UNFINISHED = "unfinished"
NEVER = float("inf")
"""The rollouts of a curve that does not reach the bar, so that resamples sort past every reach."""


@dataclass(frozen=True)
class MethodReach:
    """One method's rollouts to the bar.

    `rollouts` is the first checkpoint at which its seeds' mean curve (checkpoints aligned by their
    order) reaches the bar, None if it never does. `low`/`high` bound it over seeds and tasks (NEVER:
    the curve misses the bar at that end), `reached` is the share of resamples in which it reaches the
    bar at all and `sooner` the share in which it does so at an earlier checkpoint than the one where
    the baseline peaks. Checkpoints are ordered by their slot, not their rollouts: a comparison's runs
    share `eval_every`, and the n-th checkpoint of each lands on the first unit boundary past n x
    eval_every (176 or 192 rollouts for 163), so only an earlier slot is fewer rollouts; a last
    checkpoint where the budget ran out is every such run's last slot. All three are None without
    per-task scores or a finished run (`rollouts` too, then, and `finished` is False). `per_seed` is
    each seed's own first checkpoint at the bar (None: never; UNFINISHED: a run still going that has
    not yet)."""

    rollouts: float | None
    low: float | None
    high: float | None
    reached: float | None
    sooner: float | None
    per_seed: list[int | str | None]
    finished: bool = True


@dataclass(frozen=True)
class Reach:
    """The bar is the peak of the strongest baseline's seeds' mean curve (its highest checkpoint,
    `target`, at `at` rollouts): the strongest method WHALE is not, by that peak."""

    baseline: str
    target: float
    at: float
    methods: dict[str, MethodReach]


def rollouts_to_reach(
    reports: Sequence[dict[str, Any]], *, seed: int = 0, level: float = CI_LEVEL
) -> Reach | None:
    """None for a single method (a run's own report) or without a finished baseline curve."""
    groups = group_by_method(reports)
    aligned = {label: seeds for label, runs in groups.items() if (seeds := _aligned(runs)) is not None}
    baselines = [label for label in aligned if groups[label][0]["method"] != SWEPT]
    if len(groups) < 2 or not baselines:
        return None
    mean_curves = {label: _field(seeds, "mean_at_k").mean(axis=0) for label, seeds in aligned.items()}
    positions = {label: _field(seeds, "rollouts").mean(axis=0) for label, seeds in aligned.items()}
    baseline = max(baselines, key=lambda label: mean_curves[label].max())
    peak = int(mean_curves[baseline].argmax())
    target = float(mean_curves[baseline][peak])
    slots = _slots(groups, positions)
    resampled = _resampled_reach(aligned, positions, slots, baseline, seed=seed, level=level)

    def reach(label: str) -> MethodReach:
        per_seed = [_seed_reach(run, target) for run in groups[label]]
        if label not in mean_curves:
            return MethodReach(None, None, None, None, None, per_seed, finished=False)
        point = _finite(_first_at(mean_curves[label][None], target, positions[label])[0])
        if label not in resampled:
            return MethodReach(point, None, None, None, None, per_seed)
        reaches, low, high, sooner = resampled[label]
        return MethodReach(point, low, high, float(np.isfinite(reaches).mean()), sooner, per_seed)

    return Reach(
        baseline, target, float(positions[baseline][peak]), {label: reach(label) for label in groups}
    )


def _aligned(runs: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]] | None:
    """Each finished seed's checkpoints in the `checkpoint_slots` every finished seed reached (the
    plot's slots, cut to a rectangle for resampling seeds). None without a finished run."""
    seeds = [r for r in finished(runs) if r["curve"]]
    if not seeds:
        return None
    full = [slot for slot in checkpoint_slots(seeds) if len(slot) == len(seeds)]
    return [list(points) for points in zip(*full, strict=True)]


def _field(seeds: list[list[dict[str, Any]]], key: str) -> np.ndarray:
    """seeds x checkpoints of one field of the aligned checkpoints."""
    return np.array([[point[key] for point in seed] for seed in seeds], dtype=float)


def _first_at(curves: np.ndarray, targets: np.ndarray | float, rollouts: np.ndarray) -> np.ndarray:
    """Per row of `curves` (curves x checkpoints), the rollouts of its first checkpoint at or above
    its target; NEVER where none is."""
    hit = curves >= np.reshape(targets, (-1, 1)) - 1e-12
    return np.where(hit.any(axis=1), rollouts[hit.argmax(axis=1)], NEVER)


def _finite(value: float) -> float | None:
    return value if np.isfinite(value) else None


def _seed_reach(run: dict[str, Any], target: float) -> int | str | None:
    curve = run["curve"]
    reached = _first_at(
        np.array([[p["mean_at_k"] for p in curve]]), target, np.array([p["rollouts"] for p in curve])
    )
    if np.isfinite(reached[0]):
        return int(reached[0])
    return None if finished([run]) else UNFINISHED


def _resampled_reach(
    aligned: dict[str, list[list[dict[str, Any]]]],
    positions: dict[str, np.ndarray],
    slots: dict[str, np.ndarray],
    baseline: str,
    *,
    seed: int,
    level: float,
) -> dict[str, tuple[np.ndarray, float, float, float]]:
    """Per method: each resample's rollouts to the resampled baseline's peak, the interval's ends and
    the share reached before that peak. Each resample draws the tasks once for every method, then
    each method's seeds; empty where a finished checkpoint has no per-task scores."""
    points = [point for seeds in aligned.values() for seed in seeds for point in seed]
    if any(not point.get("per_task") for point in points):
        return {}
    tasks = sorted(set.intersection(*(set(point["per_task"]) for point in points)))
    if not tasks:
        return {}
    rng = np.random.default_rng(seed)
    weights = task_weights(rng, resamples_for(level), len(tasks))
    curves = {label: seed_means(_scores(seeds, tasks), weights, rng) for label, seeds in aligned.items()}
    base = curves[baseline]
    peaks = base.max(axis=1)
    peak_slot = slots[baseline][base.argmax(axis=1)]
    tail = (1 - level) / 2 * 100
    out = {}
    for label, curve in curves.items():
        reaches = _first_at(curve, peaks, positions[label])
        low = float(np.percentile(reaches, tail, method="lower"))
        high = float(np.percentile(reaches, 100 - tail, method="higher"))
        sooner = _first_at(curve, peaks, slots[label]) < peak_slot
        out[label] = (reaches, low, high, float(sooner.mean()))
    return out


def _slots(
    groups: dict[str, list[dict[str, Any]]], positions: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Each method's checkpoints as slots (their order), its last moved to the comparison's last slot
    where every finished run of it stopped because the next unit no longer fit the budget."""
    last = max(len(p) for p in positions.values()) - 1
    slots = {}
    for label, p in positions.items():
        slot = np.arange(len(p), dtype=float)
        if all(r.get("phases") and r["phases"][-1]["reason"] == "budget" for r in finished(groups[label])):
            slot[-1] = last
        slots[label] = slot
    return slots


def _scores(seeds: list[list[dict[str, Any]]], tasks: list[str]) -> np.ndarray:
    """seeds x checkpoints x tasks of each task's mean over its samples."""
    return np.array(
        [[[np.mean(point["per_task"][t]) for t in tasks] for point in seed] for seed in seeds], dtype=float
    )


def reach_table(reports: Sequence[dict[str, Any]]) -> str:
    """`rollouts_to_reach` as Markdown: one row per method."""
    reach = rollouts_to_reach(reports)
    if reach is None:
        return ""
    rows = [
        f"| method | rollouts to reach {reach.baseline}'s peak {reach.target:.3f} (at {reach.at:.0f}) "
        "| 95% interval (seeds, tasks) | resamples that reach it | reach it before that peak | per seed |",
        "|---|---|---|---|---|---|",
    ]
    for label, m in reach.methods.items():
        interval = "n/a" if m.low is None else f"[{_rollouts(m.low)}, {_rollouts(m.high)}]"
        share = "n/a" if m.reached is None or label == reach.baseline else f"{m.reached:.0%}"
        sooner = "n/a" if m.sooner is None or label == reach.baseline else f"{m.sooner:.0%}"
        cells = ", ".join(_rollouts(n) for n in m.per_seed)
        point = _rollouts(m.rollouts) if m.finished else UNFINISHED
        rows.append(f"| {label} | {point} | {interval} | {share} | {sooner} | {cells} |")
    note = (
        "The bar is the peak of the strongest baseline's seeds' mean test curve; a method reaches it at "
        "the first checkpoint of its own seeds' mean curve at or above it. Intervals and shares resample "
        "each method's seeds, then the test tasks, and find the peak again in every resample; the peak is "
        'picked after the fact, so it sits above the baseline\'s true best (a high bar). "Before" means '
        "an earlier checkpoint slot (runs share eval_every; a last checkpoint where the budget ran out is "
        "the last slot), not a few rollouts fewer. With two or three seeds a side the resampled "
        "seeds understate their spread, and the intervals are too narrow.\n"
    )
    return "\n".join(rows) + "\n\n" + note


def _rollouts(value: float | int | str | None) -> str:
    if value is None or value == NEVER:
        return "not reached"
    return value if isinstance(value, str) else f"{value:.0f}"
