"""LoraTrainingConfig validation and the FakeTrainer double."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from whale_dspy.errors import ConfigError, TrainingError
from whale_dspy.protocols import WeightTrainer
from whale_dspy.records import AdapterRef, SFTExample
from whale_dspy.testing.fake_trainer import FakeTrainer
from whale_dspy.training import LoraTrainingConfig


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("rank", 0, "1..1024"),
        ("rank", 8.0, "integer"),
        ("alpha", 0, "> 0"),
        ("dropout", 1.0, "[0, 1)"),
        ("target_modules", (), "non-empty"),
        ("learning_rate", 0, "(0, 1)"),
        ("epochs", 0, ">= 1"),
        ("batch_size", 0, ">= 1"),
        ("grad_accum", 0, ">= 1"),
        ("max_length", 4, ">= 8"),
        ("dtype", "fp32", "'float32', 'bfloat16', 'float16'"),
        ("device", "gpu", "'cuda:N'"),
        ("seed", -1, ">= 0"),
        ("gradient_checkpointing", "yes", "true or false"),
        ("gradient_checkpointing", 1, "true or false"),
    ],
)
def test_out_of_range_values_say_what_is_valid(field, value, says):
    with pytest.raises(ConfigError, match=field) as info:
        LoraTrainingConfig(**{field: value})
    assert says in str(info.value)


def test_defaults_fit_the_embedded_model_on_cpu_and_round_trip():
    config = LoraTrainingConfig()
    assert (config.rank, config.target_modules, config.dtype, config.device) == (
        8,
        ("q_proj", "v_proj"),
        "float32",
        "cpu",
    )
    assert config.gradient_checkpointing  # CPU memory, not time, is what fails (bench/RESULTS.md)
    assert LoraTrainingConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config


def test_gpu_preset_trains_in_bf16_on_the_chosen_device():
    config = LoraTrainingConfig.gpu_2b(device="cuda:1", epochs=2)
    assert (config.dtype, config.device, config.epochs) == ("bfloat16", "cuda:1", 2)
    assert not config.gradient_checkpointing
    assert config.rank > LoraTrainingConfig().rank
    assert {"q_proj", "v_proj", "down_proj"} <= set(config.target_modules)
    with pytest.raises(ConfigError, match="device"):
        LoraTrainingConfig.gpu_2b(device="tpu")


def examples(n: int) -> list[SFTExample]:
    return [SFTExample(({"role": "user", "content": f"q{i}"},), f"answer number {i}") for i in range(n)]


def test_fake_trainer_records_calls_and_writes_a_placeholder_adapter(tmp_path):
    trainer = FakeTrainer()
    assert isinstance(trainer, WeightTrainer)
    first = trainer.train(examples(2), base="smol", parent=None, name="a1", out_dir=tmp_path / "a1")
    second = trainer.train(examples(3), base="smol", parent=first.adapter, name="a2", out_dir=tmp_path / "a2")

    assert [c.examples for c in trainer.calls] == [tuple(examples(2)), tuple(examples(3))]
    assert [c.parent for c in trainer.calls] == [None, first.adapter]
    assert second.adapter == AdapterRef("a2", second.adapter.path, "smol", "a1")
    assert (
        json.loads((Path(second.adapter.path) / "adapter_config.json").read_text())["base_model_name_or_path"]
        == "smol"
    )
    assert second.loss < first.loss
    assert (second.examples, second.tokens) == (3, 9)


def test_fake_trainer_scripted_losses_failures_and_the_real_checks(tmp_path):
    trainer = FakeTrainer(losses=[0.5, 0.4, 0.3], fail_calls={1})
    assert trainer.train(examples(1), base="b", parent=None, name="a", out_dir=tmp_path / "a").loss == 0.5
    with pytest.raises(TrainingError, match="scripted to fail"):
        trainer.train(examples(1), base="b", parent=None, name="b", out_dir=tmp_path / "b")
    assert not (tmp_path / "b" / "adapter").exists()
    with pytest.raises(TrainingError, match="never reused"):
        trainer.train(examples(1), base="b", parent=None, name="a", out_dir=tmp_path / "a")
    with pytest.raises(TrainingError, match="no examples"):
        trainer.train([], base="b", parent=None, name="c", out_dir=tmp_path / "c")
    assert [c.name for c in trainer.calls] == ["a", "b"]
    assert trainer.train(examples(1), base="b", parent=None, name="c", out_dir=tmp_path / "c").loss == 0.3
    with pytest.raises(TrainingError, match="only 0 losses"):
        FakeTrainer(losses=[]).train(examples(1), base="b", parent=None, name="d", out_dir=tmp_path / "d")


@pytest.mark.parametrize(
    ("cpu_threads", "environment", "expected"),
    [(None, None, "every core"), (1, None, "1"), (None, "3", "3")],
)
def test_a_cpu_training_takes_every_core_unless_told_otherwise(
    tmp_path, monkeypatch: pytest.MonkeyPatch, cpu_threads, environment, expected
) -> None:
    """Beside a run's own idle server two threads train faster; 1 beside a busy shared one;
    OMP_NUM_THREADS set by the user wins over both."""
    import os
    import sys

    from whale_dspy.training.lora_trainer import LoraTrainer

    seen = tmp_path / "threads"
    record = "import os, sys; open(sys.argv[1], 'w').write(os.environ['OMP_NUM_THREADS'])"
    if environment is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", environment)
    trainer = LoraTrainer(cpu_threads=cpu_threads, launcher=[sys.executable, "-c", record, str(seen)])
    trainer._run_worker(tmp_path / "spec.json", tmp_path / "train.log")  # the launcher runs no worker
    cores = str(len(os.sched_getaffinity(0)))
    assert seen.read_text() == (cores if expected == "every core" else expected)
