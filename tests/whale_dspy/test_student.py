"""A user's own DSPy program as a student: its source, the generated entry, what it holds, bad input."""

from __future__ import annotations

import dspy
import pytest
from student_helpers import exact, lookup, questions, scripted
from user_programs import HiddenArgument, HoldsAClient, LookupQA, ReasonsOnRequest

from whale_dspy.errors import ConfigError
from whale_dspy.evaluation import EvalRequest, evaluate
from whale_dspy.harness import HarnessProgram, HarnessSource
from whale_dspy.student import STATE_NAME, as_harness, check_metric


def test_a_user_program_becomes_the_source_its_class_needs_plus_a_generated_entry():
    program = as_harness(LookupQA(lookup, notes=1))
    code = program.source.code
    for needed in ("class Rewrite", "class AnswerFromNotes", "def join_notes", "NOTES_PER_QUERY = 2"):
        assert needed in code
    for unrelated in ("load_user_data", "HiddenArgument", "import json"):
        assert unrelated not in code
    assert "LookupQA(lookup=tools['lookup'], notes=1, style='short')" in code
    assert program.source.trusted and program.source.name == "LookupQA"
    assert [name for name, _ in program.named_predictors()] == ["program.rewrite", "program.answer"]


def test_the_harness_answers_as_the_program_does_and_its_tool_calls_are_traced():
    program = as_harness(LookupQA(lookup, notes=1))
    assert program.with_lm(scripted())(question="What is the capital of France?").answer == "Paris"
    report, rollouts = evaluate(
        program, EvalRequest(questions(2), metric=exact, lm=scripted(), k=2), threads=2
    )
    assert report.mean_at_k == 1.0
    calls = rollouts[0].tool_calls
    assert [c.name for c in calls] == ["lookup"] and calls[0].args == {"arg0": "capital france", "arg1": 1}
    assert len(rollouts[0].lm_calls) == 2


def test_state_an_optimizer_left_on_the_program_is_carried_into_its_source():
    student = LookupQA(lookup)
    student.answer.demos = [dspy.Example(notes="- n", question="q?", answer="a")]
    student.rewrite.signature = student.rewrite.signature.with_instructions("Only keywords.")
    program = as_harness(student)
    assert f"program.load_state({STATE_NAME})" in program.source.code
    template = dict(program.named_predictors())
    assert template["program.answer"].demos[0]["answer"] == "a"
    assert template["program.rewrite"].signature.instructions == "Only keywords."
    assert "program.load_state" not in as_harness(LookupQA(lookup)).source.code


def test_a_harness_program_is_its_own_harness():
    program = HarnessProgram(
        HarnessSource("h0", "def build(signature, tools):\n    pass\n").vouched(), dspy.Signature("q -> a")
    )
    assert as_harness(program) is program


def test_programs_that_cannot_be_rebuilt_are_refused_with_what_to_do():
    with pytest.raises(ConfigError, match="cannot be replayed.*self._tool|keep it as `self.lookup"):
        as_harness(HiddenArgument(lookup))
    assert as_harness(ReasonsOnRequest()).named_predictors()  # the default it replays is the one used
    with pytest.raises(ConfigError, match="gives predictors .*'answer'.*not .*'answer.predict'"):
        as_harness(ReasonsOnRequest(reason=True))
    with pytest.raises(ConfigError, match="object, which cannot be handed to a candidate"):
        as_harness(HoldsAClient(object()))
    namespace: dict = {}
    exec(
        "import dspy\nclass Typed(dspy.Module):\n    def __init__(self):\n        super().__init__()\n",
        namespace,
    )
    with pytest.raises(ConfigError, match="cannot find the source|top-level class"):
        as_harness(namespace["Typed"]())
    with pytest.raises(ConfigError, match="a student is a dspy.Module"):
        as_harness(lambda question: question)


def test_a_metric_with_the_wrong_shape_is_refused():
    check_metric(exact)
    with pytest.raises(ConfigError, match=r"\(example, prediction, trace=None\)"):
        check_metric(lambda prediction: 1.0)


def test_the_task_signature_holds_what_a_task_answers_not_what_names_it():
    grouped = [
        dspy.Example(task_id="t0", question="q", answer="a", reasons="r", task_group="Rhine").with_inputs(
            "question"
        )
    ]
    signature = as_harness(LookupQA(lookup, notes=1), examples=grouped).signature
    assert list(signature.input_fields) == ["question"]
    assert list(signature.output_fields) == ["answer", "reasons"]
