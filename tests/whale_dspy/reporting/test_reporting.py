"""Comparison tables and plots from report dicts: averages over seeds, CIs, step curves, PNG output."""

from __future__ import annotations

import numpy as np
import pytest

from whale_dspy.reporting import markdown_table, paired_table, plot_curves, summarize_methods
from whale_dspy.reporting.pairs import paired_comparisons, seeded_comparisons
from whale_dspy.reporting.plots import curves_figure, method_curve, phase_spans
from whale_dspy.reporting.reach import reach_table, rollouts_to_reach


def point(rollouts, mean, half=0.1, k=8):
    return {"rollouts": rollouts, "mean_at_k": mean, "ci_low": mean - half, "ci_high": mean + half, "k": k}


def report(method, curve, *, rollouts=None, tokens=0, wall=10.0, calls=None):
    rollouts = curve[-1]["rollouts"] if rollouts is None and curve else rollouts or 100
    spend = {"rollouts": rollouts, "eval_rollouts": 16 * len(curve), "proposer_tokens": tokens,
             "weight_seconds": 5.0, "wall_seconds": wall, "rollout_calls": calls}  # fmt: skip
    best = max(curve, key=lambda p: p["mean_at_k"]) if curve else None
    return {"method": method, "budget": 100, "spend": spend, "curve": curve, "best": best,
            "final": curve[-1] if curve else None, "finished": "budget spent"}  # fmt: skip


REPORTS = [
    report("whale", [point(0, 0.2), point(50, 0.6), point(100, 0.5)], tokens=300),
    report("whale", [point(0, 0.2), point(60, 0.4), point(100, 0.7)], tokens=100),
    report("weight-only", [point(0, 0.2), point(100, 0.3)]),
]


def test_summaries_average_over_seeds_in_first_seen_order():
    whale, weight_only = summarize_methods(REPORTS)
    assert (whale.method, whale.seeds, weight_only.seeds) == ("whale", 2, 1)
    assert whale.best.mean == pytest.approx((0.6 + 0.7) / 2)
    assert whale.best.ci_low == pytest.approx((0.5 + 0.6) / 2)
    assert whale.best.seed_std == pytest.approx(np.std([0.6, 0.7], ddof=1))
    assert whale.final.mean == pytest.approx((0.5 + 0.7) / 2)
    assert whale.proposer_tokens == 200 and whale.eval_rollouts == 48
    assert weight_only.best.seed_std == 0.0


def test_markdown_table_has_one_row_per_method_with_cis():
    text = markdown_table(summarize_methods(REPORTS), k=8, budget="100 rollouts")
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(lines) == 3 and "best mean@8" in lines[0]
    assert lines[1].startswith("| whale | 2 | 0.650 [0.550, 0.750] ±0.071 (seeds) | 0.600 [0.500, 0.700]")
    assert lines[2].startswith("| weight-only | 1 | 0.300 [0.200, 0.400] | 0.300")
    assert "Budget: 100 rollouts" in text


def test_the_table_puts_each_methods_lm_calls_beside_its_rollouts_and_unknown_where_not_counted():
    voting = [report("whale", [point(0, 0.2), point(100, 0.5)], calls=500),
              report("whale", [point(0, 0.2), point(100, 0.7)], calls=300)]  # fmt: skip
    text = markdown_table(summarize_methods([*voting, REPORTS[2]]), k=8, budget="100 rollouts")
    whale, weight_only = [line.split(" | ") for line in text.splitlines() if line.startswith("| w")]
    assert whale[4:6] == ["100", "400"] and weight_only[4:6] == ["100", "unknown"]
    assert "| rollouts | LM calls |" in text


def test_a_run_without_test_evaluations_reads_n_a():
    text = markdown_table(summarize_methods([report("harness-only", [])]))
    assert "| harness-only | 1 | n/a | n/a |" in text


def test_method_curve_means_seeds_checkpoint_by_checkpoint_with_a_min_max_band():
    rollouts, mean, low, high = method_curve(REPORTS[:2])
    assert rollouts.tolist() == [0, 55, 100]  # the seeds' second checkpoints, at 50 and 60, are one slot
    assert mean.tolist() == pytest.approx([0.2, 0.5, 0.6])
    assert low.tolist() == pytest.approx([0.2, 0.4, 0.5]) and high.tolist() == pytest.approx([0.2, 0.6, 0.7])
    going = report("whale", [point(0, 0.2), point(40, 0.3)])
    going["finished"] = None  # a seed under way holds the slots it reached
    rollouts, mean, _, _ = method_curve([*REPORTS[:2], going])
    assert rollouts.tolist() == pytest.approx([0, 50, 100])
    assert mean[1:].tolist() == pytest.approx([(0.6 + 0.4 + 0.3) / 3, 0.6])
    _, single, ci_low, _ = method_curve(REPORTS[2:])
    assert ci_low.tolist() == pytest.approx([0.1, 0.2]) and single.tolist() == [0.2, 0.3]


def test_plot_writes_a_png(tmp_path):
    path = plot_curves(REPORTS + [report("harness-only", [])], tmp_path / "plots" / "curve.png", title="t")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_a_single_runs_plot_shades_its_weight_and_harness_phases(tmp_path):
    phases = [
        {"phase": "weight", "start_rollouts": 0, "end_rollouts": 60},
        {"phase": "harness", "start_rollouts": 60, "end_rollouts": 100},
        {"phase": "harness", "start_rollouts": 100, "end_rollouts": 100},  # spent nothing: not drawn
    ]
    single = {**REPORTS[0], "phases": phases}
    assert phase_spans([single]) == [("weight", 0, 60), ("harness", 60, 100)]
    assert phase_spans([single, REPORTS[2]]) == []  # several runs' phases do not line up
    assert plot_curves([single], tmp_path / "curve.png").stat().st_size > 0


def test_a_method_run_under_two_schedules_gets_a_row_and_a_line_per_schedule(tmp_path):
    fixed = [{**r, "schedule": "fixed:0.5,2"} for r in REPORTS]
    adaptive = {**report("whale", [point(0, 0.2), point(100, 0.9)]), "schedule": "patience:harness_max=3"}
    summaries = summarize_methods([*fixed, adaptive])
    assert [(s.method, s.seeds) for s in summaries] == [
        ("whale (fixed)", 2), ("weight-only", 1), ("whale (patience)", 1),
    ]  # fmt: skip
    assert summaries[2].best.mean == pytest.approx(0.9)
    twin = {**adaptive, "schedule": "fixed:1,2"}
    labels = [s.method for s in summarize_methods([*fixed, twin])]
    assert labels == ["whale (fixed:0.5,2)", "weight-only", "whale (fixed:1,2)"]
    assert plot_curves([*fixed, adaptive], tmp_path / "curve.png").stat().st_size > 0


def scored(rollouts, per_task):
    means = [np.mean(scores) for scores in per_task.values()]
    return {**point(rollouts, float(np.mean(means))), "per_task": per_task}


def test_paired_comparisons_pair_tasks_across_methods_and_say_what_is_noise():
    levels = [0.0, 0.25, 0.5, 0.75] * 5  # 20 tasks of unequal difficulty: separate CIs overlap
    start = scored(0, {f"t{i}": [level, level] for i, level in enumerate(levels)})
    lifted = scored(64, {f"t{i}": [level + 0.2, level + 0.2] for i, level in enumerate(levels)})
    wobble = scored(64, {f"t{i}": [level + (0.1 if i % 2 else -0.1)] * 2 for i, level in enumerate(levels)})
    reports = [
        report("whale", [start, lifted]),
        report("whale", [start, lifted]),
        report("weight-only", [start, wobble]),
    ]
    gains = dict(paired_comparisons(reports))
    assert list(gains) == ["whale − start", "weight-only − start", "whale − weight-only"]
    assert gains["whale − start"].gain == pytest.approx(0.2) and gains["whale − start"].beyond_noise
    assert (
        gains["weight-only − start"].gain == pytest.approx(0.0)
        and not gains["weight-only − start"].beyond_noise
    )
    assert (
        gains["whale − weight-only"].gain == pytest.approx(0.2) and gains["whale − weight-only"].tasks == 20
    )
    assert lifted["ci_low"] < start["ci_high"]  # judged apart, the whale final would look like noise
    text = paired_table(reports)
    assert "| whale − start | +0.200 |" in text and "| weight-only − start | +0.000 |" in text
    assert text.count("beyond noise") == 2 and text.count("within noise") == 1


def test_a_comparisons_plot_draws_its_paired_gains_beside_the_curves():
    import matplotlib.pyplot as plt

    levels = [0.0, 0.25, 0.5, 0.75] * 5
    start = scored(0, {f"t{i}": [level] for i, level in enumerate(levels)})
    lifted = scored(64, {f"t{i}": [level + 0.2] for i, level in enumerate(levels)})
    reports = [report("whale", [start, lifted]), report("weight-only", [start, start])]
    figure = curves_figure(reports)
    curves, gains = figure.axes
    rows = sorted(gains.get_yticklabels(), key=lambda label: -label.get_position()[1])  # top row first
    pairs = paired_comparisons(reports)
    assert [label.get_text() for label in rows] == [label for label, _ in pairs]
    drawn = {tuple(line.get_xdata()) for line in gains.get_lines() if len(line.get_xdata()) == 2}
    assert {(gain.low, gain.high) for _, gain in pairs} <= drawn  # each pair's interval, as computed
    legend = [text.get_text() for text in curves.get_legend().get_texts()]
    assert legend == ["whale (n=1)", "weight-only (n=1)"]
    single = curves_figure(REPORTS)
    assert len(single.axes) == 1  # no per-task scores: nothing to pair, the curves alone
    plt.close(figure)
    plt.close(single)


def test_with_seeds_the_gains_panel_is_decided_by_the_interval_over_seeds_and_tasks():
    import matplotlib.pyplot as plt

    levels = [0.0, 0.25, 0.5, 0.75] * 5
    start = scored(0, {f"t{i}": [level] for i, level in enumerate(levels)})

    # two seeds a side, every task lifted: each seed's own offset (+0.25, -0.05 against +0.05, +0.05)
    def lifted(method: str, lift: float) -> dict:
        return report(method, [start, scored(64, {f"t{i}": [v + lift] for i, v in enumerate(levels)})])

    reports = [lifted("whale", 0.25), lifted("whale", -0.05), *[lifted("weight-only", 0.05)] * 2]
    label = "whale − weight-only"
    over_tasks, seeded = dict(paired_comparisons(reports))[label], seeded_comparisons(reports)[label]
    assert over_tasks.beyond_noise and not seeded.beyond_noise  # the seeds undo what the tasks show
    figure = curves_figure(reports)
    gains = figure.axes[1]
    row = next(label_.get_position()[1] for label_ in gains.get_yticklabels() if label_.get_text() == label)
    lines = [line for line in gains.get_lines() if list(line.get_ydata()) in ([row, row], [row])]
    thick = max((line for line in lines if len(line.get_xdata()) == 2), key=lambda line: line.get_linewidth())
    assert tuple(thick.get_xdata()) == (seeded.low, seeded.high) and thick.get_color() == "tab:grey"
    marker = next(line for line in lines if len(line.get_xdata()) == 1)
    assert marker.get_markerfacecolor() == "white"  # not filled: within noise, as the table says
    plt.close(figure)


def test_the_gains_panel_says_which_rows_are_read_over_tasks_alone():
    import matplotlib.pyplot as plt

    from whale_dspy.reporting.plots import draw_gains
    from whale_dspy.stats import PairedGain

    gain = PairedGain(0.1, 0.05, 0.15, 40)
    titles = {}
    for name, seeded in {"all": {"a": gain, "b": gain}, "some": {"a": gain}, "none": {}}.items():
        figure, axes = plt.subplots()
        draw_gains(axes, [("a", gain), ("b", gain)], seeded)
        titles[name] = axes.get_title()
        plt.close(figure)
    assert "seeds and tasks" in titles["all"] and "one seed" not in titles["all"]
    assert "seeds and tasks" in titles["some"] and "one seed a side: over tasks" in titles["some"]
    assert "seeds" not in titles["none"]


def test_finished_seeds_end_on_one_final_slot_however_many_checkpoints_they_took():
    """A unit past the next checkpoint's rollouts ends there: one harness-only seed checkpointed at 0
    and 286 (its final), another at 0, 168 and 270. Their finals are one slot, every seed's."""
    one_unit = report("harness-only", [point(0, 0.2), point(286, 0.3)])
    two_units = report("harness-only", [point(0, 0.2), point(168, 0.4), point(270, 0.5)])
    rollouts, mean, low, high = method_curve([one_unit, two_units])
    assert rollouts.tolist() == pytest.approx([0, 168, 278])
    assert mean.tolist() == pytest.approx([0.2, 0.4, 0.4])  # the last: both finals, as the tables read
    assert low[-1] == pytest.approx(0.3) and high[-1] == pytest.approx(0.5)
    ahead = {**report("harness-only", [point(0, 0.2), point(168, 0.4), point(300, 0.6)]), "finished": None}
    assert method_curve([one_unit, ahead])[0].tolist() == [0, 168, 286, 300]  # a seed under way, past the end


def test_seeds_that_share_their_start_plot_without_a_negative_error_bar():
    import matplotlib.pyplot as plt

    start = scored(0, {"t0": [0.1], "t1": [0.1]})  # three seeds of 0.1 average to 0.10000000000000002
    seeds = [report("whale", [start, scored(64, {"t0": [0.2], "t1": [0.4]})]) for _ in range(3)]
    plt.close(curves_figure([*seeds, report("weight-only", [start, start])]))


def test_the_bar_is_the_strongest_baselines_peak_and_each_method_reaches_it_on_its_seeds_mean_curve():
    harness_only = report("harness-only", [point(0, 0.2), point(80, 0.65), point(100, 0.45)])
    reach = rollouts_to_reach([*REPORTS, harness_only])
    assert (reach.baseline, reach.target, reach.at) == (
        "harness-only",
        pytest.approx(0.65),
        80,
    )  # peak, not final
    whale = reach.methods["whale"]  # its seeds' mean curve: 0.2, 0.5 (at 55), 0.6 (at 100)
    assert whale.rollouts is None and whale.per_seed == [None, 100]
    assert reach.methods["weight-only"].rollouts is None and reach.methods["harness-only"].rollouts == 80
    assert whale.low is None and whale.reached is None  # no per-task scores: no interval
    lower = rollouts_to_reach(REPORTS)  # weight-only's peak 0.3 is the bar
    assert lower.methods["whale"].rollouts == 55 and lower.methods["whale"].per_seed == [50, 60]
    text = reach_table([*REPORTS, harness_only])
    assert "harness-only's peak 0.650 (at 80)" in text
    assert "| whale | not reached | n/a | n/a | n/a | not reached, 100 |" in text
    assert reach_table(REPORTS[:2]) == "" and reach_table(REPORTS[2:]) == ""  # one method: nothing to reach
    going = {**report("whale", [point(0, 0.2), point(50, 0.25)]), "finished": None}
    assert rollouts_to_reach([*REPORTS, going]).methods["whale"].per_seed == [50, 60, "unfinished"]


def curve_of(tasks, *levels, at=(0, 100, 200)):
    """A run's test curve: at each checkpoint every task scores its level plus that task's offset."""
    return [
        scored(r, {f"t{i}": [level + offset] for i, offset in enumerate(tasks)})
        for r, level in zip(at, levels, strict=True)
    ]


def test_the_reach_interval_resamples_seeds_and_tasks_and_says_who_reaches_the_peak_first():
    tasks = np.random.default_rng(0).uniform(0.0, 0.3, size=40)
    weight_only = [report("weight-only", curve_of(tasks, 0.1, 0.5, 0.45 + s)) for s in (0.0, 0.02)]
    early = [
        report("whale", curve_of(tasks, 0.1, 0.7 + s, 0.7)) for s in (0.0, 0.01)
    ]  # past the peak at once
    flat = [report("harness-only", curve_of(tasks, 0.1, 0.1, 0.1)) for _ in range(2)]
    reach = rollouts_to_reach([*weight_only, *early, *flat])
    assert (reach.baseline, reach.at) == ("weight-only", 100)
    whale, never = reach.methods["whale"], reach.methods["harness-only"]
    assert (whale.rollouts, whale.low, whale.high, whale.reached) == (100, 100, 100, 1.0)
    assert whale.sooner == 0.0  # at the same checkpoint as the peak: not fewer rollouts
    assert never.rollouts is None and never.reached == 0.0 and never.low == float("inf")
    # One seed far below the other: resampling the seeds puts the bar in reach only sometimes.
    split = [report("whale", curve_of(tasks, 0.1, 0.1, level)) for level in (0.6, 0.3)]
    uncertain = rollouts_to_reach([*weight_only, *split]).methods["whale"]
    assert 0.1 < uncertain.reached < 0.9 and (uncertain.low, uncertain.high) == (200, float("inf"))
    # Reaching the bar one checkpoint before the baseline peaks counts as fewer rollouts.
    late = [report("weight-only", curve_of(tasks, 0.1, 0.3, 0.5 + s)) for s in (0.0, 0.02)]
    sooner = rollouts_to_reach([*late, *early]).methods["whale"]
    assert sooner.rollouts == 100 and sooner.sooner == 1.0


def ended(run, reason):
    """`run` with one phase that ended for `reason` ("budget": the next unit no longer fit)."""
    return {**run, "phases": [{"phase": "weight", "reason": reason}]}


def test_before_means_an_earlier_checkpoint_slot_not_a_few_rollouts_fewer():
    # Checkpoints land on the first unit boundary past each eval_every: 176 and 192 are one slot, and
    # runs that stop where the next unit no longer fits (318, 320, 286) all end at the budget.
    tasks = np.random.default_rng(1).uniform(0.0, 0.3, size=30)
    weight_only = [ended(report("weight-only", curve_of(tasks, 0.1, 0.3, 0.5, at=(0, 192, 320))), "budget")]
    whale = [ended(report("whale", curve_of(tasks, 0.1, 0.6, 0.6, at=(0, 176, 318))), "budget")]
    at_end = [ended(report("harness-only", curve_of(tasks, 0.1, 0.6, at=(0, 286))), "budget")]
    reach = rollouts_to_reach([*weight_only, *whale, *at_end]).methods
    assert reach["whale"].rollouts == 176 and reach["whale"].sooner == 1.0  # slot 1 before slot 2
    assert reach["harness-only"].rollouts == 286 and reach["harness-only"].sooner == 0.0  # both at the end
    late = [ended(report("weight-only", curve_of(tasks, 0.1, 0.5, 0.4, at=(0, 192, 320))), "budget")]
    assert rollouts_to_reach([*late, *whale]).methods["whale"].sooner == 0.0  # 176 against a peak at 192
    # A run that stopped early, not for the budget, keeps its slot: fewer rollouts indeed.
    early = [ended(report("whale", curve_of(tasks, 0.1, 0.6, at=(0, 286))), "schedule")]
    assert rollouts_to_reach([*weight_only, *early]).methods["whale"].sooner == 1.0


def test_a_seed_that_ends_a_checkpoint_early_is_read_at_its_final_not_as_a_middle_checkpoint():
    # One unit ran past both the middle checkpoint and the budget: this seed's final (0.6 at 290)
    # is its second checkpoint, and must not be averaged with the other seed's middle one (0.1).
    tasks = np.random.default_rng(3).uniform(0.0, 0.3, size=30)
    weight_only = [report("weight-only", curve_of(tasks, 0.1, 0.3, 0.5, at=(0, 160, 320)))]
    whale = [
        report("whale", curve_of(tasks, 0.1, 0.1, 0.6, at=(0, 170, 320))),
        report("whale", curve_of(tasks, 0.1, 0.6, at=(0, 290))),
    ]
    reach = rollouts_to_reach([*weight_only, *whale]).methods["whale"]
    assert reach.rollouts == 305 and reach.reached == 1.0  # both finals at 0.6, at the mean of 320 and 290


def test_a_method_with_no_finished_run_is_unfinished_even_where_a_seed_reached_the_bar():
    going = [{**report("harness-only", [point(0, 0.2), point(50, 0.8)]), "finished": None} for _ in range(2)]
    going[1]["curve"] = [point(0, 0.2)]
    text = reach_table([*REPORTS, *going])
    assert "| harness-only | unfinished | n/a | n/a | n/a | 50, unfinished |" in text


def test_the_reach_interval_resamples_the_tasks_and_whole_seed_curves():
    rng = np.random.default_rng(2)
    base = [report("weight-only", curve_of(rng.uniform(0.0, 0.3, size=40), 0.1, 0.5, 0.4))]
    # One seed a side, the bar met on average but not task by task: only the tasks' draw decides.
    level = [report("whale", curve_of(rng.uniform(0.0, 0.3, size=40), 0.1, 0.1, 0.5))]
    share = rollouts_to_reach([*base, *level]).methods["whale"].reached
    assert 0.2 < share < 0.8
    # Two seeds, each past the bar at a different checkpoint: the bar is met only where the same seed is
    # drawn twice (half the resamples); drawing seeds anew at each checkpoint would give 7/16.
    flat = np.zeros(40)
    bar = [report("weight-only", curve_of(flat, 0.1, 0.7, 0.6))]
    crossed = [report("whale", curve_of(flat, 0.1, 0.8, 0.2)), report("whale", curve_of(flat, 0.1, 0.2, 0.8))]
    assert rollouts_to_reach([*bar, *crossed]).methods["whale"].reached == pytest.approx(0.5, abs=0.03)


def test_runs_recorded_without_per_task_scores_get_no_paired_row():
    assert paired_comparisons(REPORTS) == []


def test_an_unfinished_run_counts_for_best_so_far_but_not_for_final():
    stopped = {**report("whale", [point(0, 0.2), point(50, 0.9)]), "finished": None}
    ended = {**report("whale", [point(0, 0.2)], rollouts=100)}  # stopped in its final evaluation
    assert summarize_methods([ended])[0].unfinished == 1
    whale, _ = summarize_methods([*REPORTS, stopped])
    assert (whale.seeds, whale.unfinished) == (3, 1)
    assert whale.best.mean == pytest.approx((0.6 + 0.7 + 0.9) / 3)
    assert whale.final.mean == pytest.approx((0.5 + 0.7) / 2)  # its 0.9 is not a final checkpoint
    text = markdown_table(summarize_methods([*REPORTS, stopped]))
    assert "| whale | 3 (1 unfinished) |" in text and "finished runs only" in text
    assert "unfinished" not in markdown_table(summarize_methods(REPORTS))
