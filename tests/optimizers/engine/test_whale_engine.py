"""WhaleOptimizer with scripted phases: phase sequences per method, switching, evaluation, outputs."""

from __future__ import annotations

import json

import pytest
from whale_helpers import (
    HARNESS_CALLS_PER_ROLLOUT,
    FakeHarnessPhase,
    FakeWeightPhase,
    backend,
    compile_run,
    optimizer,
    student,
    tasks,
)

from optimizers.engine.checkpoint import engine_events
from optimizers.engine.methods import get_method
from optimizers.engine.schedules import Fixed, Patience
from whale_dspy.errors import ConfigError
from whale_dspy.rundir import RunDir


def run_method(tmp_path, method, **options):
    server = backend()
    weight, harness = FakeWeightPhase(server), FakeHarnessPhase()
    opt = optimizer(
        tmp_path / str(getattr(method, "name", method)),
        server,
        weight=weight,
        harness=harness,
        method=method,
        **options,
    )
    program = compile_run(opt, server)
    return program, program.report, weight, harness


def sequence(report):
    return [(p.phase, p.units, p.reason) for p in report.phases]


def test_whale_alternates_under_a_fixed_schedule(tmp_path):
    # 10 train tasks / batch 2 = 5 steps per epoch; E=0.6 -> 3 steps (12 rollouts); I=2 decisions ->
    # 6 (iteration 0) + 12 + 12 rollouts; a harness phase starts only with room for 6 + 12
    _, report, weight, harness = run_method(tmp_path, "whale", schedule=Fixed(0.6, 2), budget=100)
    cycle = [("weight", 3, "schedule"), ("harness", 3, "schedule")]
    # the last harness phase cannot afford a decision: the 4 rollouts left buy one more weight step
    spent = [
        ("harness", 0, "budget"),
        ("weight", 1, "budget"),
        ("harness", 0, "budget"),
        ("weight", 0, "budget"),
    ]
    assert sequence(report) == cycle * 2 + [("weight", 3, "schedule"), *spent]
    assert report.finished == "budget spent" and report.spend.rollouts == 100
    assert weight.started == list(range(10))  # one global step counter across weight phases
    # each harness phase starts from the incoming harness: the one the previous harness phase ended on
    assert [name for name, _ in harness.calls] == ["phase-001", "phase-003"]
    assert harness.calls[0][1] != harness.calls[1][1]


def test_every_phase_ends_where_the_next_unit_no_longer_fits(tmp_path):
    for method in ("whale", "weight-only", "harness-only", "fst", "stagewise"):
        _, report, _, _ = run_method(tmp_path, method, budget=97)
        spend = report.spend
        assert spend.rollouts <= 97 and spend.overspent == 0
        assert spend.rollouts == spend.weight_rollouts + spend.harness_rollouts
        calls = spend.weight_rollouts + HARNESS_CALLS_PER_ROLLOUT * spend.harness_rollouts
        assert spend.rollout_calls == calls
        assert sum(p.end_rollouts - p.start_rollouts for p in report.phases) == spend.rollouts
        last = report.phases[-1]
        assert last.reason in ("budget", "stage share")
        # the unit that did not fit was larger than what was left
        next_cost = 4 if last.phase == "weight" else (6 if last.units == 0 else 12)
        assert 97 - spend.rollouts < next_cost


def test_single_phase_baselines_ignore_the_schedule(tmp_path):
    _, weight_only, _, _ = run_method(tmp_path, "weight-only", budget=50)
    assert sequence(weight_only) == [("weight", 12, "budget")]
    assert weight_only.spend.harness_rollouts == 0
    _, harness_only, _, harness = run_method(tmp_path, "harness-only", budget=50)
    assert sequence(harness_only) == [("harness", 4, "budget")]  # 6 + 12 * 3 = 42, a 4th would be 54
    assert weight_only.adapter is not None and harness_only.adapter is None


def test_stagewise_spends_its_weight_share_first(tmp_path):
    _, report, _, _ = run_method(tmp_path, "stagewise", budget=60)
    assert sequence(report) == [("weight", 7, "stage share"), ("harness", 3, "budget")]
    assert report.spend.weight_rollouts == 28  # 7 steps * 4 <= 30 = half of 60
    _, shifted, _, _ = run_method(tmp_path / "share", get_method("stagewise", weight_share=0.2), budget=60)
    assert shifted.phases[0].end_rollouts == 12


def test_fst_is_whale_with_a_prompt_only_harness_phase(tmp_path):
    _, whale, _, _ = run_method(tmp_path, "whale")
    _, fst, _, _ = run_method(tmp_path, "fst")
    assert sequence(whale) == sequence(fst)
    assert RunDir(tmp_path / "fst").config()["method"]["prompt_only"] is True


def test_patience_switches_on_the_signals(tmp_path):
    server = backend()
    schedule = Patience(
        weight_burn_in=2, weight_window=1, weight_patience=2, harness_min=2, harness_patience=1
    )
    weight = FakeWeightPhase(server, rewards=lambda step: [0.1, 0.5, 0.4, 0.3][step % 4])
    harness = FakeHarnessPhase(scores=lambda phase, i: 0.5 if i < 2 else 0.4)
    opt = optimizer(tmp_path / "run", server, weight=weight, harness=harness, schedule=schedule, budget=70)
    report = compile_run(opt, server).report
    # weight: peak at step 1, two steps without improvement -> 4 steps; harness: best stays at
    # iteration 0's 0.5 -> stop after harness_min=2 decisions (iteration 0 and two more units)
    assert sequence(report)[:3] == [
        ("weight", 4, "schedule"),
        ("harness", 3, "schedule"),
        ("weight", 4, "schedule"),
    ]


def test_test_evaluations_are_reported_apart_from_the_budget(tmp_path):
    _, report, _, _ = run_method(tmp_path, "whale", budget=100, eval_every=25)
    points = [p.rollouts for p in report.curve]
    assert points[0] == 0 and points[-1] == report.spend.rollouts
    assert all(b > a for a, b in zip(points, points[1:], strict=False))
    assert all(p // 25 > q // 25 for q, p in zip(points, points[1:-1], strict=False))  # one per crossing
    assert report.spend.evaluations == len(points)
    assert report.spend.eval_rollouts == len(points) * 2 * 2  # 2 test tasks, k=2
    assert report.spend.rollouts == report.spend.weight_rollouts + report.spend.harness_rollouts
    assert (
        report.best.mean_at_k == max(p.mean_at_k for p in report.curve) and report.final == report.curve[-1]
    )


class OwnSamplingWeightPhase(FakeWeightPhase):
    """A weight phase that binds its programs with its own completion budget, as RFT does."""

    def __init__(self, server):
        super().__init__(server)
        self.seen: list[int] = []  # the completion budget of each program the phase was given

    def steps(self, program, trainset, **options):
        for signal, stepped in super().steps(program, trainset, **options):
            self.seen.append(program.bound_lm.kwargs.get("max_tokens"))
            yield signal, stepped.with_lm(stepped.bound_lm.copy(max_tokens=999), stepped.adapter_name)


def test_every_checkpoint_is_evaluated_under_the_runs_sampling_whichever_phase_bound_it(tmp_path):
    server = backend()
    weight = OwnSamplingWeightPhase(server)
    opt = optimizer(
        tmp_path / "run", server, weight=weight, harness=FakeHarnessPhase(), sampling={"max_tokens": 77}
    )
    report = compile_run(opt, server).report
    traces = sorted((tmp_path / "run" / "evals").glob("test-*.jsonl"))
    calls = [
        call["sampling"]
        for trace in traces
        for line in trace.read_text().splitlines()
        for call in json.loads(line)["lm_calls"]
    ]
    assert len(traces) == len(report.curve) > 2 and {call["max_tokens"] for call in calls} == {77}
    assert {call["temperature"] for call in calls} == {1.0}  # CHECKPOINT_SAMPLING, where the run names none
    assert {point.adapter for point in report.curve} - {None}  # adapter-bound checkpoints among them
    assert weight.seen and set(weight.seen) == {77}  # and every phase is handed a program under it
    assert RunDir(tmp_path / "run").config()["sampling"] == {"max_tokens": 77}  # a resume must match


def test_compile_returns_a_new_program_on_the_final_harness_and_adapter(tmp_path):
    server = backend()
    original = student(server)
    opt = optimizer(tmp_path / "run", server, weight=FakeWeightPhase(server), harness=FakeHarnessPhase())
    program = opt.compile(original, trainset=tasks("train", 10), valset=tasks("search", 3))
    assert original.adapter_name is None and original.source.name == "h0"
    assert program is not original and program.report is opt.report
    assert program.adapter_name == opt.report.adapter["name"]
    assert program.source.digest == opt.report.harness["digest"]
    assert opt.report.curve == ()  # no testset: no evaluations
    kinds = [e["kind"] for e in engine_events(RunDir(tmp_path / "run"))]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"


def test_missing_pieces_are_refused_before_any_work(tmp_path):
    server = backend()
    with pytest.raises(ConfigError, match="needs a harness phase"):
        optimizer(tmp_path / "a", server, weight=FakeWeightPhase(server), method="whale")
    with pytest.raises(ConfigError, match="valid methods are whale, weight-only"):
        optimizer(tmp_path / "b", server, weight=FakeWeightPhase(server), method="both")
    with pytest.raises(ConfigError, match="budget must be"):
        optimizer(tmp_path / "c", server, weight=FakeWeightPhase(server), method="weight-only", budget=0)
    opt = optimizer(tmp_path / "d", server, harness=FakeHarnessPhase(), method="harness-only")
    with pytest.raises(ConfigError, match="needs a non-empty searchset"):
        opt.compile(student(server), trainset=[], valset=[])
    assert not (tmp_path / "d").exists()
