"""Named phase sizes for one kind of machine: the registry RunSettings (and `--preset`) reads.

A preset names the weight phase's RFT settings (an `RFTConfig` constructor) and the harness
phase's sizes (MetaHarnessConfig fields); the run's own settings (seed, tag, device) are laid over
them. Adding a preset is one entry here. The optimizers are imported only when a preset is used,
so building the parser stays light.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from whale_dspy.backends.gpu_sizing import MAX_THREADS
from whale_dspy.errors import ConfigError


@dataclass(frozen=True)
class Preset:
    """What the preset is for, and how big its phases are."""

    about: str
    rft_config: Callable[..., Any]
    """Builds the weight phase's RFTConfig from the run's overrides (seed, run_tag)."""
    meta_harness: Mapping[str, Any] = field(default_factory=dict)
    """MetaHarnessConfig fields that size the harness phase."""
    sized_on_gpu: bool = False
    """A run under it is sized from the model and the GPUs when it starts (`gpu_sizing`): the KV
    cache, the concurrent rollouts of both phases, the trainer's device and gradient checkpointing."""

    def sampling(self) -> dict[str, Any]:
        """LM request settings of every program a run binds and evaluates: the weight phase's, so
        that checkpoints from either phase (and `whale eval` of them) share one completion budget."""
        rft = self.rft_config()
        return {"temperature": rft.temperature, "max_tokens": rft.max_tokens}

    def meta_harness_config(self, **fields: Any) -> Any:
        from optimizers.harness.config import MetaHarnessConfig

        return MetaHarnessConfig(**{**self.meta_harness, **fields})


def _cpu_rft(**overrides: Any) -> Any:
    from optimizers.weights.config import RFTConfig

    return RFTConfig.cpu_embedded(**overrides)


def _gpu_rft(**overrides: Any) -> Any:
    from optimizers.weights.config import RFTConfig

    return RFTConfig.gpu_2b(**overrides)


PRESETS: dict[str, Preset] = {
    # 8 feedback tasks, and a race of 8, 16 and 32 selection tasks for each harness decision
    "cpu": Preset("the embedded models on a few CPU cores", _cpu_rft, {"tasks": 8, "selection_tasks": 32}),
    # one wave of concurrent rollouts per candidate (WHALE's own searched 256 tasks); a sized run
    # lays its threads over these
    "gpu": Preset(
        "a 0.5-4B model on one or more GPUs, sized from both",
        _gpu_rft,
        {"tasks": MAX_THREADS, "threads": MAX_THREADS},
        True,
    ),
}

PRESET_HELP = "; ".join(f"{name}: {preset.about}" for name, preset in PRESETS.items())


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; valid presets are {', '.join(PRESETS)}")
    return PRESETS[name]
