"""bench/selection.py's tiny mode: three rules judged on held-out reads of synthetic harnesses."""

from __future__ import annotations

import json

from bench_helpers import BENCH_DIR, load_bench

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


def test_the_synthetic_mode_holds_the_error_rate_and_stops_null_races_early(tmp_path):
    """The library's own race, simulated at the measured spread: the O'Brien-Fleming rule's realised
    false-adoption rate is consistent with its nominal 0.05 (Bonferroni over looks realises far
    less), a real +0.12 gain on 128 tasks is adopted, and a race among proposals no better than
    the incumbent stops well before its whole slice."""
    bench = load_bench("selection")
    rows = bench.main(["--synthetic", "--races", "300", "--cells", "64:0,128:0.12", "--out", str(tmp_path)])
    by = {(r["rule"], r["gain"]): r for r in rows}
    null, real = by[("paired", 0.0)], by[("paired", 0.12)]
    assert null["rate_low"] <= 0.05 and null["rate"] <= 0.08  # within Monte Carlo error of 0.05
    assert real["rate"] >= 0.75
    assert null["share_of_slice"] <= 0.6 and by[("paired, no futility", 0.0)]["share_of_slice"] == 1.0
    assert by[("paired-bonferroni", 0.0)]["rate"] < null["rate"] + 0.02  # it spends less than it may
    assert (tmp_path / "synthetic.md").read_text().startswith("| rule |")


def test_the_replay_mode_re_decides_recorded_races_and_reproduces_the_recorded_rule(tmp_path):
    """The SQuAD selection bench's races, recorded under the paired rule as it was (Bonferroni over
    racers x looks): replayed under that rule they decide as recorded; the new rule spends fewer
    rollouts a decision on the same scores."""
    bench = load_bench("selection")
    record = BENCH_DIR / "records" / "selection-squad.tar.gz"
    summaries = {s["rule"]: s for s in bench.main(["--replay", str(record), "--out", str(tmp_path)])}
    recorded = json.loads((tmp_path / "replay" / "paired-bonferroni.json").read_text())
    old = summaries["paired-bonferroni"]
    assert (old["adopted"], old["did_not_carry_over"], old["false_refusals"]) == (1, 1, 2)  # as recorded
    assert len(recorded) == old["races"] and all(row["replayed"] for row in recorded)
    assert summaries["paired"]["rollouts_per_decision"] < old["rollouts_per_decision"] / 2
    assert summaries["argmax"]["adopted"] > old["adopted"]
