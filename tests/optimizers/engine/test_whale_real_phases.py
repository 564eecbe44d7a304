"""WhaleOptimizer driving the real RFT and MetaHarness phases (scripted LM, fake trainer and server).

Checks the wiring's phase adapters against the real phases: the declared rollout
bounds are never exceeded, each harness phase has its own archive, and a run
interrupted right after any unit resumes to the same events (MetaHarness
replaying its archive, RFT continuing at the next step).
"""

from __future__ import annotations

import json

import pytest
from meta_harness_helpers import QA, TOY, exact, tasks

from optimizers.engine.checkpoint import engine_events
from optimizers.engine.schedules import Fixed
from optimizers.engine.whale import WhaleOptimizer
from optimizers.harness.meta_harness import MetaHarness, MetaHarnessConfig
from optimizers.harness.proposers import MutationProposer
from optimizers.weights.config import RFTConfig
from optimizers.weights.rft import RejectionSamplingFinetune
from whale_dspy.evaluation import InProcessEvaluator
from whale_dspy.harness import HarnessProgram, HarnessSource
from whale_dspy.rundir import RunDir
from whale_dspy.testing.fake_backend import FakeBackend
from whale_dspy.testing.fake_trainer import FakeTrainer
from whale_dspy.testing.scripted_lm import ScriptedLM

UNITS = ("weight_step", "harness_iteration")
VOLATILE = {"time", "elapsed", "seconds"}


class Interrupt(RuntimeError):
    pass


def interrupt_after(units: int):
    seen = []

    def listener(event):
        if event["kind"] in UNITS:
            seen.append(event)
            if len(seen) == units:
                raise Interrupt(f"interrupted after unit {units}")

    return listener


def compile_real(run_dir, *, on_event=None, budget=70, rft_folder=True):
    server = FakeBackend(ScriptedLM({"": {"answer": "4"}}))
    rft = RejectionSamplingFinetune(
        backend=server,
        trainer=FakeTrainer(losses=[0.5] * 50),  # the same loss whichever process trains
        metric=exact,
        config=RFTConfig(batch_size=2, k=2, threads=2, run_tag="t"),
        run_dir=RunDir(run_dir) if rft_folder else None,
        base="base",
    )
    meta = MetaHarness(
        proposer=MutationProposer(0),
        metric=exact,
        archive_dir=run_dir / "unused",
        config=MetaHarnessConfig.paper(candidates=2, tasks=3, smoke_tasks=1, threads=2, timeout_s=30),
        evaluator=InProcessEvaluator(threads=2, run_unvouched_in_process=True),
    )
    optimizer = WhaleOptimizer(
        backend=server,
        metric=exact,
        schedule=Fixed(0.5, 3),
        budget=budget,
        run_dir=run_dir,
        eval_every=20,
        eval_k=2,
        eval_threads=2,
        weight_phase=rft,
        harness_phase=meta,
        on_event=on_event,
    )
    student = HarnessProgram(HarnessSource("toy_h0", TOY).vouched(), QA, lm=server.lm())
    program = optimizer.compile(student, trainset=tasks(8), valset=tasks(3), track=tasks(2))
    return program, server


def stable(run_dir):
    """The engine's events without resume markers, timings, or the run directory's own path."""
    events = [e for e in engine_events(RunDir(run_dir)) if e["kind"] not in ("run_started", "run_resumed")]
    events = [{k: v for k, v in e.items() if k not in VOLATILE} for e in events]
    events = [
        {**e, "signal": {k: v for k, v in e["signal"].items() if k != "seconds"}} if "signal" in e else e
        for e in events
    ]
    return json.loads(json.dumps(events).replace(str(run_dir), "RUN"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("real") / "run"
    program, _ = compile_real(run_dir)
    return run_dir, program


def test_real_phases_alternate_within_their_declared_costs(reference):
    run_dir, program = reference
    report = program.report
    assert [p.phase for p in report.phases][:4] == ["weight", "harness", "weight", "harness"]
    assert report.spend.overspent == 0 and report.spend.rollouts <= 70
    declared = [
        e["declared"] - e["signal"]["rollouts"] for e in engine_events(RunDir(run_dir)) if "declared" in e
    ]
    assert min(declared) >= 0
    # one archive per harness phase, each rooted at that phase's incoming harness, and beside each
    # the records of its decisions (the selection slice's, never a proposer's)
    folders = sorted(p.name for p in (run_dir / "harness").iterdir())
    archives = [name for name in folders if not name.endswith("-selection")]
    assert archives == [f"phase-{p.position:03d}" for p in report.phases if p.phase == "harness" and p.units]
    assert [name for name in folders if name.endswith("-selection")] == [f"{a}-selection" for a in archives]
    assert program.adapter_name == report.adapter["name"] and program.adapter_name.startswith("policy-rt-")


@pytest.mark.parametrize("after", [1, 3, 4, 6])
def test_real_phases_resume_after_an_interruption(reference, tmp_path, after):
    reference_dir, reference_program = reference
    run_dir = tmp_path / "run"
    with pytest.raises(Interrupt):
        compile_real(run_dir, on_event=interrupt_after(after))
    program, server = compile_real(run_dir)
    assert stable(run_dir) == stable(reference_dir)
    assert program.report.spend.rollouts == reference_program.report.spend.rollouts
    assert program.source.digest == reference_program.source.digest
    assert program.adapter_name in server.loaded


def test_a_weight_phase_built_without_a_folder_trains_into_the_runs(tmp_path, monkeypatch):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr("tempfile.tempdir", None)  # read TMPDIR again
    program, _ = compile_real(tmp_path / "run", budget=20, rft_folder=False)
    trained = sorted(p.name for p in (tmp_path / "run" / "adapters").iterdir())
    assert program.adapter_name in trained
    assert RunDir(tmp_path / "run").events("rft_step")  # its step records went with the run
    assert not list(scratch.glob("whale-rft-*"))


def test_a_weight_phase_lends_its_folder_to_one_run_at_a_time(tmp_path):
    server = FakeBackend(ScriptedLM({"": {"answer": "4"}}))
    built = {"backend": server, "trainer": FakeTrainer(), "metric": exact, "base": "base"}
    unfoldered = RejectionSamplingFinetune(**built)
    first, second = RunDir(tmp_path / "first"), RunDir(tmp_path / "second")
    with unfoldered.writing_into(first):
        assert unfoldered.run_dir is first
    with unfoldered.writing_into(second):  # reused by another optimizer: that run's folder, not the first's
        assert unfoldered.run_dir is second
    assert unfoldered.run_dir is None
    own = RejectionSamplingFinetune(**built, run_dir=RunDir(tmp_path / "own"))
    with own.writing_into(first):
        assert own.run_dir.path == tmp_path / "own"  # a folder it was given is kept
