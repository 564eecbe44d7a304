"""Switching schedules: each decision checked step by step, and the CLI string forms."""

from __future__ import annotations

import pytest

from optimizers.engine.schedules import (
    SCHEDULE_HELP,
    SCHEDULES,
    Fixed,
    Patience,
    as_recorded_schedule,
    fixed_steps,
    parse_schedule,
    schedule_from_dict,
    steps_since_improvement,
    window_means,
)
from optimizers.signals import HarnessIteration, WeightStep
from whale_dspy.errors import ConfigError


def steps(*rewards: float) -> list[WeightStep]:
    return [
        WeightStep(
            step=i,
            adapter=None,
            mean_reward=r,
            accept_rate=0.0,
            accepted=0,
            train_loss=None,
            tokens=0,
            rollouts=4,
            seconds=0.0,
        )
        for i, r in enumerate(rewards)
    ]


def iterations(*best: float) -> list[HarnessIteration]:
    return [
        HarnessIteration(
            iteration=i,
            best_name=f"c{i}",
            best_score=b,
            iteration_best_score=b,
            candidates=1,
            valid=1,
            rollouts=4,
            proposer_calls=0,
            proposer_tokens=0,
            seconds=0.0,
        )
        for i, b in enumerate(best)
    ]


def stop_points(decide, signals) -> list[bool]:
    """The decision asked before each unit, given the units run so far."""
    return [decide(signals[:n]) for n in range(len(signals) + 1)]


def test_fixed_fractional_epochs_round_cumulatively_without_drift():
    per_cycle = [fixed_steps(0.6, cycle, 10) for cycle in range(5)]
    assert per_cycle == [6, 6, 6, 6, 6]
    uneven = [fixed_steps(0.6, cycle, 3) for cycle in range(5)]  # 1.8 steps per cycle
    assert uneven == [2, 2, 1, 2, 2]
    assert sum(uneven) == round(5 * 0.6 * 3)


def test_fixed_weight_phase_stops_after_its_share_of_the_epoch():
    schedule = Fixed(0.6, 6)
    decide = lambda s: schedule.weight_done(s, cycle=2, steps_per_epoch=3)  # noqa: E731
    assert stop_points(decide, steps(0, 0, 0)) == [False, True, True, True]


def test_fixed_harness_phase_counts_decisions_not_the_incoming_evaluation():
    """Iteration 0 re-scores the incoming harness; I counts the decisions after it."""
    schedule = Fixed(0.6, 3)
    assert stop_points(schedule.harness_done, iterations(0.1, 0.2, 0.3, 0.4)) == [
        False,
        False,
        False,
        False,
        True,
    ]
    assert stop_points(Fixed(0.5, 1).harness_done, iterations(0.1, 0.2)) == [False, False, True]


def test_a_schedule_recorded_before_decisions_were_counted_keeps_its_meaning():
    """A run folder's schedule without `counts` counted the incoming evaluation as an iteration."""
    old = schedule_from_dict({"kind": "fixed", "epochs": 0.6, "iterations": 3})
    assert old.counts == "iterations"
    assert stop_points(old.harness_done, iterations(0.1, 0.2, 0.3, 0.4)).index(True) == 3
    assert as_recorded_schedule(Fixed(0.6, 3), {"kind": "fixed", "epochs": 0.6, "iterations": 3}) == old
    assert as_recorded_schedule(Fixed(0.6, 3), Fixed(0.6, 3).to_dict()) == Fixed(0.6, 3)
    assert schedule_from_dict(Fixed(0.6, 3).to_dict()) == Fixed(0.6, 3)


def test_window_means_and_improvement_counter():
    assert window_means([1, 2, 3, 4], 2) == [1, 1.5, 2.5, 3.5]
    assert steps_since_improvement([0.1, 0.5, 0.4, 0.5], 0.0) == 2
    assert steps_since_improvement([0.1, 0.5, 0.4, 0.55], 0.1) == 2  # +0.05 is below min_delta
    assert steps_since_improvement([0.1, 0.5, 0.4, 0.7], 0.1) == 0


def test_patience_weight_burn_in_holds_the_phase_open():
    schedule = Patience(weight_burn_in=4, weight_window=1, weight_patience=1)
    rewards = steps(0.5, 0.4, 0.3, 0.2, 0.1)  # never improves after step 0
    assert stop_points(lambda s: schedule.weight_done(s), rewards) == [False, False, False, False, True, True]


def test_patience_weight_uses_the_sliding_window_mean():
    # The raw reward peaks at step 1, but the 3-step mean keeps creeping up to step 5.
    rewards = steps(0.0, 0.6, 0.3, 0.3, 0.5, 0.5)
    means = window_means([s.mean_reward for s in rewards], 3)
    assert means[5] > means[3] > means[1]
    windowed = Patience(weight_burn_in=1, weight_window=3, weight_patience=2)
    assert True not in stop_points(lambda s: windowed.weight_done(s), rewards)
    raw = Patience(weight_burn_in=1, weight_window=1, weight_patience=2)
    assert stop_points(lambda s: raw.weight_done(s), rewards).index(True) == 4  # 2 steps after the peak


def test_patience_weight_min_delta_and_max():
    schedule = Patience(weight_burn_in=1, weight_window=1, weight_patience=2, min_delta=0.05)
    decisions = stop_points(lambda s: schedule.weight_done(s), steps(0.1, 0.12, 0.14, 0.16))
    assert decisions.index(True) == 3  # +0.02 steps are not improvements
    capped = Patience(weight_burn_in=0, weight_patience=100, weight_max=3)
    assert stop_points(lambda s: capped.weight_done(s), steps(0.1, 0.2, 0.3, 0.4)).index(True) == 3


def test_patience_harness_min_patience_and_max():
    """min and max count decisions (iteration 0 is the incoming harness's scoring)."""
    schedule = Patience(harness_min=3, harness_patience=2, harness_max=6)
    flat = iterations(0.5, 0.5, 0.5, 0.5, 0.5)
    assert stop_points(schedule.harness_done, flat).index(True) == 4  # 3 decisions, 2 since best
    rising = iterations(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
    assert stop_points(schedule.harness_done, rising).index(True) == 7  # harness_max decisions
    late = iterations(0.1, 0.1, 0.4, 0.4, 0.4, 0.4)
    assert stop_points(schedule.harness_done, late).index(True) == 5  # the improvement at 2 resets patience


def test_parse_round_trips():
    fixed = parse_schedule("fixed:0.6,6")
    assert fixed == Fixed(0.6, 6)
    patience = parse_schedule("patience:weight_patience=3,min_delta=0.01,harness_max=8")
    assert (patience.weight_patience, patience.min_delta, patience.harness_max) == (3, 0.01, 8)
    for schedule in (fixed, patience, Patience()):
        assert parse_schedule(schedule.spec()) == schedule
        assert schedule_from_dict(schedule.to_dict()) == schedule


def test_every_registered_kind_round_trips_and_is_in_the_help():
    for name, kind in SCHEDULES.items():
        default = kind.cls()
        assert default.kind == name and parse_schedule(default.spec()) == default
        assert schedule_from_dict(default.to_dict()) == default
        assert f"{kind.form}: {kind.about}" in SCHEDULE_HELP
    with pytest.raises(ConfigError, match="valid kinds are fixed, patience"):
        schedule_from_dict({"kind": "cosine"})


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("fixed:0.6", "two values"),
        ("fixed:0,6", "E (epochs per cycle) must be > 0"),
        ("fixed:0.6,0", "I (harness decisions)"),
        ("fixed:0.6,2.5", "I (harness decisions)"),
        ("fixed:a,6", "not a number"),
        ("patience:bogus=1", "valid keys are weight_burn_in"),
        ("patience:weight_window=0", "weight_window must be an int >= 1"),
        ("patience:harness_min=5,harness_max=3", "harness_max must be >= harness_min"),
        ("patience:min_delta=-1", "min_delta must be a number >= 0"),
        ("sometimes", "fixed:E,I"),
    ],
)
def test_invalid_schedules_say_what_is_valid(text, says):
    with pytest.raises(ConfigError, match=None) as error:
        parse_schedule(text)
    assert says in str(error.value)
