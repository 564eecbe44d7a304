"""Paired comparisons of `whale eval` reads: several programs scored on one task set.

A comparison's checkpoints score 80 tasks; telling two methods apart by a few points needs
hundreds (bench/HISTORY.md, the power analysis), so each method's final program is read on its
own with `whale eval` on the same tasks and rollout ids, and the reads are paired here by task.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np

from whale_dspy.errors import ConfigError
from whale_dspy.reporting.pairs import SEEDED_NOTE, paired_row
from whale_dspy.reporting.tables import pooled_per_task
from whale_dspy.stats import CI_LEVEL, PairedGain, paired_gain, seeded_gain, task_mean_ci

READ_REPORT = "report.json"
"""What `whale eval` writes into its --out folder when a read finishes."""
UNKNOWN_DTYPE = "?"


@dataclass(frozen=True)
class Read:
    """One `whale eval` report: its label (the folder's name, say) and the fields the table needs."""

    label: str
    report: Mapping[str, Any]
    pooled: int = 1
    """How many reads (seeds of one method) this one pools task by task; see `pooled_read`."""
    members: tuple[Mapping[str, Sequence[float]], ...] = ()
    """The pooled seeds' own per-task scores, one map per seed (empty for a single read)."""

    @property
    def seeds(self) -> tuple[Mapping[str, Sequence[float]], ...]:
        return self.members or (self.per_task,)

    @property
    def per_task(self) -> Mapping[str, Sequence[float]]:
        return self.report["per_task"]

    @property
    def dtype(self) -> str:
        """The dtype its server served (UNKNOWN_DTYPE for a server someone else started: it cannot say)."""
        return (self.report.get("serving") or {}).get("dtype") or UNKNOWN_DTYPE


def pooled_read(label: str, reads: Sequence[Read]) -> Read:
    """Several seeds of one method, read on the same tasks, as one read: each task's scores pooled
    over the seeds, as `whale report` pools a method's seeds. A pair with it is the gain averaged
    over those seeds; its CI is over tasks, so it does not cover a further seed's training (the
    seeds are kept as `members` for the interval that does, `seeded_gain`)."""
    if len(reads) == 1:
        return Read(label, reads[0].report)
    _one_split(reads)
    if len({frozenset(read.per_task) for read in reads}) > 1:
        raise ConfigError(f"the reads pooled as {label} score different tasks: pool reads of one task set")
    if len({read.report["k"] for read in reads}) > 1:
        raise ConfigError(f"the reads pooled as {label} differ in k: each seed must weigh the same")
    reports = [read.report for read in reads]
    per_task = pooled_per_task(reports)
    mean, low, high = task_mean_ci(per_task)
    dtypes = sorted({read.dtype for read in reads} - {UNKNOWN_DTYPE})
    report = {
        "domain": reports[0].get("domain"),
        "split": reports[0].get("split"),
        "harness": " + ".join(dict.fromkeys(str(r.get("harness")) for r in reports)),
        "adapter": next((r["adapter"] for r in reports if r.get("adapter")), None),
        "serving": {"dtype": "+".join(dtypes) or None},
        "k": sum(r["k"] for r in reports),
        "tasks": len(per_task),
        "per_task": per_task,
        "mean_at_k": mean,
        "ci_low": low,
        "ci_high": high,
    }
    return Read(label, report, pooled=len(reads), members=tuple(read.per_task for read in reads))


def _one_split(reads: Sequence[Read]) -> None:
    splits = {(read.report.get("domain"), read.report.get("split")) for read in reads}
    if len(splits) > 1:
        raise ConfigError(f"the reads score different domains or splits: {sorted(map(str, splits))}")


def read_pairs(reads: Sequence[Read], *, level: float = CI_LEVEL) -> list[tuple[Read, Read, PairedGain]]:
    """Every later read against every earlier one, in the order given (so the start goes first)."""
    if len(reads) < 2:
        raise ConfigError("a paired comparison needs at least two reads")
    _one_split(reads)
    return [(a, b, paired_gain(a.per_task, b.per_task, level=level)) for a, b in combinations(reads, 2)]


def pair_row(before: Read, after: Read, gain: PairedGain, *, level: float, seeded: bool) -> str:
    """A pair's row; with `seeded`, its interval over seeds too (n/a where both sides are one seed)."""
    label = f"{after.label} − {before.label}"
    if not seeded:
        return paired_row(label, gain)
    wide = None
    if max(before.pooled, after.pooled) > 1:
        wide = seeded_gain(before.seeds, after.seeds, level=level)
    return paired_row(label, gain, wide, f"{before.pooled} vs {after.pooled}")


def gain_difference(reads: Sequence[Read], labels: Sequence[str], *, level: float = CI_LEVEL) -> PairedGain:
    """(A − B) − (C − D) for the reads labelled A, B, C, D: how much more one gain is than another
    (a harness edit's gain on a checkpoint against its gain on the base weights), task by task on the
    tasks all four scored, with its bootstrap interval over those tasks. Two gains' own intervals
    cannot say this: they share the between-task variance the pairing removes."""
    by_label = {read.label: read for read in reads}
    if len(labels) != 4 or len(set(labels)) != 4 or not set(labels) <= set(by_label):
        raise ConfigError(
            f"a difference of gains names four distinct reads A,B,C,D among {', '.join(by_label)}; got "
            f"{','.join(labels)}"
        )
    a, b, c, d = (by_label[label] for label in labels)
    if max(read.pooled for read in (a, b, c, d)) > 1:
        raise ConfigError(
            f"{','.join(labels)}: a difference of gains takes one seed a read, not pooled seeds"
        )
    _one_split([a, b, c, d])
    tasks = [task for task in a.per_task if all(task in read.per_task for read in (b, c, d))]
    if not tasks:
        raise ConfigError(f"{','.join(labels)}: the four reads share no task")

    def gains(after: Read, before: Read) -> dict[str, list[float]]:
        return {t: [float(np.mean(after.per_task[t]) - np.mean(before.per_task[t]))] for t in tasks}

    return paired_gain(gains(c, d), gains(a, b), level=level)


def reads_table(
    reads: Sequence[Read], *, level: float = CI_LEVEL, differences: Sequence[Sequence[str]] = ()
) -> str:
    """Markdown: each read's mean@k with its CI, then every pair's paired gain and verdict, with
    the pairs' intervals at `level` (each read's own stays the 95% its report holds), then each
    difference of gains asked for (`gain_difference`)."""
    rows = [
        "| read | harness | weights | dtype | tasks | k | mean@k [95% CI] |",
        "|---|---|---|---|---|---|---|",
    ]
    for read in reads:
        r = read.report
        weights = "adapter" if r.get("adapter") else "base"
        interval = f"{r['mean_at_k']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
        cells = (read.label, r.get("harness"), weights, read.dtype, r["tasks"], r["k"], interval)
        rows.append("| " + " | ".join(map(str, cells)) + " |")
    at = f"{level * 100:.4g}%"
    seeded = any(read.pooled > 1 for read in reads)
    if seeded:
        rows += ["", f"| pair | gain | {at} CI (tasks) | {at} CI (seeds, tasks) | tasks | seeds | |"]
        rows.append("|---|---|---|---|---|---|---|")
    else:
        rows += ["", f"| pair | gain | {at} CI | tasks | |", "|---|---|---|---|---|"]
    pairs = read_pairs(reads, level=level)
    rows += [pair_row(before, after, gain, level=level, seeded=seeded) for before, after, gain in pairs]
    for labels in differences:
        gain = gain_difference(reads, labels, level=level)
        a, b, c, d = labels
        rows.append(paired_row(f"({a} − {b}) − ({c} − {d})", gain, None, "1 each" if seeded else ""))
    notes = ["Paired by task on the tasks both reads scored; percentile bootstrap CI over tasks."]
    if differences:
        notes.append(
            "A difference of gains, (A − B) − (C − D), is taken task by task on the tasks all four reads "
            "scored; its CI is a percentile bootstrap over those tasks."
        )
    pooled = [f"{read.label} pools {read.pooled}" for read in reads if read.pooled > 1]
    if pooled:
        notes.append(
            f"Seeds pooled task by task ({', '.join(pooled)} reads; k counts every seed's samples). A pair "
            "with a pooled read is the gain averaged over its seeds; its CI over tasks does not cover the "
            "training noise of a further seed. " + SEEDED_NOTE
        )
    if level != CI_LEVEL:
        family = (1 - CI_LEVEL) / (1 - level)
        notes.append(
            f"Pairs' intervals at {level * 100:.4g}%: each of {family:.3g} comparisons at this level keeps "
            f"them all right together {CI_LEVEL:.0%} of the time (Bonferroni)."
        )
    if len({read.dtype for read in reads} - {UNKNOWN_DTYPE}) > 1:
        # Rollout ids fix the random numbers, not the logits: bf16 and float32 draw other samples.
        notes.append(
            "The reads were served in different dtypes: a pair across them measures the dtype's "
            "effect too (pair two reads of one program, one in each dtype, to size it)."
        )
    return "\n".join(rows) + "\n\n" + "\n".join(notes) + "\n"
