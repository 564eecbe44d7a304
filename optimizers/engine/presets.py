"""Named phase sizes for one kind of machine: the registry WhaleConfig (and `--preset`) reads.

A preset names the weight phase's RFT settings (an `RFTConfig` constructor) and the harness
phase's sizes (MetaHarnessConfig fields); the run's own settings (seed, tag, device) are laid over
them. Adding a preset is one entry here. The optimizers are imported only when a preset is used,
so building the parser stays light.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from whale_dspy.backends.gpu_sizing import MAX_THREADS
from whale_dspy.errors import ConfigError

log = logging.getLogger(__name__)


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

DEFAULT_PRESET = "cpu"
"""The preset a run, a search or a training takes when none is named."""

PRESET_HELP = "; ".join(f"{name}: {preset.about}" for name, preset in PRESETS.items())


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; valid presets are {', '.join(PRESETS)}")
    return PRESETS[name]


def run_sizing(preset: str, model: str, gpus: tuple[float, ...] = ()) -> Any:
    """How a GPU preset's run is sized for `model` on `gpus` (each one's GiB; default what torch
    sees); None (the preset's fixed sizes, with a warning) for other presets, where no GPU is visible
    and none is given (a controller of servers on other hosts), or where the model's shape cannot be
    read."""
    if not get_preset(preset).sized_on_gpu:
        return None
    from whale_dspy.backends.gpu_sizing import visible_gpu_gib

    return _sized_gpu_run(preset, model, tuple(gpus) or tuple(visible_gpu_gib()))


@functools.cache
def _sized_gpu_run(preset: str, model: str, gpus: tuple[float, ...]) -> Any:
    """`run_sizing`, once per process: a run's server and its phases both ask, and the answer (read
    from the model's config, with a warning when it falls back) is the same."""
    from whale_dspy.backends.gpu_sizing import local_model_folder, size_gpu_run
    from whale_dspy.models import resolve_model

    folder = local_model_folder(resolve_model(model)) if gpus else None
    if folder is None:
        why = "no GPU is visible (--gpu-memory-gib sizes it)" if not gpus else "the model is no local folder"
        log.warning("the %s preset runs unsized, at its fixed sizes: %s", preset, why)
        return None
    longest = get_preset(preset).rft_config().training.max_length  # the longest trace trained
    return size_gpu_run(folder, list(gpus), tokens_per_rollout=longest)
