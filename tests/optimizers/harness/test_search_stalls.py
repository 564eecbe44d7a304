"""A harness search whose proposer produces nothing ends, instead of spinning without spending budget."""

from __future__ import annotations

import json

import pytest
from meta_harness_helpers import ScriptedProposer, exact, student, tasks

from optimizers import Fixed, MetaHarness, MetaHarnessConfig, WhaleOptimizer
from optimizers.signals import MAX_EMPTY_ITERATIONS
from whale_dspy.evaluation import InProcessEvaluator
from whale_dspy.testing.fake_backend import FakeBackend
from whale_dspy.testing.scripted_lm import ScriptedLM


def search(tmp_path, proposer) -> MetaHarness:
    return MetaHarness(
        proposer=proposer,
        metric=exact,
        archive_dir=tmp_path / "archive",
        config=MetaHarnessConfig.paper(
            tasks=2, smoke_tasks=0, min_iterations=10, patience=10, max_iterations=50
        ),
        evaluator=InProcessEvaluator(threads=2, run_unvouched_in_process=True),
    )


@pytest.mark.timeout(60)
@pytest.mark.parametrize("proposer", [ScriptedProposer([]), ScriptedProposer([RuntimeError("LM down")] * 99)])
def test_a_harness_only_run_without_candidates_finishes(tmp_path, proposer):
    server = FakeBackend(ScriptedLM({"": {"answer": "4"}}))
    whale = WhaleOptimizer(
        backend=server,
        metric=exact,
        schedule=Fixed(1.0, 6),
        budget=1000,
        run_dir=tmp_path / "run",
        eval_every=500,
        eval_k=1,
        harness_phase=search(tmp_path, proposer),
        method="harness-only",
    )
    result = whale.compile(student(lm=server.lm()), trainset=[], valset=tasks(2), track=tasks(2))
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    iterations = [e for e in events if e["kind"] == "harness_iteration"]
    assert len(iterations) == 1 + MAX_EMPTY_ITERATIONS  # h0, then the empty ones that end the phase
    assert [e["reason"] for e in events if e["kind"] == "phase_ended"] == ["no candidates"]
    assert "run_finished" in [e["kind"] for e in events] and result.report.spend.rollouts == 2


def test_compile_alone_stops_on_empty_iterations_too(tmp_path):
    optimizer = search(tmp_path, ScriptedProposer([]))
    optimizer.lm = ScriptedLM({"": {"answer": "4"}})
    optimizer.compile(student(), trainset=tasks(2))
    assert optimizer.report.stopped == "no candidates"
    assert len(optimizer.report.iterations) == 1 + MAX_EMPTY_ITERATIONS
