"""Seed harnesses: loadable from source by path, standalone, and scored end to end with DummyLM."""

from __future__ import annotations

import ast
import sys

import chess
import dspy
import pytest
from dspy.utils import DummyLM

from domains import DOMAIN_HELP, DOMAINS, domain_entry, get_domain
from harness_programs import seed_harness, seed_harness_path, seed_harness_stems
from whale_dspy.errors import ConfigError
from whale_dspy.harness import load_build

ALLOWED_IMPORTS = {"dspy", "chess", "__future__"}


def build_seed(domain, example):
    build = load_build(seed_harness(domain_entry(domain.name).seed_harness))
    return build(domain.signature, domain.tools(example))


def run(program, example, replies):
    lm = DummyLM(replies)
    with dspy.context(lm=lm):
        return program(**example.inputs()), lm


def test_every_domain_names_a_seed_harness_that_exists_and_unknown_names_fail():
    assert {entry.seed_harness for entry in DOMAINS.values()} == set(seed_harness_stems())
    assert domain_entry("squad:score=f1").seed_harness == "search_h0"
    assert all(f"{name}: {entry.about}" in DOMAIN_HELP for name, entry in DOMAINS.items())
    with pytest.raises(ConfigError, match="chess_h0"):
        seed_harness_path("go")
    with pytest.raises(ConfigError, match="valid domains are chess, math"):
        domain_entry("go")


@pytest.mark.parametrize("stem", seed_harness_stems())
def test_seed_files_import_only_dspy_stdlib_chess_and_blocks(stem):
    tree = ast.parse(seed_harness_path(stem).read_text())
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        names += [node.module] if isinstance(node, ast.ImportFrom) else []
        for name in names:
            assert name in ALLOWED_IMPORTS or name.split(".")[0] in sys.stdlib_module_names, name


@pytest.mark.parametrize("name", ["math", "math500"])
def test_math_seed_answers_directly(name):
    domain = get_domain(name)
    example = domain.load("search", limit=1)[0]
    pred, lm = run(build_seed(domain, example), example, [{"answer": example.answer}])
    assert domain.metric(example, pred) == 1.0 and len(lm.history) == 1
    pred, _ = run(build_seed(domain, example), example, [{"answer": "I do not know"}])
    assert domain.metric(example, pred) == 0.0


@pytest.mark.parametrize("name", ["search", "squad"])
def test_search_seed_retrieves_one_passage_then_answers(name, tmp_path, monkeypatch):
    monkeypatch.setenv("WHALE_CACHE_DIR", str(tmp_path))
    domain = get_domain(name)
    example = domain.load("val", limit=1, seed=2)[0]
    pred, lm = run(build_seed(domain, example), example, [{"answer": example.answer}])
    assert domain.metric(example, pred) == 1.0
    prompt = lm.history[-1]["messages"][-1]["content"]
    expected = domain.tools(example)["search"](example.question, k=1)
    assert expected in prompt and example.question in prompt


def mate_puzzle(moves: int):
    return get_domain("chess", themes=f"mateIn{moves}").load("train", limit=1, seed=moves)[0]


def test_chess_seed_plays_the_whole_line_and_is_scored():
    domain = get_domain("chess", max_rating=None)
    example = mate_puzzle(2)
    solver_moves = example.answer.split()
    pred, lm = run(build_seed(domain, example), example, [{"move": move} for move in solver_moves])
    assert pred.answer.split() == solver_moves and domain.metric(example, pred) == 1.0
    assert len(lm.history) == len(solver_moves)
    assert example.last_move in lm.history[0]["messages"][-1]["content"]


def test_chess_seed_stops_after_a_wrong_move():
    domain = get_domain("chess", max_rating=None)
    example = mate_puzzle(2)
    board = chess.Board(example.fen)
    right = board.parse_uci(example.answer.split()[0])
    wrong = next(board.san(m) for m in board.legal_moves if m != right and not board.gives_check(m))
    pred, lm = run(build_seed(domain, example), example, [{"move": wrong}, {"move": "unused"}])
    assert pred.answer == wrong and domain.metric(example, pred) == 0.0 and len(lm.history) == 1


def test_chess_seed_stops_on_an_illegal_move():
    domain = get_domain("chess")
    example = mate_puzzle(1)
    pred, lm = run(build_seed(domain, example), example, [{"move": "Ke9"}, {"move": "unused"}])
    assert pred.answer == "" and domain.metric(example, pred) == 0.0 and len(lm.history) == 1
