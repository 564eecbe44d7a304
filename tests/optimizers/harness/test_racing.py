"""The acceptance rules and the race on numbers: luck is refused, a real gain adopted, ties kept."""

from __future__ import annotations

import math
import re

import pytest

from optimizers.engine.schedules import Patience
from optimizers.harness.acceptance import Acceptance, paired_bound, race_sizes
from optimizers.harness.racing import race
from optimizers.signals import HarnessIteration, iterations_since_improvement
from whale_dspy.errors import ConfigError

TASKS = [f"t{i:02d}" for i in range(64)]


class Table:
    """Per-task scores by contender, and every (contender, tasks) the race asked for."""

    def __init__(self, scores: dict[str, dict[str, float]]):
        self.scores = scores
        self.asked: list[tuple[str, tuple[str, ...]]] = []

    def __call__(self, name, task_ids):
        self.asked.append((name, tuple(task_ids)))
        return {t: self.scores[name][t] for t in task_ids}


def lucky_then_worse() -> dict[str, dict[str, float]]:
    """h0 solves every other task; `lucky` solves the first 8 tasks, then every fourth."""
    h0 = {t: float(i % 2 == 0) for i, t in enumerate(TASKS)}
    lucky = {t: 1.0 if i < 8 else float(i % 4 == 0) for i, t in enumerate(TASKS)}
    return {"h0": h0, "lucky": lucky}


def test_a_lead_by_luck_on_the_first_round_is_refused_once_more_tasks_are_scored():
    table = Table(lucky_then_worse())
    decision = race("h0", ["lucky"], TASKS, table, Acceptance("paired"), start=8)
    assert decision.adopted is None
    assert decision.rounds[0].means["lucky"] > decision.rounds[0].means["h0"]  # it did lead, by luck
    assert "lucky" in decision.rounds[-1].dropped or decision.rounds[-1].tasks == len(TASKS)


def test_argmax_on_the_first_round_adopts_the_lucky_candidate():
    """What the paired race guards against: the paper's rule on the race's first 8 tasks."""
    table = Table(lucky_then_worse())
    decision = race("h0", ["lucky"], TASKS[:8], table, Acceptance("argmax"), start=8)
    assert decision.adopted == "lucky"


def test_a_genuinely_better_candidate_is_adopted_with_its_paired_gain_recorded():
    h0 = {t: float(i % 2 == 0) for i, t in enumerate(TASKS)}
    better = {t: float(i % 2 == 0 or i % 3 == 0) for i, t in enumerate(TASKS)}  # h0's tasks and more
    decision = race("h0", ["better"], TASKS, Table({"h0": h0, "better": better}), Acceptance(), start=8)
    assert decision.adopted == "better"
    gain = decision.to_dict()["gain"]
    assert gain["low"] > 0 and gain["gain"] == pytest.approx(
        sum(better[t] - h0[t] for t in decision.tasks) / len(decision.tasks)
    )
    assert gain["tasks"] == len(decision.tasks)


def test_a_real_gain_of_two_tenths_is_adopted_before_the_whole_slice():
    h0 = {t: float(i % 2 == 0) for i, t in enumerate(TASKS)}
    better = {t: 1.0 if i % 5 in (1, 3) else h0[t] for i, t in enumerate(TASKS)}  # +0.22, all wins
    table = Table({"h0": h0, "better": better})
    decision = race("h0", ["better"], TASKS, table, Acceptance(), start=8, spread=0.33)
    assert decision.adopted == "better" and decision.gain.gain == pytest.approx(0.2, abs=0.04)
    assert decision.rounds[-1].tasks < len(TASKS)  # the boundary let it in at an earlier look


def test_the_error_rate_is_spent_once_over_the_looks_not_split_evenly():
    """O'Brien-Fleming: a bar far above Bonferroni's early, below it at the last look."""
    looks = race_sizes(8, 64)
    spent, even = Acceptance().levels(looks, 1), Acceptance("paired-bonferroni").levels(looks, 1)
    assert spent[0] < even[0] / 100 and spent[-1] > 3 * even[-1]
    assert spent[-1] < 0.05 and even == pytest.approx([0.05 / 4] * 4)
    assert Acceptance().levels(looks, 2)[-1] < spent[-1]  # split over the candidates that race


def test_a_race_among_candidates_equal_to_the_incumbent_stops_early():
    """Nothing to gain: futility ends it well before the slice, without an adoption."""
    h0 = {t: float(i % 2 == 0) for i, t in enumerate(TASKS)}
    twins = {f"twin{k}": {t: float((i + k) % 2 == 0) if i % 9 == k else h0[t] for i, t in enumerate(TASKS)}
             for k in (1, 2)}  # fmt: skip
    table = Table({"h0": h0, **twins})
    decision = race("h0", list(twins), TASKS, table, Acceptance(), start=8, spread=0.33)
    assert decision.adopted is None and decision.rounds[-1].tasks <= 16
    assert all("futile" in why for why in decision.rounds[-1].dropped.values())
    patient = race(
        "h0", list(twins), TASKS, Table(table.scores), Acceptance(futility=0), start=8, spread=0.33
    )
    assert patient.rounds[-1].tasks == len(TASKS)  # without the stop it runs the whole slice


def test_a_race_is_sized_before_it_runs_and_says_the_smallest_lead_it_can_adopt():
    h0 = {t: 0.0 for t in TASKS}
    decision = race("h0", ["c"], TASKS, Table({"h0": h0, "c": dict(h0)}), Acceptance(), start=8, spread=0.33)
    size = decision.size
    assert size.looks == (8, 16, 32, 64) and size.racers == 1
    assert size.adoptable == pytest.approx(0.33 * 1.7 / 8, abs=0.01)  # t * spread / sqrt(n)
    assert f"{size.adoptable:+.3f} on 64 tasks" in size.said()
    one = race("h0", ["c"], TASKS[:1], Table({"h0": h0, "c": dict(h0)}), Acceptance(), start=8, spread=0.33)
    assert one.size.adoptable == math.inf and "cannot adopt" in one.size.said()


def test_the_incumbent_is_scored_on_every_round_s_tasks_beside_the_candidates():
    scores = lucky_then_worse() | {"other": {t: 0.5 for t in TASKS}}
    table = Table(scores)
    decision = race("h0", ["lucky", "other"], TASKS, table, Acceptance(), start=8)
    for size, done in zip(race_sizes(8, 64), [0, *race_sizes(8, 64)], strict=False):
        if size > decision.rounds[-1].tasks:
            break
        chunk = tuple(TASKS[done:size])
        assert ("h0", chunk) in table.asked  # re-scored on exactly the tasks its challengers met
    assert all(name in {"h0", "lucky", "other"} for name, _ in table.asked)


def test_a_tie_keeps_the_incumbent_under_every_rule():
    same = {t: float(i % 3 == 0) for i, t in enumerate(TASKS)}
    for rule in ("paired", "argmax", "strict"):
        decision = race(
            "h0", ["twin"], TASKS, Table({"h0": same, "twin": dict(same)}), Acceptance(rule), start=8
        )
        assert decision.adopted is None, rule


def test_argmax_breaks_ties_by_cost_strict_does_not():
    same = {t: 1.0 for t in TASKS[:8]}
    cheaper = {"h0": (-2.0,), "cheap": (-1.0,)}
    for rule, adopted in (("argmax", "cheap"), ("strict", None)):
        table = Table({"h0": same, "cheap": dict(same)})
        decision = race("h0", ["cheap"], TASKS[:8], table, Acceptance(rule), start=8, tie_breaks=cheaper)
        assert decision.adopted == adopted, rule


def test_the_margin_must_be_cleared_by_the_lower_bound():
    h0 = {t: 0.0 for t in TASKS}
    plus = {t: 0.1 for t in TASKS}  # +0.1 on every task: no spread, both bounds are 0.1
    assert race("h0", ["plus"], TASKS, Table({"h0": h0, "plus": plus}), Acceptance(), start=8).adopted
    refused = race("h0", ["plus"], TASKS, Table({"h0": h0, "plus": plus}), Acceptance(margin=0.2), start=8)
    assert refused.adopted is None and "plus" in refused.rounds[-1].dropped  # hopeless: dropped


def test_a_refused_race_says_what_lead_would_have_cleared_at_its_spread():
    # A user who sees nothing adopted must learn whether more selection tasks could ever decide it.
    h0 = {t: float(i % 2 == 0) for i, t in enumerate(TASKS)}
    close = {t: float(i % 2 == 0 or i % 7 == 0) - float(i % 23 == 0) for i, t in enumerate(TASKS)}  # +0.031
    patient = Acceptance(futility=0)  # run to the last look, where the refusal is said
    refused = race("h0", ["close"], TASKS, Table({"h0": h0, "close": close}), patient, start=8)
    assert refused.adopted is None and refused.reason.startswith("no candidate cleared paired on 64 tasks")
    needed = float(re.search(r"a lead above ([+-][0-9.]+) clears", refused.reason).group(1))
    lead = refused.rounds[-1].bounds["close"].gain
    for shift, adopted in ((needed - lead + 0.002, "close"), (needed - lead - 0.002, None)):
        moved = {t: score + shift for t, score in close.items()}  # the same spread, a larger lead
        again = race("h0", ["close"], TASKS, Table({"h0": h0, "close": moved}), patient, start=8)
        assert again.adopted == adopted


def test_the_refusal_names_the_candidate_nearest_to_clearing_not_the_largest_lead():
    h0 = {t: 0.0 for t in TASKS}
    wide = {t: 1.6 if i % 2 else -1.2 for i, t in enumerate(TASKS)}  # +0.2, a wide spread
    narrow = {t: 0.02 + (0.1 if i % 2 else -0.1) for i, t in enumerate(TASKS)}  # +0.02, a narrow one
    table = Table({"h0": h0, "wide": wide, "narrow": narrow})
    refused = race("h0", ["wide", "narrow"], TASKS, table, Acceptance(futility=0), start=8)
    assert refused.adopted is None and "(nearest narrow +0.020;" in refused.reason


def test_identical_differences_are_no_evidence_of_zero_spread():
    """Eight ties do not make a candidate hopeless, nor two uniform wins adopt it."""
    h0 = {t: float(i % 2 == 0) for i, t in enumerate(TASKS)}
    twin_first = {t: h0[t] if i < 8 else 1.0 for i, t in enumerate(TASKS)}  # ties the first round
    decision = race("h0", ["twin"], TASKS, Table({"h0": h0, "twin": twin_first}), Acceptance(), start=8)
    assert not decision.rounds[0].dropped and decision.adopted == "twin"
    two = race("h0", ["c"], TASKS[:2], Table({"h0": {t: 0.0 for t in TASKS}, "c": {t: 1.0 for t in TASKS}}),
               Acceptance(), start=2)  # fmt: skip
    assert two.adopted is None


def test_a_clearly_worse_candidate_leaves_the_race_early():
    h0 = {t: 0.5 for t in TASKS}
    good = {t: float(i % 4 != 0) for i, t in enumerate(TASKS)}
    bad = {t: 0.0 for t in TASKS}
    table = Table({"h0": h0, "good": good, "bad": bad})
    decision = race("h0", ["good", "bad"], TASKS, table, Acceptance(), start=8)
    asked_bad = [tasks for name, tasks in table.asked if name == "bad"]
    assert "bad" in decision.rounds[0].dropped and len(asked_bad) == 1


def test_paired_bound_is_students_t_and_needs_two_tasks():
    bound = paired_bound({"a": 1.0, "b": 0.0, "c": 1.0}, {"a": 0.0, "b": 0.0, "c": 0.0}, alpha=0.05)
    half = 2.919985580355516 * math.sqrt(1 / 3) / math.sqrt(3)  # t(0.95, 2) * sd / sqrt(n)
    assert bound.gain == pytest.approx(2 / 3) and bound.low == pytest.approx(2 / 3 - half)
    one = paired_bound({"a": 1.0}, {"a": 0.0}, alpha=0.05)
    assert one.low == -math.inf and one.high == math.inf


@pytest.mark.parametrize(
    "fields",
    [{"rule": "best"}, {"confidence": 1.0}, {"confidence": 0.2}, {"margin": -0.1}, {"futility": 1.0}],
)
def test_bad_acceptance_settings_are_refused(fields):
    with pytest.raises(ConfigError):
        Acceptance(**fields)


def iteration(number: int, best: float, adopted: bool | None) -> HarnessIteration:
    decision = None if adopted is None else {"adopted": "c0001" if adopted else None}
    return HarnessIteration(number, "c0000", best, best, 1, 1, 10, 0, 0, 0.0, decision=decision)


def test_the_adaptive_schedule_ends_a_harness_phase_on_refused_decisions():
    """The archive's best mean rose each iteration, by leads the rule refused: no improvement."""
    schedule = Patience(harness_min=2, harness_patience=2, harness_max=10)
    refused = [iteration(0, 0.3, None), iteration(1, 0.4, False), iteration(2, 0.5, False)]
    assert iterations_since_improvement(refused) == 2 and schedule.harness_done(refused)
    adopted = [iteration(0, 0.3, None), iteration(1, 0.4, False), iteration(2, 0.5, True)]
    assert iterations_since_improvement(adopted) == 0 and not schedule.harness_done(adopted)


def test_records_made_before_decisions_keep_the_best_score_rule():
    old = [iteration(0, 0.3, None), iteration(1, 0.4, None), iteration(2, 0.4, None)]
    assert iterations_since_improvement(old) == 1
