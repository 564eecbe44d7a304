"""The mutation catalogue on the seed harnesses and on a toy harness, and the MutationProposer."""

from __future__ import annotations

import ast
import random
from pathlib import Path
from typing import Any

import dspy
import pytest
from dspy.utils.callback import BaseCallback
from meta_harness_helpers import BROKEN, GOOD, QA, TOY, archive_with, exact, lm, source, student, tasks

from optimizers.harness.meta_harness import MetaHarness, MetaHarnessConfig
from optimizers.harness.proposers import EDITS, MutationProposer, set_output_adapter
from optimizers.harness.proposers.edits import EDITS_BY_NAME, FEW_SHOT_HYPOTHESIS
from optimizers.harness.proposers.mutation import clashes
from optimizers.harness.validation import check_imports, prompt_only_violation
from whale_dspy.errors import ConfigError
from whale_dspy.harness import HarnessProgram, HarnessSource, load_build
from whale_dspy.rollouts import run_rollout
from whale_dspy.testing.scripted_lm import ScriptedLM

SEEDS = Path(__file__).parents[3] / "harness_programs"
SEED_TOOLS = {
    "search": lambda query, k=1: "[t] text",
    "observe_board": lambda: "board",
    "legal_moves": lambda: ["e4"],
    "play_move": str,
}
EVERYWHERE = {
    "chain_of_thought",
    "majority_vote",
    "verify_retry",
    "answer_fallback",
    "instructions",
    "constrained_decoding_on",
    "greedy_decoding",
    "more_tokens",
    "answer_from_choices",
    "numeric_answer",
}
APPLIES = {
    "math_h0": EVERYWHERE,
    "search_h0": EVERYWHERE | {"more_passages", "second_hop", "rewrite_query"},
    "chess_h0": EVERYWHERE | {"more_turns", "fewer_turns"},
}  # fmt: skip


def apply(name: str, code: str, seed: int = 0) -> str | None:
    return EDITS_BY_NAME[name].apply(code, random.Random(seed))


@pytest.mark.parametrize("stem", sorted(APPLIES))
def test_every_edit_keeps_seed_harnesses_loadable(stem):
    code = (SEEDS / f"{stem}.py").read_text()
    applied = set()
    for edit in EDITS:
        new = edit.apply(code, random.Random(0))
        if new is None:
            continue
        applied.add(edit.name)
        assert new != code
        assert not check_imports(new)
        module = load_build(HarnessSource(f"{stem}_{edit.name}", new).vouched())(QA, SEED_TOOLS)
        assert isinstance(module, dspy.Module)
        assert (prompt_only_violation(code, new) is None) == edit.prompt_only
    assert applied == APPLIES[stem]


def run(code: str, replies, tools=None, question: str = "What is 2+2? #0"):
    program = HarnessProgram(
        HarnessSource("edited", code).vouched(), QA, tools_factory=lambda ex: tools or {}
    )
    example = dspy.Example(task_id="t0", question=question, answer="4").with_inputs("question")
    return run_rollout(program, example, lm=ScriptedLM(replies), metric=exact, sample=0, rollout_id=7)


def test_chain_of_thought_replaces_predict():
    new = apply("chain_of_thought", GOOD)
    assert "dspy.ChainOfThought(signature" in new and "dspy.Predict(" not in new
    assert run(new, [{"reasoning": "2+2", "answer": "4"}]).score == 1.0


def test_majority_vote_samples_distinct_answers_and_keeps_every_call_in_the_trace():
    rollout = run(apply("majority_vote", GOOD), [{"answer": a} for a in ("5", "4", "4", "3", "4")])
    assert rollout.prediction["answer"] == "4" and rollout.score == 1.0
    assert rollout.turns == 5


def test_majority_vote_samples_under_distinct_seeds_on_a_seeded_server():
    """A seeded sampler returns the same completion for the same prompt and seed: five votes
    under one seed would be one answer five times."""

    class SeedLog(BaseCallback):
        def __init__(self) -> None:
            self.seeds: list[int] = []

        def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
            self.seeds.append(instance.kwargs.get("seed"))

    program = HarnessProgram(
        HarnessSource("edited", apply("majority_vote", GOOD)).vouched(), QA, tools_factory=dict
    )
    example = dspy.Example(task_id="t0", question="What is 2+2? #0", answer="4").with_inputs("question")
    replies = [{"answer": a} for a in ("5", "4", "4", "3", "4")]
    log = SeedLog()
    with dspy.context(callbacks=[log]):
        rollout = run_rollout(
            program, example, lm=ScriptedLM(replies), metric=exact, sample=0, rollout_id=7, seed=7
        )
    assert len(log.seeds) == 5 and len(set(log.seeds)) == 5 and 7 not in log.seeds  # the first vote too
    assert [call.sampling["seed"] for call in rollout.lm_calls] == log.seeds  # the trace tells the truth


def test_verify_retry_uses_the_validator_tool():
    tools = {"check_answer": lambda answer: "correct" if answer == "4" else "incorrect"}
    rollout = run(apply("verify_retry", GOOD), [{"answer": "5"}, {"answer": "4"}], tools=tools)
    assert rollout.score == 1.0 and rollout.turns == 2
    assert [call.result for call in rollout.tool_calls] == ["incorrect", "correct"]


def test_answer_fallback_reads_the_raw_completion_after_a_parse_failure():
    assert run(GOOD, ["The answer is 4", "The answer is 4"]).error  # the seed fails to parse
    rollout = run(apply("answer_fallback", GOOD), ["The answer is 4", "The answer is 4"])
    assert rollout.error is None and rollout.score == 1.0


def test_constrained_decoding_switches_to_json_and_back():
    on = apply("constrained_decoding_on", GOOD)
    rollout = run(on, ['{"answer": "4"}'])
    assert rollout.score == 1.0 and "JSON" in str(rollout.lm_calls[0].messages)
    off = set_output_adapter(on, "chat")
    assert 'OUTPUT_ADAPTER = "chat"' in off and apply("constrained_decoding_off", off) is None
    assert run(off, [{"answer": "4"}]).score == 1.0
    assert apply("constrained_decoding_on", off) == on and apply("constrained_decoding_on", on) is None


def test_knob_and_instruction_edits_change_only_their_constant():
    assert "MAX_TURNS = 4" in apply("more_turns", TOY) and "MAX_TURNS = 2" in apply("fewer_turns", TOY)
    assert apply("more_passages", TOY) is None  # no TOP_K
    new = apply("instructions", TOY, seed=3)
    assert prompt_only_violation(TOY, new) is None
    assert ast.literal_eval(ast.parse(new).body[3].value) != "Answer the question."


def test_wrappers_stack_into_one_readable_file():
    code = apply("answer_fallback", apply("majority_vote", GOOD))
    names = [n.name for n in ast.parse(code).body if isinstance(n, ast.FunctionDef | ast.ClassDef)]
    assert names.count("run_sample") == 1 and names[-1] == "build"
    assert "_build_before_majority_vote" in names and "_build_before_answer_fallback" in names
    assert apply("majority_vote", code) is None  # already voting
    assert run(code, [{"answer": "4"}] * 5).score == 1.0


def test_mutation_proposer_is_seeded_and_picks_parents_from_the_best(tmp_path):
    archive = archive_with(tmp_path / "a", [[source(GOOD)]])
    first = MutationProposer(seed=1).propose(archive, 3)
    assert [s.code for s in first] == [s.code for s in MutationProposer(seed=1).propose(archive, 3)]
    assert len({s.digest for s in first}) == 3
    assert {s.parent for s in first} <= {m.name for m in archive.best(3)}
    hypotheses = {
        **{name: edit.hypothesis for name, edit in EDITS_BY_NAME.items()},
        "few_shot": FEW_SHOT_HYPOTHESIS,
    }
    assert all(s.hypothesis == hypotheses[s.name.split("-", 1)[1]] for s in first)
    others = [MutationProposer(seed=seed).propose(archive, 3) for seed in range(2, 6)]
    assert any([s.code for s in batch] != [s.code for s in first] for batch in others)


def test_composed_candidates_carry_two_different_edits_each_applied(tmp_path):
    archive = archive_with(tmp_path / "a", [[source(GOOD)]])
    proposed = MutationProposer(seed=1, guided=True, depth=2).propose(archive, 3)
    assert len(proposed) == 3 and len({s.digest for s in proposed}) == 3
    one_edit = {s.code for s in MutationProposer(seed=1, guided=True).propose(archive, 6)}
    for candidate in proposed:
        first, second = candidate.name.split("-", 1)[1].split("+")
        assert first != second and candidate.hypothesis.count("; then ") == 1
        assert candidate.code not in one_edit
        assert not check_imports(candidate.code)
        assert isinstance(load_build(candidate.vouched())(QA, SEED_TOOLS), dspy.Module)  # still builds
    with pytest.raises(ConfigError, match="depth"):
        MutationProposer(depth=0)


def test_composed_candidates_never_pair_two_edits_of_one_setting(tmp_path):
    archive = archive_with(tmp_path / "a", [[source(GOOD)]])
    temperature = {"greedy_decoding", "sampled_decoding"}
    catalogue = tuple(EDITS_BY_NAME[name] for name in (*sorted(temperature), "chain_of_thought"))
    pairs = [
        set(candidate.name.split("-", 1)[1].split("+"))
        for seed in range(6)
        for candidate in MutationProposer(seed=seed, depth=2, edits=catalogue).propose(archive, 3)
    ]
    assert any(pair & temperature for pair in pairs)
    for one_setting in (temperature, {"few_shot", "labeled_demos"}):  # the second would undo the first
        assert not any(one_setting <= pair for pair in pairs)


@pytest.mark.parametrize(
    "first, second",
    [
        ("greedy_decoding", "sampled_decoding"),  # one TEMPERATURE
        ("more_turns", "fewer_turns"),  # one MAX_TURNS
        ("greedy_decoding", "majority_vote"),  # five greedy samples: one answer five times
        ("greedy_decoding", "verify_retry"),  # a greedy retry repeats the answer it retries
        ("constrained_decoding_on", "numeric_answer"),  # the answer's adapter decides alone
        ("constrained_decoding_off", "answer_from_choices"),
        ("answer_from_choices", "numeric_answer"),
    ],
)
def test_edits_that_would_be_one_edit_together_clash(first, second):
    assert clashes(EDITS_BY_NAME[first], EDITS_BY_NAME[second])
    assert not clashes(EDITS_BY_NAME[first], EDITS_BY_NAME["chain_of_thought"])


@pytest.mark.parametrize("resampling", ["majority_vote", "verify_retry"])
def test_greedy_decoding_and_resampling_never_stack_across_generations(resampling, tmp_path):
    resampled, greedy = apply(resampling, GOOD), apply("greedy_decoding", GOOD)
    assert resampled and greedy  # each applies to a parent without the other
    assert apply("greedy_decoding", resampled) is None  # it would resample one greedy answer
    assert apply(resampling, greedy) is None
    sampled = apply("sampled_decoding", greedy)
    assert apply(resampling, sampled) is not None  # back at temperature 1 it has samples to use
    archive = archive_with(tmp_path / "a", [[source(resampled, resampling)]])
    catalogue = (EDITS_BY_NAME["greedy_decoding"], EDITS_BY_NAME["chain_of_thought"])
    parent = next(meta.name for meta in archive.candidates if meta.name != "c0000")
    proposers = [MutationProposer(seed, edits=catalogue) for seed in range(6)]
    offered = [s.name for proposer in proposers for s in proposer.propose(archive, 2)]
    assert f"{parent}-chain_of_thought" in offered and "c0000-greedy_decoding" in offered
    assert f"{parent}-greedy_decoding" not in offered


def test_composed_in_prompt_only_mode_makes_the_one_edit_it_has(tmp_path):
    archive = archive_with(tmp_path / "a")
    proposed = MutationProposer(seed=0, prompt_only=True, depth=2).propose(archive, 2)
    assert proposed and all(s.name.endswith("-instructions") for s in proposed)


def test_mutation_starts_from_h0_while_nothing_is_valid(tmp_path):
    archive = archive_with(tmp_path / "a", h0=BROKEN["raising_forward"])
    assert not archive.best(1)
    proposed = MutationProposer(seed=0).propose(archive, 2)
    assert len(proposed) == 2 and {s.parent for s in proposed} == {"c0000"}


def test_prompt_only_mutation_uses_instruction_edits_only(tmp_path):
    archive = archive_with(tmp_path / "a")
    proposed = MutationProposer(seed=0, prompt_only=True).propose(archive, 3)
    assert proposed and all(s.name.endswith("-instructions") for s in proposed)
    assert all(prompt_only_violation(TOY, s.code) is None for s in proposed)


def test_mutation_search_runs_end_to_end(tmp_path):
    config = MetaHarnessConfig.paper(candidates=3, tasks=4, min_iterations=1, patience=1, max_iterations=2)
    optimizer = MetaHarness(
        proposer=MutationProposer(seed=0), metric=exact, archive_dir=tmp_path / "a", lm=lm(), config=config
    )
    best = optimizer.compile(student(), trainset=tasks())
    assert best.report.iterations[1].candidates == 3
    assert best.report.best.scores.mean >= best.report.h0_score
