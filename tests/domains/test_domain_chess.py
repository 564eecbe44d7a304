"""Chess verifier and interactive env on hand-made Lichess-format puzzles."""

from __future__ import annotations

import dspy
import pytest

from domains import get_domain
from domains.chess_puzzles import puzzle_example
from harness_programs import seed_harness
from whale_dspy.errors import ConfigError
from whale_dspy.harness import HarnessProgram
from whale_dspy.testing import ScriptedLM

# Lichess row 0fYUn: after black's Rxa3, white mates in 2 with Rd8+ Rxd8 Rxd8#.
MATE_IN_2 = {
    "PuzzleId": "0fYUn",
    "FEN": "1r4k1/5ppp/p7/8/1P1R4/P1r4P/3R2P1/6K1 b - - 0 27",
    "Moves": "c3a3 d4d8 b8d8 d2d8",
    "Rating": "399",
    "Themes": "backRankMate endgame mate mateIn2",
}
# Hand-made: after black's Kh8, both Ra8# and Rb8# mate; the recorded solution is Ra8#.
TWO_MATES = {
    "PuzzleId": "handmade",
    "FEN": "6k1/6pp/8/8/8/8/8/RR4K1 b - - 0 1",
    "Moves": "g8h8 a1a8",
    "Rating": "400",
    "Themes": "mate mateIn1 oneMove",
}


@pytest.fixture(scope="module")
def domain():
    return get_domain("chess")


def score(domain, row, answer):
    return domain.metric(puzzle_example(row), dspy.Prediction(answer=answer))


def test_example_starts_after_the_opponents_first_move():
    example = puzzle_example(MATE_IN_2)
    assert example.side_to_move == "white"
    assert example.last_move == "Rxa3 (c3a3)"
    assert set(example.inputs().keys()) == {"fen", "side_to_move", "last_move"}
    assert example.answer == "d4d8 d2d8"


@pytest.mark.parametrize(
    "answer", ["d4d8 d2d8", "Rd8+ Rxd8#", "d4d8, Rxd8#", "1. Rd8+ 2. Rxd8#", "Rd8+ Rxd8# extra words"]
)
def test_full_line_in_uci_or_san_counts(domain, answer):
    assert score(domain, MATE_IN_2, answer) == 1.0


@pytest.mark.parametrize("answer", ["d4d8", "d4d5 d2d8", "Qd1", "nonsense", "", "d2d8 d4d8"])
def test_partial_wrong_or_illegal_lines_fail(domain, answer):
    assert score(domain, MATE_IN_2, answer) == 0.0


def test_any_mating_move_solves_a_mate_in_one(domain):
    assert score(domain, TWO_MATES, "Ra8#") == 1.0
    assert score(domain, TWO_MATES, "b1b8") == 1.0
    assert score(domain, TWO_MATES, "Rb7") == 0.0


def test_metric_never_raises_on_missing_answers(domain):
    example = puzzle_example(MATE_IN_2)
    assert domain.metric(example, None) == 0.0
    assert domain.metric(example, dspy.Prediction(move="d4d8")) == 0.0
    assert domain.metric(example, {"answer": "d4d8 d2d8"}) == 1.0


def test_env_reports_illegal_moves_and_continues_to_a_solution(domain):
    tools = domain.tools(puzzle_example(MATE_IN_2))
    view = tools["observe_board"]()
    assert "Side to move: white" in view and "Rd8+" in view
    assert tools["play_move"]("Qd1").startswith("Illegal")
    reply = tools["play_move"]("Rd8+")
    assert reply.startswith("Correct") and "Rxd8" in reply and "episode is over" not in reply
    assert "Puzzle solved" in tools["play_move"]("d2d8")
    assert tools["play_move"]("Kh2").startswith("The episode is over")
    assert "Puzzle: solved" in tools["observe_board"]()


def test_env_wrong_legal_move_ends_the_episode_and_tools_are_fresh(domain):
    example = puzzle_example(MATE_IN_2)
    first, second = domain.tools(example), domain.tools(example)
    assert first["play_move"]("d4d5").startswith("Wrong move")
    assert first["play_move"]("d4d8").startswith("The episode is over")
    assert second["play_move"]("d4d8").startswith("Correct")


def test_env_tools_wrap_as_dspy_tools(domain):
    tool = dspy.Tool(domain.tools(puzzle_example(MATE_IN_2))["play_move"])
    assert tool.name == "play_move" and set(tool.args) == {"move"} and tool.desc


def test_rating_and_theme_filters(domain):
    easy = get_domain("chess", themes="mateIn1", max_rating=800).load("train")
    assert easy and all("mateIn1" in ex.themes.split() and ex.rating <= 800 for ex in easy)
    assert all(ex.rating <= 1500 for ex in domain.load("val", limit=200))


def test_unknown_theme_lists_the_valid_ones():
    with pytest.raises(ConfigError, match="mateIn1"):
        get_domain("chess", themes="mateInOne").load("train")


def test_the_seed_harness_called_as_a_plain_program_answers_a_new_position(domain):
    example = puzzle_example(MATE_IN_2)
    program = HarnessProgram(
        seed_harness("chess_h0"), domain.signature, domain.tools, lm=ScriptedLM([{"move": "e4"}])
    )
    inputs = {name: example[name] for name in example.inputs()}  # what a user has: no solution line
    assert "line" not in inputs
    illegal = program(**inputs)
    assert illegal.answer == ""  # e4 is not legal here: the seed stops without a move
    program = program.with_lm(ScriptedLM([{"move": "Rd8+"}, {"move": "Rxd8#"}]))
    assert program(**inputs).answer == "Rd8+"  # one move, unchecked: there is no solution to reply from
