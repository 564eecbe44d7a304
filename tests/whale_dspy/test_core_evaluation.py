"""The evaluator and rollout traces, driven by a scripted LM."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import dspy
import pytest

from whale_dspy.errors import ConfigError, HarnessError
from whale_dspy.evaluation import EvalReport, EvalRequest, evaluate
from whale_dspy.harness import HarnessProgram, HarnessSource
from whale_dspy.jsonl import append_jsonl, read_jsonl
from whale_dspy.records import Rollout
from whale_dspy.rollouts import task_id_of
from whale_dspy.stats import bootstrap_ci, paired_gain
from whale_dspy.testing.scripted_lm import ScriptedLM

SEARCH_HARNESS = """
import dspy

class Lookup(dspy.Module):
    def __init__(self, signature, tools):
        super().__init__()
        self.answer = dspy.Predict(signature)
        self.search = tools["search"]

    def forward(self, question):
        passage = self.search(query=question)
        return self.answer(question=question + " | " + passage)

def build(signature, tools):
    return Lookup(signature, tools)
"""


def search(query: str, k: int = 1) -> str:
    """Return the passage about the query."""
    return f"passage for {query}"


def exact(example, pred, trace=None) -> float:
    return float(pred.answer == example.answer)


@pytest.fixture
def program() -> HarnessProgram:
    source = HarnessSource(name="lookup", code=SEARCH_HARNESS).vouched()
    return HarnessProgram(source, dspy.Signature("question -> answer"), lambda example: {"search": search})


def tasks(n: int) -> list[dspy.Example]:
    return [
        dspy.Example(task_id=f"t{i}", question=f"q{i}?", answer=str(i)).with_inputs("question")
        for i in range(n)
    ]


def test_mean_at_k_pass_at_k_and_per_task_scores(program):
    # t0 always right, t1 right once in two samples, t2 never.
    lm = ScriptedLM(
        {"q0?": {"answer": "0"}, "q1?": [{"answer": "1"}, {"answer": "no"}], "q2?": {"answer": "x"}}
    )
    report, rollouts = evaluate(program, EvalRequest(tasks(3), metric=exact, lm=lm, k=2), threads=1)
    assert report.per_task == {"t0": [1.0, 1.0], "t1": [1.0, 0.0], "t2": [0.0, 0.0]}
    assert report.mean_at_k == pytest.approx((1 + 0.5 + 0) / 3)
    assert report.pass_at_k == pytest.approx(2 / 3)
    assert report.rollouts == 6 and report.tasks == 3 and len(rollouts) == 6
    assert report.ci_low <= report.mean_at_k <= report.ci_high


def test_k_samples_get_distinct_rollout_ids_and_the_trace_is_complete(program, tmp_path):
    lm = ScriptedLM({"q0?": {"answer": "0"}}).copy(temperature=0.7)
    trace_path = tmp_path / "traces.jsonl"
    _, rollouts = evaluate(
        program, EvalRequest(tasks(1), metric=exact, lm=lm, k=3, trace_path=trace_path), threads=2
    )
    assert len({r.rollout_id for r in rollouts}) == 3
    recorded = [Rollout.from_dict(row) for row in read_jsonl(trace_path)]
    assert sorted(r.rollout_id for r in recorded) == sorted(r.rollout_id for r in rollouts)
    first = recorded[0]
    assert first.tool_calls[0].name == "search" and first.tool_calls[0].result == "passage for q0?"
    call = first.lm_calls[0]
    assert "q0? | passage for q0?" in json.dumps(call.messages)
    assert "[[ ## answer ## ]]" in call.completion
    assert call.sampling["temperature"] == 0.7  # the LM's own: evaluate has no sampling of its own
    assert call.sampling["rollout_id"] == first.rollout_id
    assert first.prediction == {"answer": "0"} and first.score == 1.0


def test_an_evaluation_may_override_the_lms_sampling(program):
    lm = ScriptedLM({"q0?": {"answer": "0"}}).copy(temperature=0.7)
    _, rollouts = evaluate(
        program,
        EvalRequest(tasks(1), metric=exact, lm=lm, k=1, sampling={"temperature": 0.3, "max_tokens": 9}),
    )
    assert {"temperature": 0.3, "max_tokens": 9}.items() <= rollouts[0].lm_calls[0].sampling.items()


def test_same_namespace_gives_same_rollout_ids_other_namespace_differs(program):
    lm = ScriptedLM({"q0?": {"answer": "0"}})
    ids = [
        sorted(
            r.rollout_id
            for r in evaluate(program, EvalRequest(tasks(1), metric=exact, lm=lm, k=2, namespace=ns))[1]
        )
        for ns in ("a", "a", "b")
    ]
    assert ids[0] == ids[1] != ids[2]


def test_parse_failure_is_an_ordinary_zero_rollout_with_raw_completion(program):
    lm = ScriptedLM({"q0?": "I think the answer is 0"})
    report, [rollout] = evaluate(program, EvalRequest(tasks(1), metric=exact, lm=lm, k=1))
    assert rollout.score == 0.0 and not rollout.parsed
    assert "AdapterParseError" in rollout.error
    assert rollout.lm_calls[0].completion == "I think the answer is 0"
    assert report.parse_rate == 0.0


def test_raising_harness_and_raising_metric_score_zero_and_evaluation_goes_on():
    code = "import dspy\ndef build(signature, tools):\n    raise RuntimeError('boom')\n"
    broken = HarnessProgram(HarnessSource("broken", code).vouched(), dspy.Signature("question -> answer"))
    report, rollouts = evaluate(broken, EvalRequest(tasks(2), metric=exact, lm=ScriptedLM([]), k=1))
    assert report.mean_at_k == 0.0 and all("boom" in r.error for r in rollouts)

    def bad_metric(example, pred, trace=None):
        raise KeyError("gold")

    good = HarnessProgram(
        HarnessSource(
            "direct", "import dspy\ndef build(signature, tools):\n    return dspy.Predict(signature)\n"
        ).vouched(),
        dspy.Signature("question -> answer"),
    )
    _, [rollout] = evaluate(
        good, EvalRequest(tasks(1), metric=bad_metric, lm=ScriptedLM([{"answer": "0"}]), k=1)
    )
    assert rollout.score == 0.0 and "metric failed" in rollout.error


def test_bad_configuration_is_refused_before_work(program):
    with pytest.raises(ConfigError, match="k and threads"):
        evaluate(program, EvalRequest(tasks(1), metric=exact, lm=ScriptedLM([]), k=0))
    with pytest.raises(ConfigError, match="no LM"):
        evaluate(program, EvalRequest(tasks(1), metric=exact, k=1))


def test_harness_sources_that_do_not_parse_or_lack_build_are_refused():
    sig = dspy.Signature("question -> answer")
    with pytest.raises(HarnessError, match="does not parse"):
        HarnessProgram(HarnessSource("bad", "def build(:\n"), sig)
    with pytest.raises(HarnessError, match="defines no top-level"):
        HarnessProgram(HarnessSource("nobuild", "x = 1\n"), sig)
    lazy = HarnessProgram(
        HarnessSource("raises", "raise ValueError('x')\ndef build(s, t):\n    pass\n").vouched(), sig
    )
    with pytest.raises(HarnessError, match="failed to load"):
        lazy.build_for(dspy.Example())


def test_program_is_a_dspy_module_and_with_lm_never_mutates(program):
    lm = ScriptedLM({"q0?": {"answer": "0"}})
    bound = program.with_lm(lm, adapter_name="policy-r01-s0001")
    assert program.bound_lm is None and bound.adapter_name == "policy-r01-s0001"
    assert bound(question="q0?").answer == "0"
    assert bound.source.code == SEARCH_HARNESS


def test_bootstrap_ci_brackets_the_mean_and_is_seeded():
    values = [0.0, 1.0] * 20
    assert bootstrap_ci(values) == bootstrap_ci(values)
    low, high = bootstrap_ci(values)
    assert low < 0.5 < high
    assert bootstrap_ci([1.0] * 5) == (1.0, 1.0)


def report_of(per_task: dict[str, list[float]]) -> EvalReport:
    means = [sum(v) / len(v) for v in per_task.values()]
    low, high = bootstrap_ci(means)
    return EvalReport(
        k=1, tasks=len(per_task), rollouts=len(per_task), mean_at_k=sum(means) / len(means),
        ci_low=low, ci_high=high, pass_at_k=0.0, parse_rate=1.0, mean_turns=1.0,
        prompt_tokens=0, completion_tokens=0, seconds=1.0, per_task=per_task,
    )  # fmt: skip


def test_a_paired_gain_is_beyond_noise_where_two_separate_intervals_overlap():
    levels = [0.0, 0.5, 1.0, 0.25, 0.75] * 8
    before = report_of({f"t{i}": [level * 0.8] for i, level in enumerate(levels)})
    after = report_of({f"t{i}": [level * 0.8 + 0.1] for i, level in enumerate(levels)})
    assert after.ci_low < before.ci_high  # judged apart, the two evaluations look alike
    gain = paired_gain(before.per_task, after.per_task)
    assert gain.gain == pytest.approx(0.1) and gain.tasks == 40
    assert gain.low == pytest.approx(0.1) and gain.beyond_noise


def test_a_paired_gain_pairs_only_shared_tasks_and_says_when_it_is_noise():
    before = report_of({"a": [0.0, 1.0], "b": [1.0, 1.0], "c": [0.0, 0.0]})
    after = report_of({"b": [1.0, 0.0], "a": [1.0, 1.0], "d": [1.0, 1.0]})
    gain = paired_gain(before.per_task, after.per_task)
    assert gain.tasks == 2 and gain.gain == pytest.approx(0.0)
    assert gain.low < 0 < gain.high and not gain.beyond_noise
    assert gain.to_dict()["beyond_noise"] is False
    with pytest.raises(ConfigError, match="share"):
        paired_gain(before.per_task, {"z": [1.0]})


def test_completions_cut_at_their_max_tokens_are_counted_not_warned() -> None:
    import logging

    from whale_dspy.evaluation import summarize
    from whale_dspy.progress import TruncationCount
    from whale_dspy.records import LMCall

    def call(tokens: int, **sampling) -> LMCall:
        return LMCall((), "x", "m", completion_tokens=tokens, sampling=sampling)

    calls = (call(128, max_tokens=128), call(12, max_tokens=128), call(400))  # the last had no cap
    rollouts = [Rollout(f"t{i}", 0, i, "h", None, {}, {}, 0.0, None, calls) for i in range(2)]
    assert summarize(rollouts, k=1, seconds=1.0).truncated_calls == 2

    def record(message: str) -> logging.LogRecord:
        return logging.LogRecord("dspy.clients.lm", logging.WARNING, __file__, 1, message, None, None)

    counted = TruncationCount()
    assert not counted.filter(record("LM response was truncated; increase max_tokens or inspect history."))
    assert counted.filter(record("some other warning")) and counted.count == 1


def test_an_interrupted_evaluation_given_its_trace_runs_only_the_rest(program, tmp_path):
    whole = tmp_path / "whole.jsonl"
    answers = {"q0?": {"answer": "0"}, "q1?": {"answer": "no"}, "q2?": {"answer": "2"}}
    full, _ = evaluate(
        program, EvalRequest(tasks(3), metric=exact, lm=ScriptedLM(answers), k=2, trace_path=whole), threads=1
    )
    recorded = [Rollout.from_dict(row) for row in read_jsonl(whole)]
    first = sorted(recorded, key=lambda r: (r.task_id, r.sample))[:3]  # t0 both samples, t1 sample 0
    stranger = replace(first[0], task_id="t9")  # a task this evaluation does not hold: ignored
    trace = tmp_path / "resumed.jsonl"
    for rollout in first:
        append_jsonl(trace, rollout.to_dict())
    # Scripted for the three missing rollouts only: re-running a done one would exhaust it.
    rest = ScriptedLM({"q1?": [{"answer": "no"}], "q2?": [{"answer": "2"}, {"answer": "2"}]})
    report, rollouts = evaluate(
        program,
        EvalRequest(tasks(3), metric=exact, lm=rest, k=2, trace_path=trace, done=[*first, stranger]),
        threads=1,
    )
    assert all(r.error is None for r in rollouts)
    assert report.per_task == full.per_task and report.mean_at_k == full.mean_at_k
    assert (report.rollouts, report.resumed) == (6, 3)
    ids = lambda rollouts: sorted((r.task_id, r.sample, r.rollout_id) for r in rollouts)  # noqa: E731
    again = [Rollout.from_dict(row) for row in read_jsonl(trace)]
    assert ids(again) == ids(recorded)  # the uninterrupted evaluation's rollout ids, each recorded once
    assert report.rollouts_per_second == pytest.approx(3 / report.seconds)  # only this call's rollouts


def plain_examples() -> list[dspy.Example]:
    """A DSPy user's data: no task_id field."""
    return [dspy.Example(question=f"q{i}?", answer=str(i)).with_inputs("question") for i in range(3)]


def test_examples_without_task_id_are_recorded_one_task_each(program):
    lm = ScriptedLM({"q0?": {"answer": "0"}, "q1?": {"answer": "1"}, "q2?": {"answer": "x"}})
    report, rollouts = evaluate(program, EvalRequest(plain_examples(), metric=exact, lm=lm, k=2), threads=1)
    assert report.tasks == 3 and len(report.per_task) == 3
    assert sorted(report.per_task.values()) == [[0.0, 0.0], [1.0, 1.0], [1.0, 1.0]]
    assert len({r.rollout_id for r in rollouts}) == 6


def test_a_derived_task_id_is_the_same_in_another_process_and_differs_between_examples():
    script = (
        "import dspy; from whale_dspy.rollouts import task_id_of; "
        "print(task_id_of(dspy.Example(question='q0?', answer='0').with_inputs('question')))"
    )
    other_process = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    ids = [task_id_of(e) for e in plain_examples()]
    assert other_process.stdout.strip() == ids[0]
    assert len(set(ids)) == 3 and all(ids)
    assert task_id_of(dspy.Example(question="q0?", task_id=7).with_inputs("question")) == "7"
