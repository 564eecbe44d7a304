"""Intervals that include the seeds: a hierarchical bootstrap (seeds, then tasks) covers a method
difference when training noise moves whole seeds, where an interval over tasks alone does not."""

from __future__ import annotations

import os

import numpy as np
import pytest
from cli_helpers import write_read

from whale_cli.main import main
from whale_dspy.reporting import paired_table
from whale_dspy.stats import paired_gain, seeded_gain

TRUE_GAIN = 0.05


def synthetic_seeds(rng, *, seeds, tasks, seed_sd):
    """Two methods' seeds on shared tasks: task difficulty, a per-task gain around TRUE_GAIN, one
    offset per seed drawn with `seed_sd` (the training noise), and per-read noise."""
    difficulty = rng.normal(0.5, 0.2, tasks)
    gain = rng.normal(TRUE_GAIN, 0.1, tasks)

    def method(effect):
        return [
            {f"t{t}": [difficulty[t] + effect[t] + offset + rng.normal(0, 0.1)] for t in range(tasks)}
            for offset in rng.normal(0, seed_sd, seeds)
        ]

    return method(np.zeros(tasks)), method(gain)


def pooled(seeds):
    return {task: [score for seed in seeds for score in seed[task]] for task in seeds[0]}


def coverage(seed_sd, draws=80):
    """How often each interval holds TRUE_GAIN over `draws` synthetic comparisons of 5 seeds each."""
    rng = np.random.default_rng(7)
    held = {"seeds": 0, "tasks": 0}
    for draw in range(draws):
        before, after = synthetic_seeds(rng, seeds=5, tasks=40, seed_sd=seed_sd)
        wide = seeded_gain(before, after, seed=draw)
        narrow = paired_gain(pooled(before), pooled(after), seed=draw)
        assert wide.gain == pytest.approx(narrow.gain)  # one estimate, two intervals
        held["seeds"] += wide.low <= TRUE_GAIN <= wide.high
        held["tasks"] += narrow.low <= TRUE_GAIN <= narrow.high
    return held["seeds"] / draws, held["tasks"] / draws


def test_the_seeded_interval_covers_at_about_its_rate_where_the_task_interval_undercovers():
    with_seeds, tasks_only = coverage(seed_sd=0.08)  # seeds scatter as much as the gain itself
    assert with_seeds >= 0.9 and tasks_only <= 0.6
    with_seeds, tasks_only = coverage(seed_sd=0.0)  # no training noise: both hold
    assert with_seeds >= 0.9 and tasks_only >= 0.88


def test_one_seed_a_side_adds_no_seed_spread_and_unshared_tasks_are_refused():
    rng = np.random.default_rng(3)
    before, after = synthetic_seeds(rng, seeds=1, tasks=40, seed_sd=0.05)
    wide = seeded_gain(before, after, seed=1)
    narrow = paired_gain(before[0], after[0], seed=1)
    assert wide.gain == pytest.approx(narrow.gain) and wide.high - wide.low == pytest.approx(
        narrow.high - narrow.low, rel=0.25
    )
    with pytest.raises(Exception, match="share at least one task"):
        seeded_gain([{"a": [1.0]}], [{"b": [0.0]}])


def write_seed(folder, per_task):
    return write_read(folder, per_task, adapter=f"/{folder.name}")


def test_whale_paired_reports_the_seeded_interval_and_lets_it_decide(tmp_path, capsys):
    """Three seeds a method whose seeds scatter by ±0.1: over tasks the gain looks sure, with the
    seeds it is not."""
    tasks = [f"t{i}" for i in range(200)]
    level = {t: (i % 5) / 5 for i, t in enumerate(tasks)}
    folders = {}
    for method, offsets in (("a", (0.0, 0.1, -0.1)), ("b", (0.15, -0.05, 0.05))):
        folders[method] = os.pathsep.join(
            str(write_seed(tmp_path / f"{method}{n}", {t: [level[t] + off] for t in tasks}))
            for n, off in enumerate(offsets)
        )
    assert main(["paired", folders["a"], folders["b"], "--labels", "a,b"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| b − a |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[1] == "+0.050" and cells[4:] == ["200", "3 vs 3", "within noise"]
    task_low = float(cells[2].strip("[]").split(", ")[0])
    seed_low = float(cells[3].strip("[]").split(", ")[0])
    assert task_low > 0 > seed_low


def scored_run(method, per_task):
    mean = float(np.mean([np.mean(s) for s in per_task.values()]))
    point = {"rollouts": 64, "mean_at_k": mean, "ci_low": mean, "ci_high": mean, "k": 1, "per_task": per_task}
    start = {**point, "rollouts": 0, "per_task": {t: [0.0] for t in per_task}}
    spend = {
        "rollouts": 64,
        "eval_rollouts": 32,
        "proposer_tokens": 0,
        "weight_seconds": 1.0,
        "wall_seconds": 1.0,
    }
    return {"method": method, "budget": 64, "spend": spend, "curve": [start, point], "best": point,
            "final": point, "finished": "budget spent"}  # fmt: skip


def test_whale_reports_table_gives_the_seeded_interval_where_a_method_has_seeds():
    tasks = [f"t{i}" for i in range(100)]
    runs = [scored_run("whale", {t: [0.5 + off] for t in tasks}) for off in (0.0, 0.2)]
    runs.append(scored_run("weight-only", {t: [0.45] for t in tasks}))
    text = paired_table(runs)
    assert "| 95% CI (seeds, tasks) | tasks | seeds |" in text
    row = next(line for line in text.splitlines() if line.startswith("| whale − weight-only |"))
    assert "| +0.150 | [+0.150, +0.150] |" in row and "| 100 | 1 vs 2 | beyond noise |" in row
    seed_interval = row.split("|")[4].strip()
    assert seed_interval == "[+0.050, +0.250]"  # either seed alone, or both
    single = paired_table(runs[1:])
    assert "CI (seeds" not in single and "| whale − weight-only | +0.250 |" in single
