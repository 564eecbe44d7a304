"""bench/scaling.py's tiny mode: both sweeps, with each rollout's time split, on the fake vLLM."""

from __future__ import annotations

import re

from bench_helpers import load_bench

NUMBER = r"-?\d+\.\d+"


def test_the_tiny_scaling_benchmark_sweeps_concurrency_and_tasks_and_splits_the_time(capsys) -> None:
    bench = load_bench("scaling")
    sweeps = ["--levels", "1", "4", "--min-rollouts", "4", "--task-counts", "1", "3"]
    bench.main(["--tiny", *sweeps, "--threads", "2"])
    out = capsys.readouterr().out
    assert "| sweep | threads | tasks | rollouts | LM calls | wall s |" in out
    cells = rf"\| {NUMBER} " * 7  # wall s to other s
    row = rf"^\| (concurrency|tasks) \| (\d+) \| (\d+) \| (\d+) \| \d+ {cells}\| {NUMBER} % \|$"
    rows = re.findall(row, out, re.M)
    table = [(sweep, int(threads), int(tasks), int(rollouts)) for sweep, threads, tasks, rollouts in rows]
    # k=2 rollouts per task; the concurrency sweep takes min-rollouts / k tasks at each level
    assert table == [
        ("concurrency", 1, 2, 4),
        ("concurrency", 4, 2, 4),
        ("tasks", 2, 1, 2),
        ("tasks", 2, 3, 6),
    ]
    split = rf"per rollout {NUMBER} s = LM {NUMBER} \+ tool {NUMBER} \+ other {NUMBER}$"
    assert len(re.findall(split, out, re.M)) == 4  # each measurement's progress line
