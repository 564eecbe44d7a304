"""Per-method summaries over seeds and the Markdown comparison table."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

SWEPT = "whale"
"""WHALE: `whale compare` runs it under every --schedule (the baselines keep the first), and the
paired table sets it against every other method."""


@dataclass(frozen=True)
class Score:
    """A mean@k averaged over seeds, with the seeds' bootstrap CI bounds averaged and their spread."""

    mean: float
    ci_low: float
    ci_high: float
    seed_std: float

    def cell(self) -> str:
        spread = f" ±{self.seed_std:.3f} (seeds)" if self.seed_std else ""
        return f"{self.mean:.3f} [{self.ci_low:.3f}, {self.ci_high:.3f}]{spread}"


@dataclass(frozen=True)
class MethodSummary:
    """One method's runs over seeds. `final` averages finished runs only (an interrupted run's last
    checkpoint is not its final one); `best` is the best checkpoint so far of every run."""

    method: str
    seeds: int
    unfinished: int
    best: Score | None
    final: Score | None
    rollouts: float
    eval_rollouts: float
    proposer_tokens: float | None
    """None: unknown for at least one run (an external agent that reported no usage)."""
    lm_calls: float | None
    """The policy LM calls of the budget's rollouts; None: unknown for at least one run (recorded
    before calls were counted)."""
    completion_tokens: float | None
    """The policy completion tokens of those rollouts; None: unknown for at least one run."""
    train_seconds: float
    wall_seconds: float


def _score(points: Sequence[dict[str, Any] | None]) -> Score | None:
    points = [p for p in points if p]
    if not points:
        return None
    means = [p["mean_at_k"] for p in points]
    return Score(
        mean=float(np.mean(means)),
        ci_low=float(np.mean([p["ci_low"] for p in points])),
        ci_high=float(np.mean([p["ci_high"] for p in points])),
        seed_std=float(np.std(means, ddof=1)) if len(means) > 1 else 0.0,
    )


def schedule_label(spec: str, specs: Sequence[str]) -> str:
    """How a schedule is named beside others of one method: its kind when that is unique, else the spec."""
    kind = spec.partition(":")[0]
    return kind if [s.partition(":")[0] for s in set(specs)].count(kind) == 1 else spec


def group_by_method(reports: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Runs grouped by method in first-seen order; a method run under several schedules
    (WHALE fixed and adaptive) gets one group per schedule, labelled `method (schedule)`."""
    specs: dict[str, list[str]] = defaultdict(list)
    for report in reports:
        specs[report["method"]].append(report.get("schedule", ""))
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for report in reports:
        method, own = report["method"], specs[report["method"]]
        label = method
        if len(set(own)) > 1:
            label = f"{method} ({schedule_label(report['schedule'], own)})"
        groups[label].append(report)
    return groups


def finished(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs that ended and then evaluated their final program (a run records its end before
    that last evaluation, so a run stopped during it has ended without a final checkpoint)."""
    return [
        r
        for r in runs
        if r.get("finished") and (not r["curve"] or r["curve"][-1]["rollouts"] == r["spend"]["rollouts"])
    ]


def checkpoint_slots(runs: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Seeds' checkpoints as slots, ordered by their mean rollouts, each listing its points in the
    runs' order. The i-th checkpoints of the seeds are one slot (runs share eval_every, but a
    checkpoint waits for its unit to end, so seeds reach it a few rollouts apart); a slot that only
    some seeds have reached (a comparison under way) holds those seeds. Finished seeds' finals are
    one last slot: a unit that ends past both the next checkpoint and the budget takes one
    checkpoint for both, so a seed can end a checkpoint early, and its final must not be read as
    another seed's middle checkpoint. Orders by rollouts since a seed under way can be past a
    finished one's end."""
    ended = {id(r) for r in finished(runs)}
    heads = [r["curve"][:-1] if id(r) in ended else r["curve"] for r in runs if r["curve"]]
    slots = [[head[i] for head in heads if i < len(head)] for i in range(max(map(len, heads), default=0))]
    slots.append([r["curve"][-1] for r in runs if r["curve"] and id(r) in ended])
    return sorted((slot for slot in slots if slot), key=lambda slot: np.mean([p["rollouts"] for p in slot]))


def mean_count(counts: Sequence[int | None]) -> float | None:
    """The mean count (tokens, calls) over runs; unknown when any run's count is."""
    return None if any(count is None for count in counts) else float(np.mean(counts))


def count_cell(count: float | None) -> str:
    return "unknown" if count is None else f"{count:.0f}"


def summarize_methods(reports: Sequence[dict[str, Any]]) -> list[MethodSummary]:
    """One summary per method (and schedule, where a method ran under several), averaged over seeds."""
    return [
        MethodSummary(
            method=method,
            seeds=len(runs),
            unfinished=len(runs) - len(finished(runs)),
            best=_score([r["best"] for r in runs]),
            final=_score([r["final"] for r in finished(runs)]),
            rollouts=float(np.mean([r["spend"]["rollouts"] for r in runs])),
            eval_rollouts=float(np.mean([r["spend"]["eval_rollouts"] for r in runs])),
            proposer_tokens=mean_count([r["spend"]["proposer_tokens"] for r in runs]),
            lm_calls=mean_count([r["spend"]["rollout_calls"] for r in runs]),
            completion_tokens=mean_count([r["spend"].get("completion_tokens") for r in runs]),
            train_seconds=float(np.mean([r["spend"]["weight_seconds"] for r in runs])),
            wall_seconds=float(np.mean([r["spend"]["wall_seconds"] for r in runs])),
        )
        for method, runs in group_by_method(reports).items()
    ]


def markdown_table(
    summaries: Sequence[MethodSummary], *, k: int | None = None, budget: str | None = None
) -> str:
    """The comparison table: best and final mean@k with 95% bootstrap CIs (means over seeds)."""
    at = f"mean@{k}" if k else "mean@k"
    header = (
        f"| method | seeds | best {at} [95% CI] | final {at} [95% CI] | rollouts | LM calls "
        "| completion tokens | test rollouts | proposer tokens | weight-phase s | wall s |"
    )
    rows = [header, "|" + "---|" * 11]
    for s in summaries:
        best = s.best.cell() if s.best else "n/a"
        final = s.final.cell() if s.final else "n/a"
        rows.append(
            f"| {s.method} | {seeds_cell(s)} | {best} | {final} | {s.rollouts:.0f} "
            f"| {count_cell(s.lm_calls)} | {count_cell(s.completion_tokens)} | {s.eval_rollouts:.0f} "
            f"| {count_cell(s.proposer_tokens)} "
            f"| {s.train_seconds:.1f} | {s.wall_seconds:.1f} |"
        )
    note = f"\nBudget: {budget} per run. " if budget else "\n"
    note += "LM calls and completion tokens: the policy's in those rollouts (a vote over n samples "
    note += "makes n calls a rollout). "
    note += "CIs: bootstrap over test tasks, averaged over seeds; ± is the spread over seeds.\n"
    if any(s.unfinished for s in summaries):
        note += "Final: finished runs only; an unfinished run resumes with the command that started it.\n"
    return "\n".join(rows) + "\n" + note


def seeds_cell(summary: MethodSummary) -> str:
    return f"{summary.seeds} ({summary.unfinished} unfinished)" if summary.unfinished else str(summary.seeds)


def pooled_per_task(points: Sequence[Mapping[str, Any] | None]) -> dict[str, list[float]]:
    """Each task's scores over the given checkpoints or reads (one per seed), pooled."""
    pooled: dict[str, list[float]] = defaultdict(list)
    for point in points:
        for task, scores in ((point or {}).get("per_task") or {}).items():
            pooled[task].extend(scores)
    return dict(pooled)
