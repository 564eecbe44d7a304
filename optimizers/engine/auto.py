"""`auto="light" | "medium" | "heavy"`: a whole run's configuration from one word, as GEPA's `auto`.

Each level names a budget, a schedule and how harness decisions are made, for the kind of
machine the model is served on; everything else (phase sizes, sampling, threads, eval k) is the
machine's preset (optimizers.engine.presets) laid into a WhaleConfig, as `whale run` lays its
settings. `whale config show --auto light` prints what `WhaleOptimizer(metric=..., auto="light")` runs.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dspy

from optimizers.engine.presets import run_sizing
from optimizers.engine.progress import ProgressLines
from optimizers.engine.whale_config import WhaleConfig
from whale_dspy.errors import ConfigError
from whale_dspy.progress import log as progress_log
from whale_dspy.progress import show_progress
from whale_dspy.protocols import InferenceBackend, ServingProvider

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AutoLevel:
    budget: int
    """Rollouts the whole run may spend (both phases)."""
    schedule: str
    decision: dict[str, Any] = field(default_factory=dict)
    """Harness decision fields (WhaleConfig's DECISION_FIELDS); the rest are the preset's."""


AUTO: dict[str, dict[str, AutoLevel]] = {
    # CPU: a weight step is 16 rollouts (4 tasks x 4); every level decides on tasks no proposer saw
    "cpu": {
        "light": AutoLevel(96, "fixed:0.5,1"),
        "medium": AutoLevel(480, "fixed:0.6,3"),
        "heavy": AutoLevel(2000, "fixed:0.6,5"),
    },
    # GPU: a weight step is 256 rollouts (32 tasks x 8)
    "gpu": {
        "light": AutoLevel(2048, "fixed:0.5,2"),
        "medium": AutoLevel(8192, "fixed:0.6,4"),
        "heavy": AutoLevel(32768, "fixed:0.6,5"),
    },
}


def machine_kind() -> str:
    """ "cpu" where the installed vLLM is the CPU build, else "gpu"."""
    from whale_dspy.machine import cpu_build

    return "cpu" if cpu_build() else "gpu"


def auto_level(auto: str, machine: str | None = None) -> tuple[str, AutoLevel]:
    """The machine kind (this one's unless given: cpu, gpu) and its level `auto`."""
    machine = machine or machine_kind()
    if machine not in AUTO or auto not in AUTO[machine]:
        raise ConfigError(
            f"auto must be one of {', '.join(AUTO['cpu'])} on cpu or gpu, not {auto!r} on {machine!r}"
        )
    return machine, AUTO[machine][auto]


def auto_config(auto: str, *, model: str, run_tag: str | None = None, seed: int = 0) -> WhaleConfig:
    """The WhaleConfig of `auto` for `model` on this kind of machine (a GPU one sized for it)."""
    machine, level = auto_level(auto)
    return WhaleConfig.for_preset(
        machine, seed=seed, run_tag=run_tag, sizing=run_sizing(machine, model),
        decision=level.decision, budget=level.budget, schedule=level.schedule,
    )  # fmt: skip


@dataclass(frozen=True)
class AutoRequest:
    """What the short form was given; `compile` completes it once the student names its backend."""

    auto: str
    backend: InferenceBackend | None
    run_dir: str | Path | None
    on_event: Callable[[dict[str, Any]], None] | None

    def optimizer_kwargs(
        self, student: dspy.Module, metric: Callable
    ) -> tuple[dict[str, Any], ProgressLines]:
        """The explicit form's arguments: the backend (and trainer) from the student's LM's
        WhaleProvider unless given, a run folder under the working directory unless given; and the
        progress lines the run reports to (the caller keeps them, for the heartbeat)."""
        from optimizers.engine.assembly import optimizer_kwargs

        provider = getattr(_lm_of(student), "provider", None)
        ours = provider if isinstance(provider, ServingProvider) else None
        backend = self.backend or (ours.backend if ours else None)
        if backend is None:
            raise ConfigError(
                "auto= needs a backend: give the student an LM from whale_dspy.LM(...) (its provider "
                "serves and trains), or pass backend="
            )
        show_progress()
        run_dir = Path(self.run_dir or default_run_dir(student))
        progress_log.info("run folder %s%s", run_dir, "" if self.run_dir else " (run_dir= chooses another)")
        model = ours.base if ours else (backend.base_model or backend.served_model())
        # adapter names are never reused on a server: each run folder tags its own
        tag = "auto-" + hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:8]
        config = auto_config(self.auto, model=model, run_tag=tag)
        trainer, base = (ours.trainer, ours.base) if ours else (None, None)
        progress = ProgressLines(config.budget, config.budget_unit)
        kwargs = optimizer_kwargs(
            config, run_dir, backend, metric, trainer=trainer, base=base,
            record={"auto": {"level": self.auto, "model": model, **config.record()}},
            on_event=progress if self.on_event is None else _both(progress, self.on_event),
        )  # fmt: skip
        return kwargs, progress


def default_run_dir(student: dspy.Module) -> Path:
    """`whale_runs/<program>-<time>` under the working directory: what the run trained is kept
    where the user works, not in a temporary folder the system cleans."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    folder = Path.cwd() / "whale_runs" / f"{type(student).__name__}-{stamp}"
    return folder if not folder.exists() else folder.with_name(f"{folder.name}-{os.getpid()}")


def _both(*listeners: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def listen(event: dict[str, Any]) -> None:
        for listener in listeners:
            listener(event)

    return listen


def _lm_of(student: dspy.Module) -> dspy.BaseLM | None:
    """The LM the student's predictors use (one set on it), else DSPy's configured LM."""
    lms = {id(p.lm): p.lm for p in student.predictors() if p.lm is not None}
    bound = getattr(student, "bound_lm", None)  # a HarnessProgram carries its LM itself
    return bound or (next(iter(lms.values())) if len(lms) == 1 else None) or dspy.settings.lm
