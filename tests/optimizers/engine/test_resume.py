"""Resuming a WHALE run after a crash at any unit: same final state, same events, nothing counted twice."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
from rich.console import Console
from rundir_helpers import written_by_another_process
from whale_helpers import (
    Crash,
    Crashes,
    FakeHarnessPhase,
    FakeWeightPhase,
    backend,
    compile_run,
    optimizer,
    scripted_run,
)

from optimizers.engine.checkpoint import CHECKPOINT_FILE, engine_events
from optimizers.engine.schedules import Fixed
from whale_dspy.errors import ConfigError
from whale_dspy.evaluation import InProcessEvaluator
from whale_dspy.rundir import RunDir

VOLATILE = {"time", "elapsed", "seconds"}
BUDGET = 72
"""whale, fixed(0.6, 2): weight 3 steps (12), harness iteration 0 and 2 decisions (30); the second
harness phase is let in with its first decision's cost (18) -> 6 weight + 5 harness units."""


def run(run_dir, crashes=None, **options):
    """One process's worth of work: a fresh server and fresh phases (as after a restart)."""
    server = backend()
    crashes = crashes or Crashes()
    weight = FakeWeightPhase(server, crashes=crashes)
    harness = FakeHarnessPhase(crashes=crashes)
    settings = {"budget": BUDGET, "schedule": Fixed(0.6, 2), **options}
    opt = optimizer(run_dir, server, weight=weight, harness=harness, **settings)
    return compile_run(opt, server), server, weight


def stable_events(run_dir):
    """The engine's events without the resume markers and wall-clock fields."""
    events = [e for e in engine_events(RunDir(run_dir)) if e["kind"] not in ("run_started", "run_resumed")]
    return [{k: v for k, v in e.items() if k not in VOLATILE} for e in events]


def stable_report(report):
    data = report.to_dict()
    data["spend"] = {k: v for k, v in data["spend"].items() if not k.endswith("seconds")}
    data.pop("run_dir")
    return data


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    program, _, _ = run(run_dir)
    return program.report, stable_events(run_dir)


def units_of(report):
    return [(p.phase, p.units) for p in report.phases]


def crash_points(report):
    """Every unit of the reference run, before its work and after its work (before it is recorded)."""
    weight = sum(p.units for p in report.phases if p.phase == "weight")
    harness = sum(p.units for p in report.phases if p.phase == "harness")
    return [("weight", i, when) for i in range(weight) for when in ("before", "after")] + [
        ("harness", i, when) for i in range(harness) for when in ("before", "after")
    ]


def test_the_reference_run_has_units_in_every_phase(reference):
    report, _ = reference
    # the last harness phase cannot afford a decision: a weight phase may still fit steps, then neither
    assert units_of(report) == [
        ("weight", 3),
        ("harness", 3),
        ("weight", 3),
        ("harness", 2),
        ("weight", 0),
        ("harness", 0),
    ]


def test_resume_after_a_crash_at_every_unit_matches_an_uninterrupted_run(reference, tmp_path):
    report, events = reference
    for index, point in enumerate(crash_points(report)):
        run_dir = tmp_path / f"crash-{index}"
        crashes = Crashes({point})
        with pytest.raises(Crash):
            run(run_dir, crashes)
        resumed, server, weight = run(run_dir, crashes)
        assert stable_report(resumed.report) == stable_report(report), point
        assert stable_events(run_dir) == events, point
        if point[0] == "weight":
            # no finished step is redone: the resumed process starts at the crashed step
            assert weight.started[0] == point[1], point
        # the adapter the run was on is served by the new server before any use
        assert resumed.adapter_name in server.loaded


def test_resumed_run_reloads_its_adapter_into_a_new_server(tmp_path):
    crashes = Crashes({("harness", 1, "before")})
    with pytest.raises(Crash):
        run(tmp_path / "run", crashes)
    _, server, weight = run(tmp_path / "run", crashes)
    assert server.load_order[0] == "fake-s0002"  # the adapter the crashed harness phase was using
    assert weight.started[0] == 3


def test_a_run_folder_restored_elsewhere_resumes_from_its_own_copy_of_the_adapter(tmp_path):
    """A record archive unpacked on another machine: the events name the first machine's paths."""
    first = tmp_path / "first" / "run"
    crashes = Crashes({("harness", 1, "before")})
    server = backend()
    weight = FakeWeightPhase(server, crashes=crashes, adapter_dir=first / "adapters")
    harness = FakeHarnessPhase(crashes=crashes)
    opt = optimizer(first, server, weight=weight, harness=harness, budget=BUDGET, schedule=Fixed(0.6, 2))
    with pytest.raises(Crash):
        compile_run(opt, server)
    for step in range(3):  # what a trainer would have written there
        (first / "adapters" / f"s{step}").mkdir(parents=True)
        (first / "adapters" / f"s{step}" / "adapter_config.json").write_text("{}")
    shutil.move(first, tmp_path / "run")

    _, server, _ = run(tmp_path / "run", crashes)

    assert server.loaded["fake-s0002"].path == str((tmp_path / "run" / "adapters" / "s2").resolve())


def test_resuming_a_finished_run_does_no_work(tmp_path):
    first, _, _ = run(tmp_path / "run")
    again, server, weight = run(tmp_path / "run")
    assert weight.started == []
    assert stable_report(again.report) == stable_report(first.report)
    assert server.load_order == [first.adapter_name]


def test_resume_with_another_configuration_is_refused_with_the_differences(tmp_path):
    run(tmp_path / "run", budget=30)
    with pytest.raises(ConfigError) as error:
        run(tmp_path / "run", budget=40, eval_k=4)
    assert "budget: 30 -> 40" in str(error.value) and "eval_k: 2 -> 4" in str(error.value)


def test_resume_flag_needs_an_existing_run(tmp_path):
    server = backend()
    opt = optimizer(tmp_path / "none", server, weight=FakeWeightPhase(server), method="weight-only")
    with pytest.raises(ConfigError, match="nothing to resume"):
        compile_run(opt, server, resume=True)
    assert not (tmp_path / "none").exists()  # a mistyped --resume path leaves no empty run behind


def test_a_run_another_process_is_writing_is_refused_and_left_untouched(tmp_path):
    first, _, _ = run(tmp_path / "run")
    before = (tmp_path / "run" / "events.jsonl").read_bytes()
    with written_by_another_process(tmp_path / "run"):  # as a second `whale compare` would
        with pytest.raises(ConfigError, match="being written by another process"):
            run(tmp_path / "run")
        assert (tmp_path / "run" / "events.jsonl").read_bytes() == before
    again, _, weight = run(tmp_path / "run")  # once it has gone, the run reopens as usual
    assert weight.started == [] and stable_report(again.report) == stable_report(first.report)


def test_a_torn_last_event_and_a_stale_checkpoint_are_recovered(tmp_path, reference):
    report, events = reference
    crashes = Crashes({("weight", 4, "before"), ("weight", 5, "after")})
    run_dir = tmp_path / "run"
    with pytest.raises(Crash):
        run(run_dir, crashes)
    stale_checkpoint = (run_dir / CHECKPOINT_FILE).read_text()
    with pytest.raises(Crash):
        run(run_dir, crashes)
    # kill -9 mid-append leaves half a line; the checkpoint lags the log by several events
    log = run_dir / "events.jsonl"
    log.write_text(log.read_text() + '{"kind": "weight_step", "sig')
    (run_dir / CHECKPOINT_FILE).write_text(stale_checkpoint)
    assert json.loads(stale_checkpoint)["events"] < len(engine_events(RunDir(run_dir)))
    resumed, _, _ = run(run_dir, crashes)
    assert stable_events(run_dir) == events
    assert stable_report(resumed.report) == stable_report(report)


class CrashAfterEvent:
    """An `on_event` listener: the run dies right after the n-th event of a kind is recorded and
    checkpointed, before the engine's next step (a kill at a phase change), once."""

    def __init__(self, kind: str, n: int):
        self.kind, self.n, self.seen = kind, n, 0

    def __call__(self, event: dict) -> None:
        if event["kind"] == self.kind:
            self.seen += 1
            if self.seen == self.n:
                raise Crash(f"scripted crash after {self.kind} #{self.n}")


class CrashMidEvaluation:
    """The checkpoint evaluator, killed at its n-th scored rollout (Ctrl-C/SIGTERM unwinds as
    KeyboardInterrupt), once: the evaluation has recorded part of its trace and no event. One thread,
    so which rollouts were recorded before the kill is fixed."""

    limits = None

    def __init__(self, n: int):
        self.inner, self.n, self.scored = InProcessEvaluator(threads=1, run_unvouched_in_process=True), n, 0

    def evaluate(self, program, request):
        def killed_at_n(example, prediction, trace=None):
            self.scored += 1
            if self.scored == self.n:
                raise KeyboardInterrupt
            return request.metric(example, prediction, trace)

        return self.inner.evaluate(program, dataclasses.replace(request, metric=killed_at_n))


def assert_resumes_to(reference, run_dir, resumed) -> None:
    report, events = reference
    assert stable_report(resumed.report) == stable_report(report)
    assert stable_events(run_dir) == events


@pytest.mark.parametrize("kind", ["phase_started", "phase_ended"])
def test_a_kill_at_every_phase_change_resumes_to_the_uninterrupted_run(reference, tmp_path, kind):
    _, events = reference
    changes = sum(event["kind"] == kind for event in events)
    assert changes >= 4
    for n in range(1, changes + 1):
        crash = CrashAfterEvent(kind, n)
        with pytest.raises(Crash):
            run(tmp_path / f"{kind}-{n}", on_event=crash)
        resumed, _, _ = run(tmp_path / f"{kind}-{n}", on_event=crash)
        assert_resumes_to(reference, tmp_path / f"{kind}-{n}", resumed)


def test_a_kill_during_a_checkpoint_evaluation_redoes_it_whole(reference, tmp_path):
    """Each evaluation scores 2 test tasks x k=2; the 6th rollout is the second evaluation's second."""
    evaluator = CrashMidEvaluation(6)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "run", evaluator=evaluator)
    traces = sorted((tmp_path / "run" / "evals").glob("*.jsonl"))
    assert [len(path.read_text().splitlines()) for path in traces] == [4, 1]  # a part of the second
    resumed, _, _ = run(tmp_path / "run", evaluator=evaluator)
    assert_resumes_to(reference, tmp_path / "run", resumed)
    traces = sorted((tmp_path / "run" / "evals").glob("*.jsonl"))
    assert len(traces) > 2 and all(len(path.read_text().splitlines()) == 4 for path in traces)


def test_a_checkpoint_ahead_of_its_event_log_is_refolded_from_the_log(reference, tmp_path, caplog):
    """The log lost its last events (a copy, a restored backup) while the checkpoint counts them:
    the checkpoint is not trusted, the log is refolded, and the lost units are done again."""
    crashes = Crashes({("harness", 2, "before")})
    run_dir = tmp_path / "run"
    with pytest.raises(Crash):
        run(run_dir, crashes)
    log = run_dir / "events.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    units = [
        i for i, line in enumerate(lines) if json.loads(line)["kind"] in ("weight_step", "harness_iteration")
    ]
    log.write_text("".join(lines[: units[-2]]))  # the last two units are gone from the log only
    assert json.loads((run_dir / CHECKPOINT_FILE).read_text())["events"] > len(engine_events(RunDir(run_dir)))
    resumed, _, _ = run(run_dir, crashes)
    assert "checkpoint is ahead of the event log" in caplog.text
    assert_resumes_to(reference, run_dir, resumed)


def test_a_finished_run_compiled_again_returns_its_report_and_records_nothing(tmp_path):
    """`whale compare` passes over finished runs on every rerun: each pass had appended a
    `run_resumed` event (with this machine's environment) to a run that did not run again."""
    first = scripted_run(tmp_path / "run", console=Console(quiet=True))
    before = (tmp_path / "run" / "events.jsonl").read_bytes()
    again = scripted_run(tmp_path / "run", console=Console(quiet=True))
    assert (tmp_path / "run" / "events.jsonl").read_bytes() == before
    assert again == first


def test_a_run_recorded_before_decisions_were_counted_reopens_with_its_old_count(tmp_path):
    """Issue 56: a schedule record without `counts` (I counted the incoming evaluation) reopens
    with the record it wrote, instead of being refused for the new field."""
    first, _, _ = run(tmp_path / "run")
    config = RunDir(tmp_path / "run").config()
    config["schedule"].pop("counts")
    (tmp_path / "run" / "config.json").write_text(json.dumps(config))
    again, _, weight = run(tmp_path / "run")
    assert weight.started == [] and RunDir(tmp_path / "run").config() == config
    assert again.report.schedule == first.report.schedule
