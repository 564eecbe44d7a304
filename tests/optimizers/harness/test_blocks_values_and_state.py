"""Harness blocks that constrain an answer's values, refuse episode state, and name the kept sample."""

from __future__ import annotations

import inspect
import random
from pathlib import Path
from typing import Any

import chess
import dspy
import pytest
from meta_harness_helpers import GOOD, QA, exact, tasks
from sandbox_helpers import TEST_LIMITS

from domains.chess_env import ChessPuzzleEnv, legal_san, score_answer
from domains.chess_puzzles import ChessPuzzle
from domains.math_problems import GradeSchoolMath, GSM8KDomain
from optimizers.harness.proposers import blocks
from optimizers.harness.proposers.edits import EDITS_BY_NAME
from optimizers.weights.sft_from_rollouts import sft_examples
from whale_dspy.evaluation import EvalRequest
from whale_dspy.harness import HarnessProgram, HarnessSource
from whale_dspy.protocols import STATEFUL_TOOL
from whale_dspy.records import WINNING_SAMPLE
from whale_dspy.rollouts import run_rollout
from whale_dspy.sandbox import SandboxedEvaluator
from whale_dspy.testing import ScriptedLM

SEEDS = Path(__file__).parents[3] / "harness_programs"
START = chess.STARTING_FEN
LINE = ["e2e4", "e7e5", "g1f3"]
"""A made-up two-move 'puzzle' from the start: e4, (e5), Nf3."""


class SchemaLM(ScriptedLM):
    """A scripted LM that, like vLLM, takes a JSON schema in `response_format`; `schemas` holds the
    schema of each request (copies share the list)."""

    def __init__(self, replies: Any) -> None:
        super().__init__(replies)
        self.schemas: list[dict[str, Any]] = []

    def __call__(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> Any:
        schema = kwargs["response_format"]  # a pydantic model here, its JSON schema from the sandbox
        is_dict = isinstance(schema, dict)
        self.schemas.append(schema["json_schema"]["schema"] if is_dict else schema.model_json_schema())
        return super().__call__(prompt, messages=messages, **kwargs)

    @property
    def supports_response_schema(self) -> bool:
        return True

    @property
    def supported_params(self) -> set[str]:
        return {"response_format"}


def edit(name: str, code: str) -> str:
    new = EDITS_BY_NAME[name].apply(code, random.Random(0))
    assert new is not None
    return new


def puzzle() -> dspy.Example:
    return dspy.Example(
        task_id="p0", fen=START, side_to_move="white", last_move="none", line=" ".join(LINE)
    ).with_inputs("fen", "side_to_move", "last_move")


def chess_metric(example: dspy.Example, pred: Any, trace: Any = None) -> float:
    return score_answer(example.fen, example.line.split(), pred.answer)


def chess_program(code: str) -> HarnessProgram:
    return HarnessProgram(
        HarnessSource("edited", code).vouched(), ChessPuzzle, lambda ex: ChessPuzzleEnv(ex.fen, LINE).tools()
    )


@pytest.mark.parametrize("json_first", [False, True], ids=["alone", "around-a-json-adapter"])
def test_the_answer_is_decoded_as_one_of_the_legal_moves_read_again_each_turn(json_first):
    seed = (SEEDS / "chess_h0.py").read_text()
    code = edit("answer_from_choices", edit("constrained_decoding_on", seed) if json_first else seed)
    lm = SchemaLM(['{"move": "e4"}', '{"move": "Nf3"}'])
    rollout = run_rollout(chess_program(code), puzzle(), lm=lm, metric=chess_metric, sample=0, rollout_id=3)
    assert rollout.error is None and rollout.score == 1.0
    after_e5 = chess.Board(START)
    for move in LINE[:2]:
        after_e5.push_uci(move)
    first, second = (schema["properties"]["move"]["enum"] for schema in lm.schemas)
    assert first == legal_san(chess.Board(START)) and second == legal_san(after_e5) and first != second
    assert [c.name for c in rollout.tool_calls].count("legal_moves") == 2


def test_the_legal_moves_constrain_a_sandboxed_candidate_too():
    code = edit("answer_from_choices", (SEEDS / "chess_h0.py").read_text())
    lm = SchemaLM(['{"move": "e4"}', '{"move": "Nf3"}'])
    program = HarnessProgram(HarnessSource("edited", code), ChessPuzzle, chess_program(code).tools_factory)
    _, (rollout,) = SandboxedEvaluator(TEST_LIMITS).evaluate(
        program, EvalRequest([puzzle()], metric=chess_metric, lm=lm, k=1, namespace="choices")
    )
    assert rollout.error is None and rollout.score == 1.0
    assert lm.schemas[0]["properties"]["move"]["enum"] == legal_san(chess.Board(START))


def test_an_answer_outside_the_set_does_not_parse():
    code = edit("answer_from_choices", (SEEDS / "chess_h0.py").read_text())
    lm = SchemaLM(['{"move": "Ke9"}'] * 2)
    rollout = run_rollout(chess_program(code), puzzle(), lm=lm, metric=chess_metric, sample=0, rollout_id=3)
    assert rollout.score == 0.0 and rollout.error and "Ke9" in rollout.error


def test_the_answer_is_decoded_as_a_number_and_scored_as_one():
    code = edit("numeric_answer", (SEEDS / "math_h0.py").read_text())
    program = HarnessProgram(HarnessSource("numeric", code).vouched(), GradeSchoolMath)
    example = dspy.Example(task_id="m0", question="What is 9 + 9?", answer="18").with_inputs("question")
    lm = SchemaLM(['{"answer": 18}'])
    rollout = run_rollout(program, example, lm=lm, metric=GSM8KDomain().metric, sample=0, rollout_id=1)
    assert rollout.score == 1.0 and rollout.prediction["answer"] == 18.0
    assert lm.schemas[0]["properties"]["answer"]["type"] == "number"
    assert 'ANSWER_VALUES = "choices"' in edit("answer_from_choices", code)  # switches the kind


def test_choices_without_a_tool_that_lists_them_is_refused():
    rollout = run_rollout(
        HarnessProgram(HarnessSource("c", edit("answer_from_choices", GOOD)).vouched(), QA),
        tasks(1)[0],
        lm=ScriptedLM([{"answer": "4"}]),
        metric=exact,
        sample=0,
        rollout_id=1,
    )
    assert rollout.score == 0.0 and "no tool lists the answer's values" in rollout.error


@pytest.mark.parametrize("wrapper", ["majority_vote", "verify_retry"])
def test_blocks_that_rerun_the_harness_refuse_episode_state_here_and_in_the_sandbox(wrapper):
    code = edit(wrapper, (SEEDS / "chess_h0.py").read_text())
    lm = ScriptedLM([{"move": "e4"}] * 10)
    here = run_rollout(chess_program(code), puzzle(), lm=lm, metric=chess_metric, sample=0, rollout_id=3)
    _, contained = SandboxedEvaluator(TEST_LIMITS).evaluate(
        HarnessProgram(HarnessSource("edited", code), ChessPuzzle, chess_program(code).tools_factory),
        EvalRequest([puzzle()], metric=chess_metric, lm=lm, k=1, namespace="state"),
    )
    for rollout in (here, *contained):
        assert "hold one episode's state" in rollout.error and "play_move" in rollout.error
        assert rollout.lm_calls == ()  # refused before any move was played
    assert f'"{STATEFUL_TOOL}"' in inspect.getsource(blocks.refuse_stateful)  # one name on both sides


VOTES = ("5", "4", "4", "3", "4")


def vote_rollouts(code: str, answers: tuple[str, ...] = VOTES) -> list:
    """The same answers, in order, in process and in the sandbox."""
    replies = [{"answer": a} for a in answers]
    program = HarnessProgram(HarnessSource("vote", code).vouched(), QA)
    here = run_rollout(program, tasks(1)[0], lm=ScriptedLM(replies), metric=exact, sample=0, rollout_id=7)
    _, contained = SandboxedEvaluator(TEST_LIMITS).evaluate(
        HarnessProgram(HarnessSource("vote", code), QA),
        EvalRequest(tasks(1), metric=exact, lm=ScriptedLM(replies).copy(rollout_id=7), k=1, namespace="vote"),
    )
    return [here, *contained]


def test_a_vote_trains_only_on_the_calls_of_the_sample_it_kept():
    for rollout in vote_rollouts(edit("majority_vote", GOOD)):
        assert rollout.score == 1.0 and rollout.turns == 5  # every vote stays in the trace and is charged
        kept = rollout.prediction[WINNING_SAMPLE]
        assert kept in [call.sampling["rollout_id"] for call in rollout.lm_calls]
        (example,) = sft_examples([rollout])
        assert "4" in example.completion and "5" not in example.completion and "3" not in example.completion


def test_nested_resampling_names_the_innermost_kept_sample():
    code = edit("verify_retry", edit("majority_vote", GOOD))  # a vote inside a retry
    for rollout in vote_rollouts(code, ("",) * 5 + ("4", "5", "4", "3", "5")):  # the first vote is empty
        assert rollout.score == 1.0 and rollout.turns == 10
        (example,) = sft_examples([rollout])  # the second attempt's first vote, and no other sample
        assert "4" in example.completion and rollout.lm_calls.index(rollout.answering_calls[0]) == 5
        assert len({call.sampling["rollout_id"] for call in rollout.lm_calls}) == 10  # ten samples, ten ids
