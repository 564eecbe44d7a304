"""Deterministic task batches that walk the training set in epochs without replacement.

A batch is a pure function of (seed, step), so a resumed run draws the same
tasks, and "E epochs of training" means every task was drawn E times. Each
epoch is a fresh permutation cut into whole batches; the few tasks left over
when the set does not divide evenly wait for a later epoch's shuffle (as
`drop_last` does), so a batch never holds the same task twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from whale_dspy.errors import ConfigError
from whale_dspy.seeding import derive_seed

T = TypeVar("T")


@dataclass(frozen=True)
class EpochBatches(Generic[T]):
    """`batch(step)` is the step's tasks; `steps_per_epoch` whole batches make one epoch."""

    items: Sequence[T]
    batch_size: int
    seed: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= len(self.items):
            raise ConfigError(
                f"batch_size must be in 1..{len(self.items)} (the training set's size), got {self.batch_size}"
            )

    @property
    def steps_per_epoch(self) -> int:
        return len(self.items) // self.batch_size

    @property
    def tasks_per_epoch(self) -> int:
        return self.steps_per_epoch * self.batch_size

    def epoch_of(self, step: int) -> int:
        return step // self.steps_per_epoch

    def batch(self, step: int) -> list[T]:
        if step < 0:
            raise ConfigError(f"step must be >= 0, got {step}")
        epoch, offset = divmod(step, self.steps_per_epoch)
        order = np.random.default_rng(derive_seed("epoch", self.seed, epoch)).permutation(len(self.items))
        start = offset * self.batch_size
        return [self.items[int(i)] for i in order[start : start + self.batch_size]]
