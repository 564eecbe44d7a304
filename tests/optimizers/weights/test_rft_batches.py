"""Deterministic task batches, epoch accounting, and the weight phase's configuration checks."""

from __future__ import annotations

from collections import Counter

import pytest

from optimizers import RFTConfig
from optimizers.weights.epochs import EpochBatches
from whale_dspy.errors import ConfigError
from whale_dspy.training.config import LoraTrainingConfig


def test_batches_are_a_function_of_seed_and_step():
    a, b = EpochBatches(range(20), 4, seed=7), EpochBatches(range(20), 4, seed=7)
    assert [a.batch(s) for s in range(12)] == [b.batch(s) for s in range(12)]
    assert a.batch(9) == EpochBatches(range(20), 4, seed=7).batch(9)  # no hidden state
    other = EpochBatches(range(20), 4, seed=8)
    assert [a.batch(s) for s in range(5)] != [other.batch(s) for s in range(5)]


@pytest.mark.parametrize(("size", "batch"), [(20, 4), (10, 3), (7, 7)])
def test_an_epoch_draws_distinct_tasks_and_e_epochs_draw_each_task_at_most_e_times(size, batch):
    batches = EpochBatches(list(range(size)), batch, seed=1)
    assert batches.steps_per_epoch == size // batch
    assert batches.tasks_per_epoch == (size // batch) * batch
    epochs = 3
    for epoch in range(epochs):
        steps = range(epoch * batches.steps_per_epoch, (epoch + 1) * batches.steps_per_epoch)
        drawn = [task for step in steps for task in batches.batch(step)]
        assert len(drawn) == len(set(drawn)) == batches.tasks_per_epoch
        assert {batches.epoch_of(step) for step in steps} == {epoch}
    counts = Counter(t for s in range(epochs * batches.steps_per_epoch) for t in batches.batch(s))
    assert max(counts.values()) <= epochs
    if size % batch == 0:
        assert set(counts.values()) == {epochs} and len(counts) == size


def test_a_batch_larger_than_the_training_set_is_refused():
    with pytest.raises(ConfigError, match="1..3"):
        EpochBatches([1, 2, 3], 4)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("k", 0),
        ("batch_size", 0),
        ("accept_threshold", 1.0),
        ("temperature", -0.1),
        ("threads", 0),
        ("adapter_prefix", "bad name"),
        ("run_tag", "a/b"),
        ("max_failures", 0),
        ("steps", 1.5),
    ],
)
def test_bad_config_values_are_refused_with_the_valid_range(field, value):
    with pytest.raises(ConfigError, match=field):
        RFTConfig(**{field: value})


def test_presets_are_valid_and_round_trip():
    cpu, gpu = RFTConfig.cpu_embedded(), RFTConfig.gpu_2b(steps=10)
    assert gpu.k == 8 and gpu.training == LoraTrainingConfig.gpu_2b() and gpu.steps == 10
    assert cpu.training.device == "cpu" and cpu.max_tokens < gpu.max_tokens
    for config in (cpu, gpu):
        assert RFTConfig.from_dict(config.to_dict()) == config
