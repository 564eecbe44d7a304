"""The weight-phase loop on scripted LMs: the SFT data it builds, adapter names, rebinding, records."""

from __future__ import annotations

import itertools

import dspy
import pytest
from rft_helpers import QA, TWO_CALLS, contains_answer, make_rft, program, reply, tasks

from optimizers import RFTReport
from whale_dspy.jsonl import read_jsonl
from whale_dspy.records import Rollout, SFTExample


def chat_messages(signature: type[dspy.Signature], **inputs: str) -> tuple[dict, ...]:
    """What ChatAdapter sends for these inputs: the prompt an SFT example must carry."""
    return tuple(dspy.ChatAdapter().format(signature, demos=[], inputs=inputs))


def test_sft_data_is_every_call_of_the_accepted_rollouts_only(tmp_path):
    replies = {
        "QALPHA": [reply(answer="alpha"), reply(answer="wrong")],
        "QBETA": [reply(answer="wrong"), reply(answer="beta")],
    }
    rft, _, trainer = make_rft(replies, tmp_path)
    trainset = tasks("ALPHA", "BETA")
    signal, _ = next(rft.steps(program(), trainset))

    batch = rft.epoch(trainset).batch(0)
    expected = tuple(
        SFTExample(chat_messages(QA, question=e.question), reply(answer=e.answer)) for e in batch
    )
    assert len(trainer.calls) == 1
    assert trainer.calls[0].examples == expected
    assert (signal.accepted, signal.rollouts, signal.accept_rate, signal.mean_reward) == (2, 4, 0.5, 0.5)


def test_a_multi_call_rollout_gives_one_example_per_call_in_call_order(tmp_path):
    # Per task, sample 0 drafts then answers right; sample 1 drafts then answers wrong.
    replies = {
        key: [reply(draft=f"d0-{key}"), reply(answer=key[1:].lower()), reply(draft="d1"), reply(answer="no")]
        for key in ("QALPHA", "QBETA")
    }
    rft, _, trainer = make_rft(replies, tmp_path)
    trainset = tasks("ALPHA", "BETA")
    signal, _ = next(rft.steps(program(TWO_CALLS), trainset))
    assert signal.lm_calls == 2 * signal.rollouts > 0  # what a step costs the server, beside the budget

    draft_sig = dspy.Signature("question -> draft")
    final_sig = QA.append("draft", dspy.InputField(), type_=str)
    expected = []
    for e in rft.epoch(trainset).batch(0):
        draft = f"d0-Q{e.task_id}"
        expected += [
            SFTExample(chat_messages(draft_sig, question=e.question), reply(draft=draft)),
            SFTExample(chat_messages(final_sig, question=e.question, draft=draft), reply(answer=e.answer)),
        ]
    assert trainer.calls[0].examples == tuple(expected)


def test_a_completion_the_adapter_could_not_parse_is_kept_in_the_trace_but_never_trained_on(tmp_path):
    # Sample 0 first answers outside ChatAdapter's format; DSPy retries with its JSON adapter,
    # which succeeds, so the rollout is accepted. Sample 1 answers wrong in format.
    malformed, retried = "alpha, I am fairly sure", '{"answer": "alpha"}'
    rft, _, trainer = make_rft(
        {"QALPHA": [malformed, retried, reply(answer="wrong")]}, tmp_path, batch_size=1
    )
    next(rft.steps(program(), tasks("ALPHA")))

    (examples,) = [call.examples for call in trainer.calls]
    assert [e.completion for e in examples] == [retried]
    traced = [
        Rollout.from_dict(row) for row in read_jsonl(tmp_path / "run" / "traces" / "rft" / "step-0000.jsonl")
    ]
    accepted = next(r for r in traced if r.score == 1.0)
    assert [(c.completion, c.parsed) for c in accepted.lm_calls] == [(malformed, False), (retried, True)]


def test_each_step_trains_a_new_name_from_the_last_adapter_and_rebinds_the_program(tmp_path):
    rft, backend, trainer = make_rft(
        {"base": reply(answer="alpha from base"), "policy-r01-s0000": reply(answer="alpha from s0")},
        tmp_path,
        keyed_by="model",
        metric=contains_answer,
        batch_size=1,
        k=3,
    )
    stepped = list(itertools.islice(rft.steps(program(), tasks("ALPHA")), 2))

    names = [call.name for call in trainer.calls]
    assert names == ["policy-r01-s0000", "policy-r01-s0001"]
    assert [call.parent.name if call.parent else None for call in trainer.calls] == [None, names[0]]
    assert backend.load_order == names
    assert [prog.adapter_name for _, prog in stepped] == names
    assert [signal.adapter.name for signal, _ in stepped] == names
    # Step 1 sampled from the step-0 adapter: its rollouts say so, and its completions are that script's.
    step1 = [Rollout.from_dict(d) for d in read_jsonl(rft.run_dir.path / "traces/rft/step-0001.jsonl")]
    assert {r.adapter for r in step1} == {names[0]}
    assert {r.lm_calls[0].model for r in step1} == {names[0]}
    assert [ex.completion for ex in trainer.calls[0].examples] == [reply(answer="alpha from base")] * 3
    assert [ex.completion for ex in trainer.calls[1].examples] == [reply(answer="alpha from s0")] * 3


def test_compile_returns_a_new_program_with_a_report_and_leaves_the_student_alone(tmp_path):
    replies = {"QALPHA": reply(answer="alpha"), "QBETA": reply(answer="beta")}  # every sample right
    rft, _, trainer = make_rft(replies, tmp_path, steps=3)
    student = program()
    compiled = rft.compile(student, trainset=tasks("ALPHA", "BETA"))

    assert student.adapter_name is None and student.bound_lm is None
    assert compiled is not student
    assert isinstance(compiled.report, RFTReport) and compiled.report is rft.report
    assert [s.step for s in rft.report.steps] == [0, 1, 2]
    assert rft.report.final_adapter.name == trainer.calls[-1].name == compiled.adapter_name
    assert rft.report.rollouts == 3 * 2 * 2
    assert [s.train_loss for s in rft.report.steps] == [1.0, 1 / 2, 1 / 3]  # FakeTrainer's losses


def test_every_step_is_an_event_with_its_traces_and_distinct_rollout_ids(tmp_path):
    replies = {"QALPHA": reply(answer="alpha"), "QBETA": reply(answer="nope")}
    rft, _, _ = make_rft(replies, tmp_path, steps=2)
    rft.compile(program(), trainset=tasks("ALPHA", "BETA"))

    events = rft.run_dir.events("rft_step")
    assert [e["step"] for e in events] == [0, 1]
    assert [e["accepted"] for e in events] == [2, 2]
    assert all(e["sft_examples"] == 2 and e["skipped"] is None for e in events)
    ids = []
    for step in (0, 1):
        rollouts = list(read_jsonl(rft.run_dir.path / f"traces/rft/step-{step:04d}.jsonl"))
        assert len(rollouts) == 4
        ids += [r["rollout_id"] for r in rollouts]
    assert len(set(ids)) == len(ids)
    adapters = sorted(p.name for p in (rft.run_dir.path / "adapters").iterdir())
    assert adapters == [e["adapter"]["name"] for e in events]


def answer_as_score(example: dspy.Example, pred: dspy.Prediction, trace: object = None) -> float:
    """A partial-credit metric (as squad's f1): the answer is the score."""
    return float(pred.answer)


@pytest.mark.parametrize(
    ("threshold", "alpha", "beta", "kept"),
    [
        # Per threshold: a score at it, two just above, one between 0 and it (0.6 also sits above 0.5).
        (0.3, ("0.3", "0.35"), ("0.25", "0.31"), ("0.31", "0.35")),
        (0.6, ("0.6", "0.65"), ("0.55", "0.7"), ("0.65", "0.7")),
    ],
)
def test_the_weight_phase_trains_on_rollouts_scored_strictly_above_its_threshold(
    tmp_path, threshold, alpha, beta, kept
):
    replies = {"QALPHA": [reply(answer=a) for a in alpha], "QBETA": [reply(answer=b) for b in beta]}
    rft, _, trainer = make_rft(replies, tmp_path, metric=answer_as_score, accept_threshold=threshold)
    signal, _ = next(rft.steps(program(), tasks("ALPHA", "BETA")))

    assert (signal.accepted, signal.rollouts) == (2, 4)
    assert sorted(ex.completion for ex in trainer.calls[0].examples) == [reply(answer=s) for s in kept]
