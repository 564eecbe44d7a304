"""The adversarial suite: every hostile candidate in tests/adversarial/ is contained and recorded.

Each file states the reason the sandbox must record with the static check off
(`EXPECTED`, the runtime guard and the OS limits alone) and what the static
check reports (`STATIC`). Every run also checks what must never happen: the
planted API key or a gold answer in any trace, a file in the archive, a
sandbox process left behind, a non-zero score.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import dspy
import pytest
from sandbox_helpers import (
    ADVERSARIAL_DIR,
    ARCHIVE_DIR,
    SECRET,
    SECRET_VARIABLE,
    Question,
    candidate_facts,
    exact_match,
    examples,
    limits_for,
    sandbox_processes,
    scripted_lm,
    tools_for,
)

from whale_dspy.evaluation import EvalRequest
from whale_dspy.harness import HarnessSource
from whale_dspy.sandbox import CandidateProgram, SandboxedEvaluator, check_imports, classify_failure

# One xdist worker for the module: the archive folder is a fixed path the candidates aim at, made
# and removed by the module fixture, which two workers would remove under each other.
pytestmark = pytest.mark.xdist_group("adversarial-archive")

CANDIDATES = sorted(ADVERSARIAL_DIR.glob("*.py"))
STATIC_CAUGHT = [path for path in CANDIDATES if candidate_facts(path)["STATIC"]]
GOOD_SOURCE = """
import dspy


def build(signature, tools):
    class Good(dspy.Module):
        def __init__(self):
            super().__init__()
            self.solve = dspy.Predict(signature)

        def forward(self, question):
            tools["lookup"](query=question)
            return self.solve(question=question)

    return Good()
"""


@pytest.fixture(scope="module", autouse=True)
def planted() -> Iterator[None]:
    """A fake API key in the parent's environment and an archive folder the candidates aim at."""
    os.environ[SECRET_VARIABLE] = SECRET
    ARCHIVE_DIR.mkdir(mode=0o755, exist_ok=True)
    try:
        yield
    finally:
        del os.environ[SECRET_VARIABLE]
        shutil.rmtree(ARCHIVE_DIR, ignore_errors=True)


def evaluate(path_or_source: Path | str, evaluator: SandboxedEvaluator):
    source = (
        HarnessSource.from_path(path_or_source)
        if isinstance(path_or_source, Path)
        else HarnessSource(name="good", code=path_or_source)
    )
    program = CandidateProgram(source, Question, tools_for)
    return evaluator.evaluate(
        program, EvalRequest(examples(), metric=exact_match, lm=scripted_lm(), k=1, namespace="adversarial")
    )


def assert_contained(rollouts, expected: str | None) -> None:
    assert len(rollouts) == len(examples())
    assert {classify_failure(rollout.error) for rollout in rollouts} == {expected}, [
        r.error for r in rollouts
    ]
    assert all(rollout.score == 0.0 for rollout in rollouts)
    trace = json.dumps([rollout.to_dict() for rollout in rollouts])
    assert SECRET not in trace
    assert "7f3a" not in trace  # no gold answer
    assert not any(ARCHIVE_DIR.iterdir())
    assert sandbox_processes() == []


def test_there_are_enough_adversarial_candidates() -> None:
    assert len(CANDIDATES) >= 25


@pytest.mark.parametrize("path", CANDIDATES, ids=lambda path: path.stem)
def test_static_check_reports_what_the_file_says(path: Path) -> None:
    facts = candidate_facts(path)
    violations = check_imports(path.read_text(), limits_for(facts).allowed_imports)
    if facts["STATIC"] is None:
        assert violations == []
    else:
        assert violations and all(": forbidden " in violation for violation in violations)
        assert any(facts["STATIC"] in violation for violation in violations)


@pytest.mark.parametrize("path", STATIC_CAUGHT, ids=lambda path: path.stem)
def test_statically_caught_candidates_never_start_a_process(path: Path) -> None:
    facts = candidate_facts(path)
    report, rollouts = evaluate(path, SandboxedEvaluator(limits_for(facts)))
    assert report.mean_at_k == 0.0
    assert {classify_failure(rollout.error) for rollout in rollouts} <= {"forbidden import", "forbidden call"}
    assert all(rollout.lm_calls == () and rollout.tool_calls == () for rollout in rollouts)


@pytest.mark.parametrize("path", CANDIDATES, ids=lambda path: path.stem)
def test_contained_at_run_time_without_the_static_check(path: Path) -> None:
    facts = candidate_facts(path)
    _, rollouts = evaluate(path, SandboxedEvaluator(limits_for(facts, static_check=False)))
    assert_contained(rollouts, facts["EXPECTED"])


def test_parent_is_unharmed_and_a_good_candidate_still_scores() -> None:
    assert os.environ[SECRET_VARIABLE] == SECRET
    assert dspy.Predict.__call__.__qualname__ == "Predict.__call__"
    evaluator = SandboxedEvaluator(limits_for(candidate_facts(CANDIDATES[0])))
    report, rollouts = evaluate(GOOD_SOURCE, evaluator)
    assert [rollout.error for rollout in rollouts] == [None, None]
    assert all(rollout.prediction == {"answer": "guess"} for rollout in rollouts)
    assert all(len(rollout.lm_calls) == 1 and len(rollout.tool_calls) == 1 for rollout in rollouts)
    assert report.parse_rate == 1.0
    assert sandbox_processes() == []
