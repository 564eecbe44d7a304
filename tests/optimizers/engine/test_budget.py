"""Budget rule and cost accounting: exact rollout counts, no silent overspend, evaluations apart."""

from __future__ import annotations

import logging

import pytest
from whale_helpers import FakeHarnessPhase, FakeWeightPhase, backend, compile_run, optimizer, student, tasks

from optimizers.engine.budget import FIRST_CALLS_PER_ROLLOUT, Budget, Declared, Spend
from optimizers.engine.checkpoint import RunState, engine_events
from optimizers.signals import HarnessIteration, WeightStep
from whale_dspy.errors import ConfigError
from whale_dspy.rundir import RunDir


def weight_step(rollouts: int, tokens: int = 7, lm_calls: int | None = None) -> WeightStep:
    return WeightStep(
        step=0,
        adapter=None,
        mean_reward=0.0,
        accept_rate=0.0,
        accepted=0,
        train_loss=None,
        tokens=tokens,
        rollouts=rollouts,
        seconds=1.5,
        lm_calls=lm_calls,
    )


def harness_iteration(rollouts: int, lm_calls: int | None = None) -> HarnessIteration:
    return HarnessIteration(
        iteration=1,
        best_name="c1",
        best_score=0.5,
        iteration_best_score=0.5,
        candidates=3,
        valid=2,
        rollouts=rollouts,
        proposer_calls=2,
        proposer_tokens=300,
        seconds=2.0,
        lm_calls=lm_calls,
    )


def test_fits_and_caps():
    budget = Budget(100)
    assert Budget.fits(96, 4, budget.cap(None)) and not Budget.fits(97, 4, budget.cap(None))
    assert budget.cap(0.5) == 50 and budget.cap(None) == 100
    with pytest.raises(ConfigError, match="budget must be an int >= 1"):
        Budget(0)


def test_spend_counts_both_phases_alike_and_reports_the_rest_beside(caplog):
    spend = Spend().add_weight(weight_step(8), declared=8).add_harness(harness_iteration(30), declared=36)
    spend = spend.add_evaluation(16, seconds=3.0)
    assert (spend.rollouts, spend.weight_rollouts, spend.harness_rollouts) == (38, 8, 30)
    assert (spend.proposer_calls, spend.proposer_tokens, spend.rollout_tokens) == (2, 300, 7)
    assert (spend.eval_rollouts, spend.evaluations) == (16, 1)
    assert (spend.weight_seconds, spend.harness_seconds, spend.eval_seconds) == (1.5, 2.0, 3.0)
    with caplog.at_level(logging.WARNING):
        over = spend.add_weight(weight_step(10), declared=8)
    assert over.overspent == 2 and "2 more than it declared" in caplog.text


def test_spend_counts_the_policy_calls_the_budget_does_not_and_an_unknown_stays_unknown():
    # A harness that votes over five samples spends five calls a rollout: the same 8 rollouts cost 40.
    spend = Spend().add_weight(weight_step(8, lm_calls=40), declared=8)
    spend = spend.add_harness(harness_iteration(30, lm_calls=30), declared=30)
    assert (spend.rollouts, spend.rollout_calls) == (38, 70)
    assert spend.add_weight(weight_step(8), declared=8).rollout_calls is None  # recorded before counting


def test_a_checkpoint_written_before_calls_were_counted_reads_them_unknown_not_zero():
    harness = {"name": "h0", "digest": "d", "path": "h0.py"}
    state = RunState(harness=harness, incoming=harness, spend=Spend(rollouts=8)).to_dict()
    assert RunState.from_dict(state).spend.rollout_calls == 0
    del state["spend"]["rollout_calls"]
    assert RunState.from_dict(state).spend.rollout_calls is None


class UnderDeclaringWeightPhase(FakeWeightPhase):
    """Declares 3 rollouts per step but spends 4: the engine must say so, not hide it."""

    def rollouts_per_step(self, trainset):
        return 3


def test_an_unit_that_spends_more_than_it_declared_is_reported(tmp_path, caplog):
    server = backend()
    opt = optimizer(
        tmp_path / "run", server, weight=UnderDeclaringWeightPhase(server), method="weight-only", budget=10
    )
    with caplog.at_level(logging.WARNING):
        report = compile_run(opt, server).report
    # steps start at 0 and at 4 (4 + 3 <= 10); at 8 spent, 8 + 3 > 10 ends the phase
    assert report.spend.weight_steps == 2 and report.spend.rollouts == 8 and report.spend.overspent == 2
    assert "more than it declared" in caplog.text


@pytest.mark.parametrize("budget", [1, 5, 17, 42, 43, 100])
def test_whale_never_spends_past_the_budget_and_counts_exactly(tmp_path, budget):
    server = backend()
    weight, harness = FakeWeightPhase(server), FakeHarnessPhase()
    opt = optimizer(tmp_path / "run", server, weight=weight, harness=harness, budget=budget, eval_every=1000)
    report = compile_run(opt, server).report
    spend = report.spend
    assert spend.rollouts <= budget
    assert spend.weight_rollouts == 4 * len(weight.started) == 4 * spend.weight_steps
    iteration_costs = [
        6 if p.phase == "harness" and i == 0 else 12
        for p in report.phases
        for i in range(p.units)
        if p.phase == "harness"
    ]
    assert spend.harness_rollouts == sum(iteration_costs)
    assert spend.evaluations == (2 if spend.rollouts else 1)  # at 0 and at the end, never charged


def test_a_vote_of_five_is_charged_five_calls_under_the_calls_unit(tmp_path):
    """Harness-only, every candidate votes over five samples: a calls budget pays for all five."""
    spend = {}
    for unit in ("rollouts", "calls"):
        server = backend()
        opt = optimizer(
            tmp_path / unit, server, harness=FakeHarnessPhase(calls_per_rollout=5), method="harness-only",
            budget=60, budget_unit=unit, eval_every=1000,
        )  # fmt: skip
        spend[unit] = compile_run(opt, server).report.spend
    assert spend["calls"].rollout_calls == 5 * spend["calls"].harness_rollouts <= 60
    assert spend["rollouts"].harness_rollouts > spend["calls"].harness_rollouts
    assert spend["rollouts"].rollout_calls == 5 * spend["rollouts"].harness_rollouts > 60


def test_a_budget_in_calls_or_tokens_costs_a_unit_at_the_run_s_rate():
    budget = Budget(100, "calls")
    spend = Spend(rollouts=10, rollout_calls=50, eval_rollouts=10, eval_calls=10)
    assert budget.spent(spend) == 50 and budget.cost(4, spend) == 12  # 3 calls a rollout so far
    # nothing measured: a rollout's estimate, FIRST_CALLS_PER_ROLLOUT calls of max_tokens each
    assert Budget(100, "calls").cost(4, Spend()) == 4 * FIRST_CALLS_PER_ROLLOUT
    assert Budget(100, "tokens", max_tokens=64).cost(4, Spend()) == 4 * FIRST_CALLS_PER_ROLLOUT * 64
    assert Budget(100, "rollouts").cost(4, Spend()) == 4
    tokens = Spend(rollouts=2, completion_tokens=300)
    assert Budget(1000, "tokens").spent(tokens) == 300 and Budget(1000, "tokens").cost(2, tokens) == 300
    with pytest.raises(ConfigError, match="unknown budget unit"):
        Budget(10, "dollars")


def test_the_first_unit_under_tokens_is_let_in_at_an_upper_bound_not_at_one_token(tmp_path):
    """Nothing measured yet (no tracked tasks): the first search iteration may cost 6 rollouts x 2
    calls x 100 tokens = 1,200 tokens. At a token a rollout it fitted a 1,000-token budget and spent
    past it; at the bound (8 calls of 512 tokens a rollout) it does not start, nor does it without
    room for its first decision's 12 rollouts beside it (18 x 8 x 512 = 73,728 tokens)."""
    for budget, started in ((1000, False), (60_000, False), (80_000, True)):
        server = backend()
        harness = FakeHarnessPhase(tokens_per_call=100)
        opt = optimizer(
            tmp_path / str(budget), server, harness=harness, method="harness-only", budget=budget,
            budget_unit="tokens", eval_every=10**6,
        )  # fmt: skip
        report = opt.compile(student(server), trainset=tasks("train", 10), valset=tasks("search", 3)).report
        assert report.spend.completion_tokens <= budget
        assert (report.spend.harness_iterations > 0) is started
        assert report.phases[0].reason == "budget"


def test_overspend_is_counted_in_the_budget_s_unit_beside_the_rollouts():
    with_calls = Spend().add_weight(weight_step(8, lm_calls=40), declared=8, cost=Declared("calls", 16))
    assert (with_calls.overspent, with_calls.overspent_in_unit) == (0, 24)
    plain = Spend().add_weight(weight_step(10), declared=8)  # an event from before units declared a cost
    assert (plain.overspent, plain.overspent_in_unit) == (2, 2)


def test_a_run_whose_rollouts_grow_dearer_reports_its_overspend_in_calls(tmp_path, caplog):
    """Weight steps and the start cost one call a rollout; the search's candidates vote over five.
    Each search iteration declares exactly the rollouts it spends, but five times the calls."""
    server = backend()
    opt = optimizer(
        tmp_path / "run", server, weight=FakeWeightPhase(server),
        harness=FakeHarnessPhase(calls_per_rollout=5), budget=400, budget_unit="calls", eval_every=10**6,
    )  # fmt: skip
    with caplog.at_level(logging.WARNING):
        report = compile_run(opt, server).report
    units = [e for e in engine_events(RunDir(tmp_path / "run")) if "declared_cost" in e]
    over = sum(max(0, e["signal"]["lm_calls"] - e["declared_cost"]["amount"]) for e in units)
    assert {e["declared_cost"]["unit"] for e in units} == {"calls"}
    assert report.spend.overspent == 0 and report.spend.overspent_in_unit == over > 0
    assert "calls," in caplog.text and "more than the" in caplog.text
