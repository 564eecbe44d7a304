"""LoRA training settings: one frozen record, validated before any process starts.

Named `LoraTrainingConfig` so it never reads as peft's `LoraConfig`, which the
worker builds from it. The defaults fit the embedded SmolLM2-135M on a CPU;
`gpu_2b()` is the preset for a 2B-class model on a GPU.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from whale_dspy.errors import ConfigError

DTYPES = ("float32", "bfloat16", "float16")
_DEVICE = re.compile(r"^(cpu|mps|cuda(:\d+)?)$")
KIND_NAMES = {(int,): "an integer", (int, float): "a number", (bool,): "true or false"}


@dataclass(frozen=True)
class LoraTrainingConfig:
    """How the weight phase fine-tunes: LoRA shape, optimizer, batching, placement.

    rank / alpha / dropout / target_modules: the LoRA adapter (alpha / rank scales it).
    learning_rate: AdamW, constant. epochs: passes over the examples of one call.
    batch_size x grad_accum: examples per optimizer step.
    max_length: tokens per example; prompts are cut from the left to fit.
    dtype / device: where the base model sits while training ("cuda:1" keeps
    training off the device that serves). seed: batch order, dropout and init.
    gradient_checkpointing: keep one activation per decoder layer and recompute
    the rest in the backward pass (on a CPU: 0.2-0.3x the step's memory for
    1.2-1.3x its time, bench/RESULTS.md); a GPU run's sizing keeps it only where the
    trainer shares the serving GPU.
    chat_template_kwargs: what the chat template renders prompts with (Qwen3's
    `{"enable_thinking": False}`): the serving side's defaults, so the adapter learns each
    completion after the prompt it was sampled from.
    """

    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.05
    target_modules: tuple[str, ...] = ("q_proj", "v_proj")
    learning_rate: float = 5e-4
    epochs: int = 1
    batch_size: int = 4
    grad_accum: int = 1
    max_length: int = 1024
    dtype: str = "float32"
    device: str = "cpu"
    seed: int = 0
    gradient_checkpointing: bool = True
    chat_template_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "target_modules", tuple(self.target_modules))
        problems = self._problems()
        if problems:
            raise ConfigError("LoraTrainingConfig: " + "; ".join(problems))

    def _problems(self) -> list[str]:
        kinds = {n: (int,) for n in ("rank", "epochs", "batch_size", "grad_accum", "max_length", "seed")}
        kinds |= {n: (int, float) for n in ("alpha", "dropout", "learning_rate")}
        kinds["gradient_checkpointing"] = (bool,)
        wrong = [
            f"{n} must be {KIND_NAMES[k]}, got {getattr(self, n)!r}"
            for n, k in kinds.items()
            if type(getattr(self, n)) not in k
        ]
        if wrong:
            return wrong
        checks = [
            (1 <= self.rank <= 1024, f"rank must be an int in 1..1024, got {self.rank!r}"),
            (self.alpha > 0, f"alpha must be > 0, got {self.alpha!r}"),
            (0 <= self.dropout < 1, f"dropout must be in [0, 1), got {self.dropout!r}"),
            (
                bool(self.target_modules) and all(isinstance(m, str) and m for m in self.target_modules),
                f"target_modules must be non-empty module names, got {self.target_modules!r}",
            ),
            (0 < self.learning_rate < 1, f"learning_rate must be in (0, 1), got {self.learning_rate!r}"),
            (self.epochs >= 1, f"epochs must be >= 1, got {self.epochs!r}"),
            (self.batch_size >= 1, f"batch_size must be >= 1, got {self.batch_size!r}"),
            (self.grad_accum >= 1, f"grad_accum must be >= 1, got {self.grad_accum!r}"),
            (self.max_length >= 8, f"max_length must be >= 8 tokens, got {self.max_length!r}"),
            (self.dtype in DTYPES, f"dtype must be one of {DTYPES}, got {self.dtype!r}"),
            (
                bool(_DEVICE.match(str(self.device))),
                f"device must be 'cpu', 'mps', 'cuda' or 'cuda:N', got {self.device!r}",
            ),
            (self.seed >= 0, f"seed must be >= 0, got {self.seed!r}"),
        ]
        return [message for ok, message in checks if not ok]

    @classmethod
    def gpu_2b(cls, device: str = "cuda", **overrides: Any) -> LoraTrainingConfig:
        """A 2B-class model on one GPU: bf16, all attention and MLP projections, longer traces."""
        preset = cls(
            rank=16,
            alpha=32.0,
            target_modules=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
            learning_rate=1e-4,
            batch_size=8,
            grad_accum=2,
            max_length=4096,
            dtype="bfloat16",
            device=device,
            gradient_checkpointing=False,
        )
        return replace(preset, **overrides)

    def to_dict(self) -> dict[str, Any]:
        """Its record; `chat_template_kwargs` (added after runs were recorded) only when set, so an
        older run's record still matches and the run resumes."""
        record = {**asdict(self), "target_modules": list(self.target_modules)}
        record.pop("chat_template_kwargs")
        return record | (
            {"chat_template_kwargs": dict(self.chat_template_kwargs)} if self.chat_template_kwargs else {}
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoraTrainingConfig:
        return cls(**data)
