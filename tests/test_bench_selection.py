"""bench/selection.py's tiny mode: three rules judged on held-out reads of synthetic harnesses."""

from __future__ import annotations

import json

from bench_helpers import load_bench

ARGS = [
    "--tiny",
    "--seeds",
    "0",
    "--iterations",
    "3",
    "--held-out",
    "60",
    "--selection",
    "32",
    "--threads",
    "2",
]


def test_every_decision_of_every_rule_is_read_on_held_out_tasks_and_a_rerun_resumes(tmp_path, capsys):
    bench = load_bench("selection")
    summaries = bench.main([*ARGS, "--out", str(tmp_path)])
    assert [s["rule"] for s in summaries] == ["argmax8", "argmax-large", "paired"]
    for summary in summaries:
        rows = json.loads((tmp_path / summary["rule"] / "decisions.json").read_text())
        assert summary["decisions"] == len(rows) == 2  # iterations 1 and 2, each one decision
        assert all(r["held_out"]["tasks"] == 60 for r in rows if r["contender"])
        assert summary["adopted"] == sum(r["adopted"] for r in rows)
    large, paired = summaries[1], summaries[2]
    assert large["rollouts_per_decision"] > summaries[0]["rollouts_per_decision"]  # 32 tasks, not 8
    assert "| paired |" in capsys.readouterr().out
    reads = sorted(p.name for p in tmp_path.glob("held-out/*.json"))
    again = bench.main([*ARGS, "--out", str(tmp_path)])  # resumes: archives replayed, reads cached
    assert again == summaries  # wall time too: each decision's as recorded when it ran, not the replay's
    assert all(s["wall_s"] > 0 for s in again)
    assert sorted(p.name for p in tmp_path.glob("held-out/*.json")) == reads and paired["decisions"] == 2
