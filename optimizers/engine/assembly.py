"""A run's optimizer built from its one configuration (`RunSettings`): phases, proposer, evaluator.

`whale run`, studies and the Python short form (`WhaleOptimizer(metric=..., auto=...)`) all build
through here, so each default (sampling, threads, eval k, phase sizes) has one home: the presets
and RunSettings.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from optimizers.engine.config import RunSettings
from optimizers.engine.presets import get_preset
from whale_dspy.defaults import DEFAULT_THREADS, PROPOSER_MAX_TOKENS
from whale_dspy.errors import ConfigError
from whale_dspy.protocols import InferenceBackend, WeightTrainer
from whale_dspy.rundir import RunDir

SERVED_MODEL = "served"
"""A proposer MODEL naming the run's own served model (offline: no API, no key)."""


def proposer_lm(model: str, backend: InferenceBackend | None) -> Any:
    """A proposer's LM: `served` is the run's own server's base model, anything else a litellm id."""
    import dspy

    if model != SERVED_MODEL:
        return dspy.LM(model)
    if backend is None:
        raise ConfigError(
            f"a proposer on the {SERVED_MODEL!r} model needs a running server: pass --server-url "
            "(start one with `whale serve --model ...`)"
        )
    return backend.lm(max_tokens=PROPOSER_MAX_TOKENS)


def make_phases(
    settings: RunSettings,
    backend: InferenceBackend,
    run_dir: Path,
    trainer: WeightTrainer | None = None,
    base: str | None = None,
) -> tuple:
    """(weight phase, harness phase, their configs) sized by the preset; `trainer` default: a
    LoraTrainer on the preset's training settings; `base` default: what the backend serves. The
    phases score with the optimizer's metric, and each harness phase archives under the run."""
    from optimizers.engine.methods import get_method
    from optimizers.harness.meta_harness import MetaHarness, sandboxed_evaluator
    from optimizers.harness.proposers import ProposerOptions, proposer_from_spec
    from optimizers.weights.rft import RejectionSamplingFinetune

    prompt_only = get_method(settings.method).prompt_only
    sizing = settings.gpu_sizing()
    rft_config = settings.rft_config(sizing)
    sized = {"threads": sizing.threads} if sizing else {}
    meta_config = get_preset(settings.preset).meta_harness_config(
        seed=settings.seed, prompt_only=prompt_only, **sized, **settings.decision()
    )
    rft = RejectionSamplingFinetune(
        backend=backend,
        trainer=trainer or _lora_trainer(settings, rft_config, backend),
        config=rft_config,
        run_dir=RunDir(run_dir),
        base=base,
    )
    options = ProposerOptions(
        seed=settings.seed,
        prompt_only=prompt_only,
        jail=settings.agent_jail,
        make_lm=lambda model: proposer_lm(model, backend),
    )
    meta = MetaHarness(
        proposer=proposer_from_spec(settings.proposer, options),
        config=meta_config,
        evaluator=sandboxed_evaluator(meta_config),  # candidate code runs in a contained child
    )
    configs = {"rft": rft_config.to_dict(), "meta_harness": meta_config.record()}
    return rft, meta, configs


def _lora_trainer(settings: RunSettings, rft_config: Any, backend: InferenceBackend) -> WeightTrainer:
    from whale_dspy.training.lora_trainer import LoraTrainer

    # A shared server may be sampling for other runs while this one trains (see LoraTrainer).
    cpu_threads = 1 if backend.shared else None
    return LoraTrainer(rft_config.training, cpu_threads=cpu_threads, launcher=settings.train_launcher)


def optimizer_kwargs(
    settings: RunSettings,
    run_dir: Path,
    backend: InferenceBackend,
    metric: Callable,
    *,
    trainer: WeightTrainer | None = None,
    base: str | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    shared_evals: Any = None,
) -> dict[str, Any]:
    """WhaleOptimizer's explicit-form arguments for `settings` (the short form is set up from them too)."""
    from optimizers.engine.methods import get_method
    from optimizers.engine.schedules import parse_schedule
    from optimizers.harness.meta_harness import sandbox_limits
    from whale_dspy.sandbox import LONG_EVALUATION_SECONDS, ContainedEvaluator

    weight, harness, configs = make_phases(settings, backend, run_dir, trainer, base)
    # Checkpoint evaluations run searched (model-written) harnesses: contained, with room for k x tasks.
    limits = sandbox_limits(
        harness.config, candidate_seconds=LONG_EVALUATION_SECONDS, threads=DEFAULT_THREADS
    )
    return dict(
        backend=backend,
        metric=metric,
        schedule=parse_schedule(settings.schedule),
        budget=settings.budget,
        budget_unit=settings.budget_unit,
        run_dir=run_dir,
        eval_every=settings.every,
        eval_k=settings.eval_k,
        evaluator=ContainedEvaluator(limits),
        weight_phase=weight,
        harness_phase=harness,
        method=get_method(settings.method, weight_share=settings.weight_share),
        config={"cli": settings.record(), **configs},
        on_event=on_event,
        shared_evals=shared_evals,
        sampling=settings.sampling,
    )
