"""A user's own DSPy program compiled end to end on the embedded model: WhaleOptimizer with the
real weight phase (LoRA on SmolLM2) and the harness phase (candidates in the sandbox), then
scored by dspy.Evaluate, saved and loaded back."""

from __future__ import annotations

import dspy
import pytest
from user_programs import EchoAgent

from optimizers import MetaHarness, MetaHarnessConfig, MutationProposer, RejectionSamplingFinetune, RFTConfig
from optimizers.engine.schedules import Fixed
from optimizers.engine.whale import WhaleOptimizer
from optimizers.harness.meta_harness import sandboxed_evaluator
from whale_dspy.rundir import RunDir
from whale_dspy.student import as_harness
from whale_dspy.testing.echo import WORDS, echo_metric, echo_tasks
from whale_dspy.training import LoraTrainer, LoraTrainingConfig

pytestmark = pytest.mark.integration


def tidy(text: str) -> str:
    """The reply without surrounding spaces, quotes or capitals."""
    return text.strip().strip("\"'.").lower()


def test_whale_compiles_a_users_program_on_the_embedded_model(merged_server, tmp_path):
    rft_config = RFTConfig.cpu_embedded(
        batch_size=4, k=4, max_tokens=24, run_tag="user", training=LoraTrainingConfig(learning_rate=1e-3)
    )
    search = MetaHarnessConfig.paper(candidates=1, tasks=4, smoke_tasks=1, threads=4, timeout_s=300)
    whale = WhaleOptimizer(
        backend=merged_server,
        metric=echo_metric,
        schedule=Fixed(1, 1),
        budget=40,
        run_dir=tmp_path / "run",
        eval_every=40,
        eval_k=2,
        eval_threads=8,
        sampling={"max_tokens": 24},
        weight_phase=RejectionSamplingFinetune(
            backend=merged_server,
            trainer=LoraTrainer(rft_config.training),
            metric=echo_metric,
            config=rft_config,
            run_dir=RunDir.open(tmp_path / "rft", rft_config.to_dict()),
        ),
        harness_phase=MetaHarness(
            proposer=MutationProposer(0),
            metric=echo_metric,
            archive_dir=tmp_path / "unused",
            config=search,
            evaluator=sandboxed_evaluator(search),
        ),
    )
    testset = echo_tasks(WORDS[40:46])
    with dspy.context(adapter=dspy.JSONAdapter()):
        best = whale.compile(
            EchoAgent(tidy), trainset=echo_tasks(WORDS[:4]), valset=echo_tasks(WORDS[4:9]), track=testset
        )
        phases = [p.phase for p in best.report.phases if p.units]
        assert phases[:2] == ["weight", "harness"], phases
        assert best.adapter_name and best.report.adapter["name"] == best.adapter_name
        score = dspy.Evaluate(devset=testset, metric=echo_metric, num_threads=4)(best).score
        assert 0.0 <= score <= 100.0
        best.save(tmp_path / "best.json")
        loaded = as_harness(EchoAgent(tidy)).with_lm(merged_server.lm(max_tokens=24))
        loaded.load(tmp_path / "best.json")
        assert (loaded.source.code, loaded.adapter_name) == (best.source.code, best.adapter_name)
        assert loaded.bound_lm.model == best.bound_lm.model
        assert isinstance(loaded(word="apple").answer, str)
