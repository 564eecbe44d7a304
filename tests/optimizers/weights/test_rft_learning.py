"""THE learning test: a few RFT steps on the real embedded model beat the base model on held-out tasks.

The task is a tiny synthetic domain: "repeat the given word", answered in
DSPy's JSON output format (which the server enforces by constrained decoding).
Base SmolLM2-135M gets it right about a fifth of the time at temperature 1.0:
it often writes the template placeholder `{answer}` or another word. The
rollouts it does get right are exactly what rejection sampling keeps, so a few
steps of training on them should lift held-out accuracy well beyond noise. The
comparison is paired over held-out tasks, with a bootstrap CI of the gain.
"""

from __future__ import annotations

from pathlib import Path

import dspy
import pytest

from optimizers import RejectionSamplingFinetune, RFTConfig
from whale_dspy.evaluation import EvalReport, EvalRequest, evaluate
from whale_dspy.harness import HarnessProgram
from whale_dspy.rundir import RunDir
from whale_dspy.stats import paired_gain
from whale_dspy.testing.echo import PLAIN_PREDICT, WORDS, Echo, echo_metric, echo_tasks
from whale_dspy.training import LoraTrainer, LoraTrainingConfig

pytestmark = pytest.mark.integration

EVAL_K = 2
SEED = 0


def held_out(program: HarnessProgram, tasks: list[dspy.Example], lm: dspy.BaseLM) -> EvalReport:
    report, _ = evaluate(
        program,
        EvalRequest(
            tasks, metric=echo_metric, lm=lm, k=EVAL_K, namespace="held-out", sampling={"temperature": 1.0}
        ),
        threads=8,
    )
    return report


def learning_trial(
    server, run_path: Path, run_tag: str
) -> tuple[EvalReport, EvalReport, RejectionSamplingFinetune]:
    """Base held-out score, 3 RFT steps on other words, held-out score again (JSON output format).

    Three steps, not two: two steps lifted held-out accuracy in five runs out of six here, and
    one run under heavy load ended below the base; three gave 0.125 -> 0.958.
    """
    trainset, testset = echo_tasks(WORDS[:24]), echo_tasks(WORDS[24:])
    config = RFTConfig.cpu_embedded(
        steps=3,
        batch_size=8,
        k=4,
        max_tokens=24,
        run_tag=run_tag,
        seed=SEED,
        training=LoraTrainingConfig(learning_rate=1e-3, seed=SEED),
    )
    rft = RejectionSamplingFinetune(
        backend=server,
        trainer=LoraTrainer(config.training),
        metric=echo_metric,
        config=config,
        run_dir=RunDir.open(run_path, config.to_dict()),
    )
    student = HarnessProgram(PLAIN_PREDICT, Echo)
    with dspy.context(adapter=dspy.JSONAdapter()):
        before = held_out(student, testset, server.lm(max_tokens=config.max_tokens))
        trained = rft.compile(student, trainset=trainset)
        after = held_out(trained, testset, trained.bound_lm)
    return before, after, rft


def test_a_few_rft_steps_beat_the_base_model_on_held_out_tasks(merged_server, tmp_path):
    """On the CPU default: each trained adapter is served merged into the weights."""
    before, after, rft = learning_trial(merged_server, tmp_path / "run", run_tag="learning")

    trained = [s for s in rft.report.steps if s.skipped is None]
    assert trained, [s.skipped for s in rft.report.steps]
    assert rft.report.final_adapter == trained[-1].adapter
    gain = paired_gain(before.per_task, after.per_task, seed=SEED)
    print(
        f"held-out mean@{EVAL_K}: {before.mean_at_k:.3f} -> {after.mean_at_k:.3f}, "
        f"gain CI [{gain.low:.3f}, {gain.high:.3f}]"
    )
    assert gain.low > 0.0, f"gain {gain.gain:.3f}, 95% CI [{gain.low:.3f}, {gain.high:.3f}], includes 0"
