"""Accuracy against rollouts, one line per method (mean over seeds), with a band; a single run's
plot also shades its weight and harness phases."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from whale_dspy.reporting.tables import group_by_method


def step_values(curve: Sequence[dict[str, Any]], grid: np.ndarray, key: str) -> np.ndarray:
    """A run's value at each grid point: its latest evaluation at or before it (a run holds its program)."""
    xs = np.array([p["rollouts"] for p in curve])
    ys = np.array([p[key] for p in curve])
    index = np.searchsorted(xs, grid, side="right") - 1
    return np.where(index >= 0, ys[np.clip(index, 0, None)], np.nan)


def method_curve(runs: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(grid, mean, low, high): mean over seeds; band = seeds' min-max, or the CI for one seed."""
    curves = [r["curve"] for r in runs if r["curve"]]
    grid = np.unique(np.concatenate([[p["rollouts"] for p in c] for c in curves]))
    means = np.vstack([step_values(c, grid, "mean_at_k") for c in curves])
    if len(curves) == 1:
        low, high = step_values(curves[0], grid, "ci_low"), step_values(curves[0], grid, "ci_high")
    else:
        low, high = np.nanmin(means, axis=0), np.nanmax(means, axis=0)
    return grid, np.nanmean(means, axis=0), low, high


PHASE_COLOURS = {"weight": "tab:blue", "harness": "tab:orange"}


def phase_spans(reports: Sequence[dict[str, Any]]) -> list[tuple[str, int, int]]:
    """(kind, first rollout, last rollout) of each phase, when the plot shows one run (several runs'
    phases do not line up, so their plot shows none)."""
    runs = [r for r in reports if r["curve"]]
    if len(runs) != 1:
        return []
    return [
        (p["phase"], p["start_rollouts"], p["end_rollouts"])
        for p in runs[0].get("phases", ())
        if p["phase"] in PHASE_COLOURS and p["end_rollouts"] > p["start_rollouts"]
    ]


def plot_curves(reports: Sequence[dict[str, Any]], path: Path, *, title: str = "") -> Path:
    """Write a PNG of test mean@k against optimization rollouts for every method in `reports`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5))
    labelled: set[str] = set()
    for kind, start, end in phase_spans(reports):
        label = None if kind in labelled else f"{kind} phase"
        labelled.add(kind)
        axes.axvspan(start, end, color=PHASE_COLOURS[kind], alpha=0.08, label=label)
    for method, runs in group_by_method(reports).items():
        if not any(r["curve"] for r in runs):
            continue
        grid, mean, low, high = method_curve(runs)
        axes.step(grid, mean, where="post", marker="o", markersize=3, label=f"{method} (n={len(runs)})")
        axes.fill_between(grid, low, high, step="post", alpha=0.2)
    k = next((r["curve"][0]["k"] for r in reports if r["curve"]), None)
    axes.set_xlabel("optimization rollouts (weight + harness phases)")
    axes.set_ylabel(f"test mean@{k}" if k else "test mean@k")
    axes.set_title(title or "accuracy against rollouts")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
