"""The user's own DSPy program through our optimizers, and our weight machinery inside stock DSPy.

A program with two predictors, custom signatures, a metric and a tool it holds
is compiled by MetaHarness (candidates in the sandbox), RFT, WhaleOptimizer and
BetterTogether(p=BootstrapFewShot, w=RFT); the result is scored by
dspy.Evaluate, saved and loaded, and optimized again by a stock DSPy optimizer.
BootstrapFinetune trains through WhaleProvider on the fake backend.
"""

from __future__ import annotations

import itertools
import json

import dspy
import pytest
from meta_harness_helpers import ScriptedProposer
from student_helpers import exact, lookup, questions, scripted
from user_programs import LookupQA

from optimizers import RejectionSamplingFinetune, RFTConfig
from optimizers.engine.schedules import Fixed
from optimizers.engine.whale import WhaleOptimizer
from optimizers.harness.archive import HarnessArchive
from optimizers.harness.meta_harness import MetaHarness, MetaHarnessConfig, sandboxed_evaluator
from whale_dspy.backends import WhaleProvider
from whale_dspy.errors import ConfigError
from whale_dspy.harness import HarnessProgram, HarnessSource
from whale_dspy.rundir import RunDir
from whale_dspy.student import as_harness
from whale_dspy.testing import FakeBackend, FakeTrainer, ScriptedLM

TERSE = "Answer with the single word from the notes."


def server() -> FakeBackend:
    return FakeBackend(scripted())


def rft(
    backend: FakeBackend, tmp_path, trainer: FakeTrainer | None = None, metric=exact, **config
) -> RejectionSamplingFinetune:
    settings = {"batch_size": 2, "k": 2, "threads": 2, "run_tag": "ut", "steps": 1, **config}
    return RejectionSamplingFinetune(
        backend=backend,
        trainer=trainer or FakeTrainer(),
        metric=metric,
        config=RFTConfig(**settings),
        run_dir=RunDir.open(tmp_path / "rft", {"test": True}),
        base="base-model",
    )


def rewritten(program: HarnessProgram, old: str, new: str, name: str = "terse") -> HarnessSource:
    assert old in program.source.code
    return HarnessSource(name, program.source.code.replace(old, new), parent="c0000")


def test_meta_harness_searches_the_users_program_in_the_sandbox(tmp_path):
    student = LookupQA(lookup, notes=1)
    seed = as_harness(student)
    terse = rewritten(seed, "Answer the question from the notes, in a few words.", TERSE)
    no_entry = HarnessSource("no_entry", seed.source.code.replace("def build(", "def make("), parent="c0000")
    config = MetaHarnessConfig.paper(
        candidates=2, tasks=2, smoke_tasks=1, min_iterations=1, max_iterations=1, threads=2, timeout_s=60
    )
    optimizer = MetaHarness(
        proposer=ScriptedProposer([[terse, no_entry]]),
        metric=exact,
        archive_dir=tmp_path / "archive",
        lm=scripted(),
        config=config,
        evaluator=sandboxed_evaluator(config, startup_seconds=60),
    )
    best = optimizer.compile(student, trainset=questions(2))
    archive = HarnessArchive(tmp_path / "archive")
    found = {m.name: m.status for m in archive.candidates}
    assert list(found.values()).count("valid") == 2 and list(found.values()).count("invalid") == 1
    dropped = next(m for m in archive.candidates if m.status == "invalid")
    assert dropped.stage == "parse" and "defines no top-level `def build" in dropped.error
    [searched, *_] = archive.traces("c0001")
    assert [c.name for c in searched.tool_calls] == [
        "lookup"
    ]  # the held tool answered the sandboxed candidate
    assert isinstance(best, HarnessProgram) and best.report.iterations


def test_rft_trains_on_both_predictors_calls_of_the_users_program(tmp_path):
    backend, trainer = server(), FakeTrainer()
    result = rft(backend, tmp_path, trainer).compile(LookupQA(lookup, notes=1), trainset=questions(2))
    [call] = trainer.calls
    assert len(call.examples) == 2 * 2 * 2  # tasks x k x (rewrite, answer)
    assert {e.completion.count("[[ ## query ## ]]") for e in call.examples} == {0, 1}
    assert result.adapter_name == call.name and result.adapter_name in backend.loaded
    assert [n for n, _ in result.named_predictors()] == ["program.rewrite", "program.answer"]


def test_demos_set_on_the_program_reach_every_rollout(tmp_path):
    backend, trainer = server(), FakeTrainer()
    program = as_harness(LookupQA(lookup, notes=1))
    demo = dspy.Example(notes="- Rome is in Italy.", question="Which city is in Italy?", answer="Rome")
    dict(program.named_predictors())["program.answer"].demos = [demo]
    rft(backend, tmp_path, trainer).compile(program, trainset=questions(2))
    answers = [e for e in trainer.calls[0].examples if "[[ ## answer ## ]]" in e.completion]
    assert len(answers) == 4 and all("Which city is in Italy?" in json.dumps(e.messages) for e in answers)


def test_whale_optimizer_compiles_the_users_program(tmp_path):
    """The explicit form, the metric passed once: the phases score with the optimizer's, and each
    harness phase archives under the run folder (no archive_dir)."""
    backend = server()
    config = MetaHarnessConfig.paper(candidates=1, tasks=2, smoke_tasks=1, threads=2, timeout_s=60)
    seed = as_harness(LookupQA(lookup, notes=1))
    meta = MetaHarness(
        proposer=ScriptedProposer([[rewritten(seed, "in a few words", "in one word")]] * 3),
        config=config,
        evaluator=sandboxed_evaluator(config, startup_seconds=60),
    )
    weights = rft(backend, tmp_path, metric=None)
    optimizer = WhaleOptimizer(
        backend=backend,
        metric=exact,
        schedule=Fixed(1, 1),
        budget=24,
        run_dir=tmp_path / "run",
        eval_every=8,
        eval_k=1,
        eval_threads=2,
        weight_phase=weights,
        harness_phase=meta,
    )
    assert meta.metric is exact and weights.metric is exact
    program = optimizer.compile(
        LookupQA(lookup, notes=1), trainset=questions(2), valset=questions(2), track=questions(2)
    )
    assert (tmp_path / "run" / "harness" / "phase-001").is_dir()
    assert [p.phase for p in program.report.phases][:2] == ["weight", "harness"]
    assert (
        program.report.curve[-1].mean_at_k == 1.0 and program.report.curve[-1].adapter == program.adapter_name
    )
    assert program.adapter_name in backend.loaded
    [started] = RunDir(tmp_path / "run").events("run_started")  # the record says what ran, and where
    assert started["served_model"] == "base" and started["environment"]["machine"]["cores"] >= 1
    assert started["environment"]["packages"]["dspy"] == dspy.__version__
    assert set(started["environment"]["code"]) >= {"commit", "dirty"}  # the code that ran, or why unknown


def test_better_together_runs_bootstrap_few_shot_and_our_weight_phase(tmp_path):
    backend, trainer = server(), FakeTrainer()
    student = LookupQA(lookup, notes=1)
    student.set_lm(backend.lm())  # BetterTogether wants an LM on every predictor
    optimizer = dspy.BetterTogether(
        metric=exact,
        p=dspy.BootstrapFewShot(metric=exact, max_bootstrapped_demos=1, max_labeled_demos=0),
        w=rft(backend, tmp_path, trainer),
    )
    result = optimizer.compile(student, trainset=questions(4), valset_ratio=0.0, strategy="p -> w -> p -> w")
    first, second = trainer.calls
    assert second.parent.name == first.name  # the second weight step continues from the first adapter
    for call in (first, second):  # each weight step sampled with the demos the prompt step chose
        assert all(len(example.messages) == 4 for example in call.examples)  # system, demo in, demo out, task
    candidates = result.candidate_programs
    served = {c["strategy"]: {p.lm.model for p in c["program"].predictors()} for c in candidates}
    assert served["p -> w"] == {first.name} and served["p -> w -> p -> w"] == {second.name}
    predictors = dict(result.named_predictors())
    assert {p.lm.model for p in predictors.values()} == {second.name}
    assert all(len(p.demos) == 1 for p in predictors.values())
    assert result(question="What is the capital of France?").answer == "Paris"


def test_better_together_composes_gepa_with_our_weight_phase(tmp_path):
    def metric(gold, pred, trace=None, pred_name=None, pred_trace=None):  # GEPA's feedback-metric shape
        return exact(gold, pred)

    backend, trainer = server(), FakeTrainer()
    reflection = ScriptedLM({"": '{"new_instruction": "Answer with one word from the notes."}'})
    student = LookupQA(lookup, notes=1)
    student.set_lm(backend.lm())
    gepa = dspy.GEPA(
        metric=metric, max_metric_calls=12, reflection_lm=reflection, reflection_minibatch_size=2
    )
    result = dspy.BetterTogether(metric=metric, p=gepa, w=rft(backend, tmp_path, trainer)).compile(
        student, trainset=questions(4), valset_ratio=0.0, strategy="p -> w"
    )
    [call] = trainer.calls
    assert not result.flag_compilation_error_occurred
    assert {p.lm.model for p in result.predictors()} == {call.name}
    assert result(question="What is the capital of France?").answer == "Paris"


def test_the_result_is_an_ordinary_dspy_program(tmp_path):
    backend = server()
    result = rft(backend, tmp_path).compile(LookupQA(lookup, notes=1), trainset=questions(2))
    score = dspy.Evaluate(devset=questions(3), metric=exact, num_threads=2)(result)
    assert score.score == 100.0

    tuned = dspy.BootstrapFewShot(metric=exact, max_bootstrapped_demos=1, max_labeled_demos=0).compile(
        result, trainset=questions(2)
    )
    assert all(len(p.demos) == 1 for _, p in tuned.named_predictors())
    assert not any(p.demos for _, p in result.named_predictors())  # compile never mutates its student

    tuned.save(tmp_path / "agent.json")
    loaded = as_harness(LookupQA(lookup, notes=1)).with_lm(backend.lm())
    loaded.load(tmp_path / "agent.json")
    assert (loaded.source.code, loaded.adapter_name) == (tuned.source.code, tuned.adapter_name)
    assert loaded.bound_lm.model == tuned.adapter_name

    def demos(program):
        return [[dict(demo.items()) for demo in p.demos] for _, p in program.named_predictors()]

    assert demos(loaded) == demos(tuned)

    tuned.save(tmp_path / "whole", save_program=True)
    restored = dspy.load(str(tmp_path / "whole"), allow_pickle=True)
    assert restored.source.code == tuned.source.code and restored.adapter_name == tuned.adapter_name
    assert [len(p.demos) for _, p in restored.named_predictors()] == [1, 1]
    assert restored(question="What is the capital of France?").answer == "Paris"


def test_loaded_model_written_code_runs_contained_until_vouched(tmp_path):
    seed = as_harness(LookupQA(lookup))
    written = seed.with_source(rewritten(seed, "in a few words", "in one word"))
    assert not written.source.trusted and written.named_predictors() == []
    written.save(tmp_path / "agent.json")
    loaded = as_harness(LookupQA(lookup))
    loaded.load(tmp_path / "agent.json")
    assert not loaded.source.trusted and loaded.named_predictors() == []
    assert len(loaded.vouched().named_predictors()) == 2


def test_bootstrap_finetune_trains_through_whale_provider(tmp_path):
    backend, trainer = server(), FakeTrainer()
    provider = WhaleProvider(backend, trainer, base="base-model", adapters_dir=tmp_path / "adapters")
    student = LookupQA(lookup, notes=1)
    student.set_lm(provider.lm())
    tuned = dspy.BootstrapFinetune(metric=exact, num_threads=2).compile(student, trainset=questions(3))
    [call] = trainer.calls
    assert call.base == "base-model" and call.parent is None and len(call.examples) == 3 * 2
    assert {p.lm.model for p in tuned.predictors()} == {call.name} and call.name in backend.loaded
    assert tuned(question="What is the capital of France?").answer == "Paris"
    again = dspy.BootstrapFinetune(metric=exact, num_threads=2).compile(tuned, trainset=questions(2))
    assert trainer.calls[1].parent.name == call.name  # the second fine-tune continues from the first adapter
    assert {p.lm.model for p in again.predictors()} == {trainer.calls[1].name}


def test_provider_refuses_what_it_cannot_train(tmp_path):
    provider = WhaleProvider(server(), FakeTrainer(), base="b", adapters_dir=tmp_path)
    row = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    with pytest.raises(ConfigError, match="no train_kwargs"):
        provider.finetune(None, "base", [row], "chat", {"epochs": 3})
    with pytest.raises(ConfigError, match="ending with the assistant"):
        provider.finetune(None, "base", [{"messages": row["messages"][:1]}], "chat")


def test_compile_refuses_a_bad_student_or_metric_before_any_rollout(tmp_path):
    backend = FakeBackend(ScriptedLM([]))  # any LM call would raise ScriptExhausted
    weight = rft(backend, tmp_path)
    with pytest.raises(ConfigError, match="cannot be handed"):
        weight.compile(LookupQA(object()), trainset=questions(2))
    weight.metric = lambda prediction: 1.0
    with pytest.raises(ConfigError, match="trace=None"):
        weight.compile(LookupQA(lookup), trainset=questions(2))
    assert list(itertools.chain(backend.loaded)) == []


def test_a_phase_run_alone_asks_for_what_the_optimizer_would_give(tmp_path):
    backend = server()
    alone = MetaHarness(proposer=ScriptedProposer([]), archive_dir=tmp_path / "archive")
    with pytest.raises(ConfigError, match="MetaHarness needs metric="):
        alone.compile(LookupQA(lookup, notes=1), trainset=questions(2))
    no_archive = MetaHarness(proposer=ScriptedProposer([]), metric=exact)
    with pytest.raises(ConfigError, match="MetaHarness needs archive_dir="):
        no_archive.compile(LookupQA(lookup, notes=1), trainset=questions(2))
    with pytest.raises(ConfigError, match="RejectionSamplingFinetune needs metric="):
        rft(backend, tmp_path, metric=None).compile(LookupQA(lookup, notes=1), trainset=questions(2))
