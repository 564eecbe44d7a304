"""Accuracy against rollouts, one line per method (mean over seeds); a single run's plot shades its
weight and harness phases, and a comparison's adds its paired gains with their CIs.

With several methods a step line and a band each overlap into one blur, and the question a reader
brings ("did it beat the start, and the baselines, by more than noise?") is answered by the paired
differences, not by overlapping intervals, so a comparison draws checkpoints with error bars beside
a panel of the paired gains."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from whale_dspy.reporting.pairs import paired_comparisons
from whale_dspy.reporting.tables import group_by_method
from whale_dspy.stats import PairedGain

if TYPE_CHECKING:  # matplotlib is imported only when a plot is drawn
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


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


MethodRuns = dict[str, list[dict[str, Any]]]
"""Each method's run reports, in the order `group_by_method` gives them."""

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
    import matplotlib.pyplot as plt

    figure = curves_figure(reports, title=title)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def curves_figure(reports: Sequence[dict[str, Any]], *, title: str = "") -> Figure:
    """The figure `plot_curves` writes: one run's curve with its phases shaded, or a comparison's
    checkpoints beside its paired gains (one row per `paired_comparisons` pair). The caller closes it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = {m: runs for m, runs in group_by_method(reports).items() if any(r["curve"] for r in runs)}
    gains = paired_comparisons(reports) if len(methods) > 1 else []
    if gains:
        figure, (axes, gain_axes) = plt.subplots(
            1, 2, figsize=(12, 0.9 + max(3.6, 0.32 * len(gains))), width_ratios=(1.1, 1)
        )
        draw_checkpoints(axes, methods)
        draw_gains(gain_axes, gains)
        note = "bars: 95% CI (n=1), seeds' range (n>1)"
    else:
        figure, axes = plt.subplots(figsize=(7, 4.5))
        draw_steps(axes, reports, methods)
        note = None
    k = next((r["curve"][0]["k"] for r in reports if r["curve"]), None)
    axes.set_xlabel("optimization rollouts (weight + harness phases)")
    axes.set_ylabel(f"test mean@{k}" if k else "test mean@k")
    axes.set_title(title or "accuracy against rollouts")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small", title=note, title_fontsize="small")
    figure.tight_layout()
    return figure


def draw_steps(axes: Axes, reports: Sequence[dict[str, Any]], methods: MethodRuns) -> None:
    """Each method's held program as a step line with its band, one run's phases shaded."""
    labelled: set[str] = set()
    for kind, start, end in phase_spans(reports):
        label = None if kind in labelled else f"{kind} phase"
        labelled.add(kind)
        axes.axvspan(start, end, color=PHASE_COLOURS[kind], alpha=0.08, label=label)
    for method, runs in methods.items():
        grid, mean, low, high = method_curve(runs)
        axes.step(grid, mean, where="post", marker="o", markersize=3, label=f"{method} (n={len(runs)})")
        axes.fill_between(grid, low, high, step="post", alpha=0.2)


def draw_checkpoints(axes: Axes, methods: MethodRuns) -> None:
    """Each method's checkpoints joined by a line, its band as error bars, nudged sideways so that
    methods evaluated at the same rollouts stay apart."""
    span = max(max(p["rollouts"] for r in runs for p in r["curve"]) for runs in methods.values()) or 1
    for index, (method, runs) in enumerate(methods.items()):
        grid, mean, low, high = method_curve(runs)
        nudge = (index - (len(methods) - 1) / 2) * span * 0.006
        # clipped: the mean of equal seeds can round past their maximum, and matplotlib refuses that
        bars = np.clip(np.vstack([mean - low, high - mean]), 0.0, None)
        axes.errorbar(
            grid + nudge, mean, yerr=bars, marker="o", markersize=4, capsize=2,
            linewidth=1.2, elinewidth=0.8, label=f"{method} (n={len(runs)})",
        )  # fmt: skip


def draw_gains(axes: Axes, gains: Sequence[tuple[str, PairedGain]]) -> None:
    """The paired gains as a forest: each pair's gain and 95% CI, filled when the CI excludes zero."""
    rows = np.arange(len(gains))[::-1]
    for row, (_, gain) in zip(rows, gains, strict=True):
        colour = "tab:green" if gain.low > 0 else "tab:red" if gain.high < 0 else "tab:grey"
        axes.plot([gain.low, gain.high], [row, row], color=colour, linewidth=2)
        axes.plot(gain.gain, row, "o", color=colour, markerfacecolor=colour if gain.beyond_noise else "white")
    axes.axvline(0.0, color="black", linewidth=0.8)
    axes.set_yticks(rows, [label for label, _ in gains], fontsize="small")
    axes.set_xlabel("paired gain of the final checkpoints, 95% CI (filled: excludes 0)")
    axes.set_title("paired over the test tasks")
    axes.grid(axis="x", alpha=0.3)
