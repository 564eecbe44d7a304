"""Settings of the weight phase (online rejection-sampling fine-tuning), validated up front."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from whale_dspy.backends.gpu_sizing import MAX_THREADS
from whale_dspy.defaults import DEFAULT_MAX_TOKENS, DEFAULT_TEMPERATURE, DEFAULT_THREADS
from whale_dspy.errors import ConfigError
from whale_dspy.training.config import LoraTrainingConfig

_NAME_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class RFTConfig:
    """How one weight phase samples, filters and trains.

    steps: RFT steps that `compile` runs (`steps()` runs until its caller stops).
    batch_size: tasks per step, drawn in epochs without replacement.
    k: rollouts per task (WHALE samples 8). temperature: sampling temperature.
    accept_threshold: a rollout is trained on when its score is > this (WHALE: 0.5).
    max_tokens: completion budget of each LM call. threads: concurrent rollouts.
    adapter_prefix / run_tag: adapters are named `{prefix}-r{run_tag}-s{step:04d}`;
    run_tag None draws a random tag per optimizer, so two runs sharing a server
    never reuse a name. seed: batch order and rollout ids.
    max_failures: consecutive failed trainings/loads tolerated (each is recorded
    and skipped, the previous adapter stays served) before the error is raised; a load on a server
    that reports itself down is raised at once.
    training: the LoRA trainer's settings (the CLI builds the trainer from them).
    """

    steps: int = 4
    batch_size: int = 8
    k: int = 4
    temperature: float = DEFAULT_TEMPERATURE
    accept_threshold: float = 0.5
    max_tokens: int = DEFAULT_MAX_TOKENS
    threads: int = DEFAULT_THREADS
    adapter_prefix: str = "policy"
    run_tag: str | None = None
    seed: int = 0
    max_failures: int = 2
    training: LoraTrainingConfig = field(default_factory=LoraTrainingConfig)

    def __post_init__(self) -> None:
        problems = [message for ok, message in self._checks() if not ok]
        if problems:
            raise ConfigError("RFTConfig: " + "; ".join(problems))

    def _checks(self) -> list[tuple[bool, str]]:
        tag_ok = self.run_tag is None or bool(_NAME_PART.match(str(self.run_tag)))
        return [
            (_is_int(self.steps) and self.steps >= 0, f"steps must be an int >= 0, got {self.steps!r}"),
            (
                _is_int(self.batch_size) and self.batch_size >= 1,
                f"batch_size must be >= 1, got {self.batch_size}",
            ),
            (_is_int(self.k) and self.k >= 1, f"k must be >= 1, got {self.k!r}"),
            (0.0 <= self.temperature <= 2.0, f"temperature must be in [0, 2], got {self.temperature!r}"),
            (
                0.0 <= self.accept_threshold < 1.0,
                f"accept_threshold must be in [0, 1) (scores are in [0, 1]), got {self.accept_threshold!r}",
            ),
            (
                _is_int(self.max_tokens) and self.max_tokens >= 1,
                f"max_tokens must be >= 1, got {self.max_tokens}",
            ),
            (_is_int(self.threads) and self.threads >= 1, f"threads must be >= 1, got {self.threads!r}"),
            (
                bool(_NAME_PART.match(str(self.adapter_prefix))),
                f"adapter_prefix must match {_NAME_PART.pattern}, got {self.adapter_prefix!r}",
            ),
            (tag_ok, f"run_tag must be None or match {_NAME_PART.pattern}, got {self.run_tag!r}"),
            (_is_int(self.seed) and self.seed >= 0, f"seed must be an int >= 0, got {self.seed!r}"),
            (
                _is_int(self.max_failures) and self.max_failures >= 1,
                f"max_failures must be >= 1, got {self.max_failures!r}",
            ),
            (
                isinstance(self.training, LoraTrainingConfig),
                f"training must be a LoraTrainingConfig, got {type(self.training).__name__}",
            ),
        ]

    @classmethod
    def cpu_embedded(cls, **overrides: Any) -> RFTConfig:
        """The embedded SmolLM2-135M on a few CPU cores: small batches, short completions."""
        return replace(cls(batch_size=4, k=4, max_tokens=128), **overrides)

    @classmethod
    def gpu_2b(cls, device: str = "cuda", **overrides: Any) -> RFTConfig:
        """A 2B-class model on one GPU, at WHALE's k=8 with long multi-turn traces."""
        preset = cls(
            batch_size=32,
            k=8,
            max_tokens=2048,
            threads=MAX_THREADS,  # the most a sized GPU run takes, here unsized
            training=LoraTrainingConfig.gpu_2b(device=device),
        )
        return replace(preset, **overrides)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "training": self.training.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RFTConfig:
        return cls(**{**data, "training": LoraTrainingConfig.from_dict(data["training"])})


def _is_int(value: Any) -> bool:
    return type(value) is int
