"""The harness changes issue 21 adds: few-shot demos from the harness's own accepted rollouts, the
harness's own sampling (capped by the sandbox), and retrieval tool blocks for search QA."""

from __future__ import annotations

import dataclasses
import inspect
import json
import random
import re
from pathlib import Path

import dspy
import pytest
from meta_harness_helpers import BROKEN, GOOD, QA, TOY, archive_with, exact, lm, source, tasks
from sandbox_helpers import TEST_LIMITS

from optimizers.engine.assembly import proposer_lm
from optimizers.harness.archive import CandidateMeta
from optimizers.harness.meta_harness import gold_fields
from optimizers.harness.proposers import MechanismProposer, MutationProposer, blocks
from optimizers.harness.proposers.demos import call_fields, demos_from
from optimizers.harness.proposers.diagnosis import indicated_edits, symptoms
from optimizers.harness.proposers.edits import EDITS_BY_NAME, FEW_SHOT_HYPOTHESIS, few_shot, set_constant
from optimizers.harness.proposers.mutation import refused_at_build
from whale_dspy.errors import ConfigError
from whale_dspy.evaluation import EvalRequest, evaluate
from whale_dspy.harness import HarnessProgram, HarnessSource
from whale_dspy.records import GROUP_SETTING, TASK_GROUP, LMCall, Rollout, ToolCall, group_key
from whale_dspy.rollouts import run_rollout
from whale_dspy.sandbox import SandboxedEvaluator
from whale_dspy.testing import FakeBackend, ScriptedLM

SEARCH = """
import dspy


class Lookup(dspy.Module):
    def __init__(self, search):
        super().__init__()
        self.search = search
        self.answer = dspy.Predict("passages, question -> answer")

    def forward(self, question):
        return self.answer(passages=self.search(query=question, k=1), question=question)


def build(signature, tools):
    return Lookup(tools["search"])
"""


def chat_call(user: str, completion: str, parsed: bool = True) -> LMCall:
    messages = ({"role": "system", "content": "Your input fields are ..."}, {"role": "user", "content": user})
    return LMCall(messages=messages, completion=completion, model="m", parsed=parsed)


def rollout(task: str, score: float, *calls: LMCall) -> Rollout:
    return Rollout(task, 0, 1, "h", None, {"question": task}, {"answer": "4"}, score, None, calls)


USER = (
    "[[ ## question ## ]]\nWhat is 2+2? #0\n\nRespond with the corresponding output fields, starting with "
    "the field `[[ ## answer ## ]]`, and then ending with the marker for `[[ ## completed ## ]]`."
)


def test_demos_are_the_fields_of_accepted_calls_only():
    good = chat_call(USER, "[[ ## answer ## ]]\n4\n\n[[ ## completed ## ]]")
    assert call_fields(good) == {"question": "What is 2+2? #0", "answer": "4"}
    as_json = chat_call(USER.replace("#0", "#1"), '{"answer": "4"}')
    assert call_fields(as_json) == {"question": "What is 2+2? #1", "answer": "4"}
    assert call_fields(chat_call(USER, "no markers here")) is None
    rollouts = [
        rollout("t0", 1.0, good),
        rollout("t1", 1.0, as_json),
        rollout("t2", 0.0, chat_call(USER.replace("#0", "#2"), "[[ ## answer ## ]]\n5")),  # rejected
        rollout("t3", 1.0, chat_call(USER.replace("#0", "#3"), "[[ ## answer ## ]]\n4", parsed=False)),
    ]
    demos = demos_from(rollouts, random.Random(0), tasks=5)
    assert [d["question"] for d in demos] == ["What is 2+2? #0", "What is 2+2? #1"]


def test_mutation_proposes_few_shot_demos_from_the_parents_own_successes(tmp_path):
    archive = archive_with(tmp_path / "archive", h0=GOOD)
    proposer = MutationProposer(seed=0)
    shots = next(
        s
        for seed in range(40)
        for s in MutationProposer(seed=seed).propose(archive, 3)
        if "few_shot" in s.name
    )
    assert proposer.label == "mutation" and "class WithDemos" in shots.code and "What is 2+2?" in shots.code
    program = HarnessProgram(shots.vouched(), QA)
    lm = ScriptedLM({"": {"answer": "4"}})
    seen = run_rollout(program, tasks(8)[7], lm=lm, metric=exact, sample=0, rollout_id=1)
    prompt = json.dumps(seen.lm_calls[0].messages)
    assert seen.score == 1.0 and prompt.count("What is 2+2? #") == 1 + len(demo_questions(shots.code))
    own = next(t for t in tasks(4) if t.question in demo_questions(shots.code))
    mine = run_rollout(program, own, lm=lm, metric=exact, sample=0, rollout_id=1)
    shown = json.dumps(mine.lm_calls[0].messages)
    assert shown.count(own.question) == 1  # a task never sees its own demo
    assert few_shot(shots.code, []) is None


WORKED = "Two and two make four."


def test_labeled_demos_show_a_reasoning_predictor_the_worked_solution_and_a_plain_one_the_answer(tmp_path):
    archive = archive_with(tmp_path / "archive", h0=GOOD)
    archive.record_labels({f"t{i}": {"answer": "4", "reasoning": WORKED} for i in range(4)})
    shots = next(
        s
        for seed in range(40)
        for s in MutationProposer(seed=seed).propose(archive, 3)
        if s.name.endswith("-labeled_demos")
    )
    assert "class WithDemos" in shots.code and WORKED in shots.code and len(demo_questions(shots.code)) == 3
    task = tasks(8)[7]
    plain = run_rollout(
        HarnessProgram(shots.vouched(), QA),
        task,
        lm=ScriptedLM({"": {"answer": "4"}}),
        metric=exact,
        sample=0,
        rollout_id=1,
    )
    plain_prompt = json.dumps(plain.lm_calls[0].messages)
    assert plain.score == 1.0 and plain_prompt.count("What is 2+2? #") == 4 and WORKED not in plain_prompt
    reasoning = dataclasses.replace(
        shots, code=shots.code.replace("dspy.Predict(", "dspy.ChainOfThought(")
    ).vouched()
    cot_lm = ScriptedLM({"": {"reasoning": "r", "answer": "4"}})
    seen = run_rollout(HarnessProgram(reasoning, QA), task, lm=cot_lm, metric=exact, sample=0, rollout_id=1)
    assert seen.score == 1.0 and json.dumps(seen.lm_calls[0].messages).count(WORKED) == 3
    own = next(t for t in tasks(4) if t.question in demo_questions(shots.code))
    mine = run_rollout(HarnessProgram(reasoning, QA), own, lm=cot_lm, metric=exact, sample=0, rollout_id=1)
    assert json.dumps(mine.lm_calls[0].messages).count(WORKED) == 2  # never its own worked solution


def demo_questions(code: str) -> set[str]:
    namespace: dict = {}
    exec(code.split("# Added by the mutation proposer (few_shot).")[1].split("\n\n\n")[0], namespace)
    return {demo["question"] for demo in namespace["DEMOS"]}


def test_the_harness_owns_its_sampling_up_to_the_sandbox_ceiling():
    greedy = EDITS_BY_NAME["greedy_decoding"].apply(GOOD, random.Random(0))
    longer = EDITS_BY_NAME["more_tokens"].apply(greedy, random.Random(0))
    assert "TEMPERATURE = 0.0" in longer and "MAX_TOKENS = 512" in longer
    huge = longer.replace("MAX_TOKENS = 512", "MAX_TOKENS = 100000")
    lm = ScriptedLM({"": {"answer": "4"}})
    program = HarnessProgram(HarnessSource("huge", huge), QA)
    _, contained = SandboxedEvaluator(TEST_LIMITS).evaluate(
        program,
        EvalRequest(tasks(2), metric=exact, lm=lm.copy(temperature=1.0, max_tokens=64), k=1, namespace="s"),
    )
    _, here = evaluate(
        program.vouched(),
        EvalRequest(tasks(2), metric=exact, lm=lm.copy(temperature=1.0, max_tokens=64), k=1, namespace="s"),
    )
    for rollout in contained:
        assert rollout.lm_calls[0].sampling["temperature"] == 0.0
        assert rollout.lm_calls[0].sampling["max_tokens"] == TEST_LIMITS.max_tokens  # capped by the parent
    assert [r.lm_calls[0].sampling["max_tokens"] for r in here] == [100000, 100000]  # vouched code: its own
    assert EDITS_BY_NAME["sampled_decoding"].apply(GOOD, random.Random(0)) is None  # nothing to undo


def test_retrieval_blocks_search_twice_or_with_a_rewritten_query():
    queries: list[str] = []

    def search(query: str, k: int = 1) -> str:
        """Search."""
        queries.append(query)
        return "[Bridge Page] text" if len(queries) == 1 else "[Answer Page] more"

    second = EDITS_BY_NAME["second_hop"].apply(SEARCH, random.Random(0))
    program = HarnessProgram(HarnessSource("hop", second).vouched(), QA, lambda ex: {"search": search})
    done = run_rollout(
        program, tasks(1)[0], lm=ScriptedLM({"": {"answer": "4"}}), metric=exact, sample=0, rollout_id=1
    )
    assert queries == ["What is 2+2? #0", "What is 2+2? #0 Bridge Page"]
    assert "[Answer Page]" in done.lm_calls[0].messages[-1]["content"]
    assert EDITS_BY_NAME["second_hop"].apply(second, random.Random(0)) is None  # once is enough

    queries.clear()
    rewrite = EDITS_BY_NAME["rewrite_query"].apply(SEARCH, random.Random(0))
    program = HarnessProgram(HarnessSource("rewrite", rewrite).vouched(), QA, lambda ex: {"search": search})
    lm = ScriptedLM({"## passages ##": {"answer": "4"}, "## question ##": {"keywords": "two plus two"}})
    done = run_rollout(program, tasks(1)[0], lm=lm, metric=exact, sample=0, rollout_id=1)
    assert queries == ["two plus two"] and done.turns == 2 and done.score == 1.0
    assert EDITS_BY_NAME["rewrite_query"].apply(GOOD, random.Random(0)) is None  # no search tool


def test_the_mechanism_proposer_applies_the_mechanism_a_small_lm_picks(tmp_path):
    archive = archive_with(tmp_path / "archive", h0=TOY)
    replies = [
        '{"mechanism": "instructions", "sentence": "Reply with the number only."}',
        '{"mechanism": "few_shot", "sentence": ""}',
        '{"mechanism": "not_in_the_list", "sentence": ""}',
    ]
    proposer = MechanismProposer(ScriptedLM(replies), seed=0)
    first, second = proposer.propose(archive, 3)
    assert 'INSTRUCTIONS = "Answer the question. Reply with the number only."' in first.code
    assert first.name == "c0000-instructions" and first.parent == "c0000"
    assert "class WithDemos" in second.code and second.hypothesis == FEW_SHOT_HYPOTHESIS
    usage = proposer.usage()
    assert usage.calls == 3 and len(usage.failures) == 1 and usage.tokens > 0  # the third answer was refused


@pytest.mark.parametrize("tried_in", ["this phase", "an earlier phase of the run"])
def test_the_mechanism_proposer_never_offers_code_its_run_tried(tmp_path, tried_in):
    with_cot = EDITS_BY_NAME["chain_of_thought"].apply(TOY, random.Random(0))
    archive = archive_with(tmp_path / "run" / "phase-001", [[source(with_cot)]], h0=TOY)
    if tried_in != "this phase":
        archive = archive_with(tmp_path / "run" / "phase-003", h0=TOY)
    assert archive.best(1)[0].name == "c0000"  # the reasoning variant fails to parse: h0 stays best
    proposer = MechanismProposer(ScriptedLM(['{"mechanism": "chain_of_thought", "sentence": ""}']), parents=1)
    assert proposer.propose(archive, 1) == []
    assert "chain_of_thought" in proposer.usage().failures[0]  # not on the menu: refused, not re-proposed


def test_few_shot_candidates_run_the_same_in_the_sandbox(tmp_path):
    archive = archive_with(tmp_path / "archive", h0=GOOD)
    shots = next(
        s
        for seed in range(40)
        for s in MutationProposer(seed=seed).propose(archive, 3)
        if "few_shot" in s.name
    )
    lm = ScriptedLM({"": {"answer": "4"}})
    request = EvalRequest(tasks(4), metric=exact, lm=lm, k=1, namespace="shots")
    _, contained = SandboxedEvaluator(TEST_LIMITS).evaluate(HarnessProgram(shots, QA), request)
    _, here = evaluate(HarnessProgram(shots.vouched(), QA), request)

    def prompts(rollouts):
        return sorted(json.dumps(r.lm_calls[0].messages) for r in rollouts)

    assert [r.error for r in contained] == [None] * 4 and prompts(contained) == prompts(here)


def test_a_proposer_on_the_served_model_needs_the_server_and_gets_its_lm():
    with pytest.raises(ConfigError, match="--server-url"):
        proposer_lm("served", None)
    assert proposer_lm("served", FakeBackend(ScriptedLM([]))).model == "base"


def illegal_move_rollout(task: str) -> Rollout:
    calls = (chat_call(USER, "[[ ## answer ## ]]\nKe9"),)
    refusal = "Illegal or unreadable move 'Ke9'; the episode continues."
    reply = ToolCall("play_move", {"move": "Ke9"}, result=refusal)
    return Rollout(task, 0, 1, "h", None, {"question": task}, {"answer": ""}, 0.0, None, calls, (reply,))


def test_the_traces_symptoms_and_the_edits_they_call_for():
    truncated = LMCall((), "a b", "m", completion_tokens=8, sampling={"max_tokens": 8})
    unparsed = rollout("t1", 0.0, chat_call(USER, "no markers", parsed=False))
    cut = Rollout("t2", 0, 1, "h", None, {}, {"answer": "4"}, 0.0, None, (truncated,))
    assert symptoms(illegal_move_rollout("t0")) == {"a tool rejected the answer", "the answer was empty"}
    assert symptoms(unparsed) == {"the output did not parse"}
    assert symptoms(cut) == {"a completion hit max_tokens"}
    assert symptoms(rollout("t3", 1.0, chat_call(USER, "[[ ## answer ## ]]\n4"))) == set()
    wrong = rollout("t4", 0.0, chat_call(USER, "[[ ## answer ## ]]\n5"))
    assert symptoms(wrong) == {"the answer was wrong"}
    sampled = dataclasses.replace(wrong.lm_calls[0], sampling={"temperature": 1.0})
    assert symptoms(dataclasses.replace(wrong, lm_calls=(sampled,))) == {
        "the answer was wrong",
        "a wrong answer was sampled",
    }
    called = indicated_edits([illegal_move_rollout("t0"), illegal_move_rollout("t1"), cut, wrong])
    assert called["answer_from_choices"] == "2 of 4 failing rollouts: a tool rejected the answer"
    assert called["more_tokens"] == "1 of 4 failing rollouts: a completion hit max_tokens"
    assert (
        called["labeled_demos"]
        == called["chain_of_thought"]
        == "1 of 4 failing rollouts: the answer was wrong"
    )


def test_guided_mutation_draws_the_edits_the_traces_call_for(tmp_path):
    archive = archive_with(tmp_path / "archive", h0=GOOD)
    traces = archive.folder("c0000") / "traces.jsonl"
    traces.write_text("".join(json.dumps(illegal_move_rollout(f"t{i}").to_dict()) + "\n" for i in range(4)))

    def drawn(guided: bool) -> list[HarnessSource]:
        return [MutationProposer(seed, guided=guided).propose(archive, 1)[0] for seed in range(100)]

    # Three edits are called for (choices, retry, fallback): about 0.5 / 3 + 0.5 / 20 of the draws
    # against 1 / 20 unguided.
    guided = [s for s in drawn(True) if s.name.endswith("-answer_from_choices")]
    unguided = [s for s in drawn(False) if s.name.endswith("-answer_from_choices")]
    assert len(guided) >= 15 and len(unguided) <= 8
    why = "called for by the traces: 4 of 4 failing rollouts: a tool rejected the answer"
    assert why in guided[0].hypothesis
    assert MutationProposer(guided=True).label == "guided" and MutationProposer().label == "mutation"


def test_an_edit_whose_candidate_failed_to_build_is_not_drawn_again(tmp_path):
    choices = EDITS_BY_NAME["answer_from_choices"]
    refused = source(
        BROKEN["raising_build"], hypothesis=f"{choices.hypothesis} (called for by the traces: x)"
    )
    archive = archive_with(tmp_path / "archive", [[refused]], h0=GOOD)
    assert archive.get("c0001").stage == "build"
    drawn = [s for seed in range(60) for s in MutationProposer(seed, guided=True).propose(archive, 3)]
    assert len(drawn) == 180 and not [s for s in drawn if s.name.endswith("-answer_from_choices")]
    fresh = archive_with(tmp_path / "fresh", h0=GOOD)  # without the failure the edit is drawn
    again = [s for seed in range(60) for s in MutationProposer(seed).propose(fresh, 3)]
    assert [s for s in again if s.name.endswith("-answer_from_choices")]


def test_a_labeled_demo_reaches_a_retrieval_predictor_and_never_its_own_task():
    from optimizers.harness.proposers.demos import labeled_demos

    own = Rollout("t0", 0, 1, "h", None, {"question": " What is 2+2? #0 "}, {"answer": "4"}, 0.0, None)
    other = Rollout("t1", 0, 1, "h", None, {"question": "What is 3+3?"}, {"answer": "6"}, 0.0, None)
    demos = labeled_demos([own, other], {"t0": {"answer": "4"}, "t1": {"answer": "6"}}, random.Random(0))
    assert demos[0]["question"] == " What is 2+2? #0 "  # the input as given: its own task is known
    code = few_shot(SEARCH, demos)
    program = HarnessProgram(
        HarnessSource("shots", code).vouched(), QA, lambda ex: {"search": lambda query, k=1: "[P] p"}
    )
    lm = ScriptedLM({"": {"answer": "4"}})
    task = dspy.Example(task_id="t0", question=" What is 2+2? #0 ", answer="4").with_inputs("question")
    shown = json.dumps(
        run_rollout(program, task, lm=lm, metric=exact, sample=0, rollout_id=1).lm_calls[0].messages
    )
    assert "What is 3+3?" in shown and shown.count("What is 2+2?") == 1  # the passages-less demo is shown
    assert "not supplied" in shown  # DSPy marks the demo's missing passages


def test_an_edit_stopped_by_a_limit_at_build_is_drawn_again():
    """A timeout or a memory stop says nothing of the edit (a busy machine may pass next time)."""
    hypothesis = EDITS_BY_NAME["answer_from_choices"].hypothesis
    stopped = CandidateMeta(
        "c0001", 1, "c0000", hypothesis, "mutation", "d1", "invalid", "build", reason="timeout"
    )
    assert refused_at_build([stopped]) == set()
    assert refused_at_build([dataclasses.replace(stopped, reason="crash")]) == {hypothesis}


def test_a_composed_candidate_that_failed_to_build_bans_neither_of_its_edits(tmp_path):
    choices = EDITS_BY_NAME["answer_from_choices"]
    refused = source(BROKEN["raising_build"], hypothesis=f"{choices.hypothesis}; then something else")
    archive = archive_with(tmp_path / "archive", [[refused]], h0=GOOD)
    assert archive.get("c0001").stage == "build"
    drawn = [s for seed in range(60) for s in MutationProposer(seed).propose(archive, 3)]
    assert [s for s in drawn if s.name.endswith("-answer_from_choices")]  # no one edit is to blame


def test_a_runs_later_harness_phase_offers_nothing_an_earlier_phase_tried(tmp_path):
    """WHALE gives each harness phase its own archive, and issue 56's SQuAD run at c706b76 offered
    the same three candidates in both of its phases. A later phase passes over every candidate its
    run's earlier phases archived and every edit that failed to build there; another run's phases
    and a search of its own do not count."""
    choices = EDITS_BY_NAME["answer_from_choices"]
    refused = source(BROKEN["raising_build"], hypothesis=f"{choices.hypothesis} (called for: x)")
    offered = MutationProposer(seed=1).propose(archive_with(tmp_path / "search", h0=GOOD), 3)
    archive_with(tmp_path / "run" / "phase-001", [[*offered, refused]], h0=GOOD)
    later = archive_with(tmp_path / "run" / "phase-003", h0=GOOD)
    elsewhere = archive_with(tmp_path / "other" / "phase-003", h0=GOOD)
    assert [s.digest for s in MutationProposer(seed=1).propose(elsewhere, 3)] == [s.digest for s in offered]
    again = MutationProposer(seed=1).propose(later, 3)
    assert len(again) == 3 and not {s.digest for s in again} & {s.digest for s in offered}
    archive_with(tmp_path / "run" / "phase-005", [again], h0=GOOD)  # a later phase's: not tried yet
    assert [s.digest for s in MutationProposer(seed=1).propose(later, 3)] == [s.digest for s in again]
    drawn = {
        name: [s.name for seed in range(40) for s in MutationProposer(seed, guided=True).propose(archive, 3)]
        for name, archive in (("later", later), ("elsewhere", elsewhere))
    }
    assert not [name for name in drawn["later"] if name.endswith("-answer_from_choices")]
    assert [name for name in drawn["elsewhere"] if name.endswith("-answer_from_choices")]


def grouped_tasks(n: int, groups: str = "AABB") -> list[dspy.Example]:
    """tasks(n) with a task group each (t0, t1 in A; t2, t3 in B; the rest by `groups` again)."""
    return [
        dspy.Example(**task.toDict(), task_group=groups[i % len(groups)]).with_inputs("question")
        for i, task in enumerate(tasks(n))
    ]


def grouped_shots(tmp_path) -> HarnessSource:
    archive = archive_with(tmp_path / "archive", h0=GOOD)
    archive.record_labels({t.task_id: gold_fields(t) for t in grouped_tasks(4)})
    return next(
        s
        for seed in range(40)
        for s in MutationProposer(seed=seed).propose(archive, 3)
        if s.name.endswith("-few_shot") and len(demo_questions(s.code)) == 3
    )


def shown_demos(rollout: Rollout) -> set[str]:
    prompt = json.dumps(rollout.lm_calls[0].messages)
    return {f"#{i}" for i in range(4) if f"What is 2+2? #{i}" in prompt} - {
        "#" + str(rollout.inputs["question"]).rsplit("#", 1)[1]
    }


def test_a_demo_is_never_shown_to_a_task_of_its_group(tmp_path):
    """SQuAD's search tasks cluster by article: a demo from one of an article's questions must not
    lend the others its passage, in process and in the sandbox alike."""
    shots = grouped_shots(tmp_path)
    demos = {q.rsplit("#", 1)[1] for q in demo_questions(shots.code)}
    unseen = grouped_tasks(8)[4:]  # t4, t5 in A; t6, t7 in B: never demos themselves
    lm = ScriptedLM({"": {"answer": "4"}})
    request = EvalRequest(unseen, metric=exact, lm=lm, k=1, namespace="grouped")
    _, here = evaluate(HarnessProgram(shots.vouched(), QA), request)
    _, contained = SandboxedEvaluator(TEST_LIMITS).evaluate(HarnessProgram(shots, QA), request)
    for rollouts in (here, contained):
        assert [r.error for r in rollouts] == [None] * 4
        by_task = {r.task_id: shown_demos(r) for r in rollouts}
        assert by_task["t4"] == by_task["t5"] == {f"#{d}" for d in demos if d in "23"}
        assert by_task["t6"] == by_task["t7"] == {f"#{d}" for d in demos if d in "01"}
    ungrouped = run_rollout(
        HarnessProgram(shots.vouched(), QA), tasks(8)[7], lm=lm, metric=exact, sample=0, rollout_id=1
    )
    assert shown_demos(ungrouped) == {f"#{d}" for d in demos}  # a task without a group sees them all


BLOCK_BEFORE_B390821 = (Path(__file__).parent / "data" / "few_shot_block_214d879.txt").read_text().rstrip()
"""The few-shot block as candidates written before b390821 hold it (optimizers/harness/proposers/blocks.py
at 214d879's own_task, set_demos and WithDemos, in the order wrap_build wrote them)."""


def written_before_groups(code: str) -> str:
    """A few-shot candidate of today as the block before b390821 wrote it: no group knobs, the old parts."""
    code = re.sub(r"\n(DEMO_GROUP|GROUP_SETTING) = .*", "", code)
    start, end = code.index("def own_task("), code.index("\n\n\ndef build(signature, tools)")
    return code[:start] + BLOCK_BEFORE_B390821 + code[end:]


def test_new_demos_on_a_parent_with_an_older_few_shot_block_bring_the_block_up_to_date(tmp_path):
    old = written_before_groups(grouped_shots(tmp_path).code)
    lm = ScriptedLM({"": {"answer": "4"}})
    a, b = grouped_tasks(8)[4], grouped_tasks(8)[6]

    def shown(code: str) -> dict[str, bool]:
        program = HarnessProgram(HarnessSource("shots", code).vouched(), QA)
        seen = {
            t.task_group: run_rollout(program, t, lm=lm, metric=exact, sample=0, rollout_id=1) for t in (a, b)
        }
        return {group: "What is 3+3?" in json.dumps(r.lm_calls[0].messages) for group, r in seen.items()}

    demos = [{"question": "What is 3+3?", "answer": "6", blocks.DEMO_GROUP: group_key("A")}]
    assert shown(set_constant(old, "DEMOS", demos)) == {"A": True, "B": True}  # the old block leaks
    code = few_shot(old, demos)
    assert shown(code) == {"A": False, "B": True}
    assert code.count(inspect.getsource(blocks.own_task).rstrip()) == 1 and "(demo, inputs)" not in code
    knobs = code.index('DEMO_GROUP = "_task_group"\nGROUP_SETTING = "whale_task_group"\n')
    assert code.index("DEMOS = ") < knobs < code.index("def own_task(")


LM_WRITTEN_DEMOS = """
import dspy

DEMOS = [{"question": "What is 5+5?", "answer": "10"}]


class WithDemos(dspy.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.inner.demos = [dspy.Example(**demo) for demo in DEMOS]

    def forward(self, **inputs):
        return self.inner(**inputs)


def build(signature, tools):
    return WithDemos(dspy.Predict(signature))
"""


def test_new_demos_on_a_few_shot_block_of_its_own_only_set_its_demos():
    """A WithDemos written by an LM (no own_task, no set_demos) is not ours to replace: it would fail
    to build, and a failed build bans the edit for the rest of the run."""
    code = few_shot(LM_WRITTEN_DEMOS, [{"question": "What is 3+3?", "answer": "6"}])
    assert code == LM_WRITTEN_DEMOS.replace(
        '[{"question": "What is 5+5?", "answer": "10"}]', "[{'question': 'What is 3+3?', 'answer': '6'}]"
    )
    seen = run_rollout(
        HarnessProgram(HarnessSource("lm", code).vouched(), QA),
        tasks(1)[0],
        lm=lm(),
        metric=exact,
        sample=0,
        rollout_id=1,
    )
    assert seen.error is None and "What is 3+3?" in json.dumps(seen.lm_calls[0].messages)


def test_labeled_demos_name_their_tasks_group_and_never_show_it_as_a_field():
    from optimizers.harness.proposers.demos import labeled_demos

    runs = [rollout(f"t{i}", 0.0) for i in range(4)]
    labels = {t.task_id: gold_fields(t) for t in grouped_tasks(4)}
    demos = labeled_demos(runs, labels, random.Random(0), tasks=4)
    assert [d.get(blocks.DEMO_GROUP) for d in demos] == [group_key(g) for g in "AABB"]
    assert all(TASK_GROUP not in d for d in demos)
    plain = labeled_demos(runs, {t: {"answer": "4"} for t in labels}, random.Random(0), tasks=4)
    assert all(blocks.DEMO_GROUP not in d for d in plain)


def test_a_group_keys_the_same_from_the_example_and_from_its_recorded_labels():
    group = ("repo", "x")
    assert group_key(group) == group_key(json.loads(json.dumps(group))) != group_key(("repo", "y"))
    assert group_key(None) is None


def test_a_contained_call_of_a_program_keeps_its_groups_demos_out_as_a_trusted_one_does(tmp_path):
    shots = grouped_shots(tmp_path)
    task = grouped_tasks(8)[4]  # group A
    lm = ScriptedLM({"": {"answer": "4"}})
    prompts = {}
    for name, harness in (("contained", shots), ("trusted", shots.vouched())):
        lm.history.clear()
        with dspy.context(lm=lm, **{GROUP_SETTING: group_key(task.task_group)}):
            assert HarnessProgram(harness, QA)(question=task.question).answer == "4"
        prompts[name] = json.dumps(lm.history[-1]["messages"])
    demos = {q.rsplit("#", 1)[1] for q in demo_questions(shots.code)}
    assert {d for d in demos if f"#{d}" in prompts["contained"]} == {d for d in demos if d in "23"}
    assert prompts["contained"] == prompts["trusted"]
