"""Accuracy against rollouts, one line per method (mean over seeds); a single run's plot shades its
weight and harness phases, and a comparison's adds its paired gains with their CIs.

With several methods a step line and a band each overlap into one blur, and the question a reader
brings ("did it beat the start, and the baselines, by more than noise?") is answered by the paired
differences, not by overlapping intervals, so a comparison draws checkpoints with error bars beside
a panel of the paired gains."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from whale_dspy.reporting.pairs import paired_comparisons, seeded_comparisons
from whale_dspy.reporting.tables import checkpoint_slots, group_by_method
from whale_dspy.stats import PairedGain

if TYPE_CHECKING:  # matplotlib is imported only when a plot is drawn
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def method_curve(runs: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(rollouts, mean, low, high) of a method's checkpoints. One run: its own, its CI the band.
    Several seeds: each of their `checkpoint_slots`, drawn at the slot's mean rollouts with the
    seeds' mean and min-max."""
    curves = [r["curve"] for r in runs if r["curve"]]
    if len(curves) == 1:
        keys = ("rollouts", "mean_at_k", "ci_low", "ci_high")
        rollouts, mean, low, high = (np.array([p[key] for p in curves[0]], dtype=float) for key in keys)
        return rollouts, mean, low, high
    slots = checkpoint_slots(runs)
    rollouts = np.array([np.mean([p["rollouts"] for p in slot]) for slot in slots])
    means = [np.array([p["mean_at_k"] for p in slot]) for slot in slots]
    return (
        rollouts,
        np.array([m.mean() for m in means]),
        np.array([m.min() for m in means]),
        np.array([m.max() for m in means]),
    )


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
        draw_gains(gain_axes, gains, seeded_comparisons(reports))
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
        rollouts, mean, low, high = method_curve(runs)
        axes.step(rollouts, mean, where="post", marker="o", markersize=3, label=f"{method} (n={len(runs)})")
        axes.fill_between(rollouts, low, high, step="post", alpha=0.2)


def draw_checkpoints(axes: Axes, methods: MethodRuns) -> None:
    """Each method's checkpoints joined by a line, its band as error bars, nudged sideways so that
    methods evaluated at the same rollouts stay apart."""
    span = max(max(p["rollouts"] for r in runs for p in r["curve"]) for runs in methods.values()) or 1
    for index, (method, runs) in enumerate(methods.items()):
        rollouts, mean, low, high = method_curve(runs)
        nudge = (index - (len(methods) - 1) / 2) * span * 0.006
        # clipped: the mean of equal seeds can round past their maximum, and matplotlib refuses that
        bars = np.clip(np.vstack([mean - low, high - mean]), 0.0, None)
        axes.errorbar(
            rollouts + nudge, mean, yerr=bars, marker="o", markersize=4, capsize=2,
            linewidth=1.2, elinewidth=0.8, label=f"{method} (n={len(runs)})",
        )  # fmt: skip


def draw_gains(
    axes: Axes, gains: Sequence[tuple[str, PairedGain]], seeded: Mapping[str, PairedGain] | None = None
) -> None:
    """The paired gains as a forest: each pair's gain and 95% CI, filled when the interval that
    decides excludes zero. Where a side has several seeds (`seeded`), that is the interval over seeds
    and tasks, drawn thick, with the narrower one over tasks thin inside it: coloured by the task
    interval alone, a gap that a further seed could undo would read as a gain."""
    seeded = seeded or {}
    rows = np.arange(len(gains))[::-1]
    for row, (label, gain) in zip(rows, gains, strict=True):
        decider = seeded.get(label, gain)
        colour = "tab:green" if decider.low > 0 else "tab:red" if decider.high < 0 else "tab:grey"
        axes.plot([decider.low, decider.high], [row, row], color=colour, linewidth=2.5)
        if label in seeded:
            axes.plot([gain.low, gain.high], [row, row], color="black", linewidth=0.8)
        filled = colour if decider.beyond_noise else "white"
        axes.plot(gain.gain, row, "o", color=colour, markerfacecolor=filled)
    axes.axvline(0.0, color="black", linewidth=0.8)
    axes.set_yticks(rows, [label for label, _ in gains], fontsize="small")
    across = "over seeds and tasks (thick) and over tasks (thin)" if seeded else "over the test tasks"
    if seeded and len(seeded) < len(gains):
        across += ";\nrows with one seed a side: over tasks"
    axes.set_xlabel("paired gain of the final checkpoints, 95% CI (filled: excludes 0)")
    axes.set_title(f"paired {across}", fontsize="medium")
    axes.grid(axis="x", alpha=0.3)
