"""A run's optimizer built from its `WhaleConfig`: phases, proposer, evaluator.

`whale run`, studies and the Python short form (`WhaleOptimizer(metric=..., auto=...)`) all build
through here, so each default (sampling, threads, eval k, phase sizes) has one home: the presets
and WhaleConfig. What only a command line knows (an agent's jail, a trainer's launcher, its own
record of the run) comes in as arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from optimizers.engine.whale_config import WhaleConfig
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
    config: WhaleConfig,
    backend: InferenceBackend,
    run_dir: Path,
    trainer: WeightTrainer | None = None,
    base: str | None = None,
    *,
    jail: Any = None,
    launcher: Sequence[str] = (),
) -> tuple:
    """(weight phase, harness phase, their configs as recorded) from `config`; `trainer` default: a
    LoraTrainer on the config's training settings (through `launcher` when given); `base` default:
    what the backend serves; `jail`: a `command:` proposer agent's (default the proposers'). The
    phases score with the optimizer's metric, and each harness phase archives under the run."""
    from optimizers.harness.meta_harness import MetaHarness, sandboxed_evaluator
    from optimizers.harness.proposers import ProposerOptions, proposer_from_spec
    from optimizers.weights.rft import RejectionSamplingFinetune

    rft = RejectionSamplingFinetune(
        backend=backend,
        trainer=trainer or _lora_trainer(config, backend, launcher),
        config=config.rft,
        run_dir=RunDir(run_dir),
        base=base,
    )
    options = ProposerOptions(
        seed=config.meta_harness.seed,
        prompt_only=config.meta_harness.prompt_only,
        make_lm=lambda model: proposer_lm(model, backend),
        **({"jail": jail} if jail is not None else {}),
    )
    meta = MetaHarness(
        proposer=proposer_from_spec(config.proposer, options),
        config=config.meta_harness,
        evaluator=sandboxed_evaluator(config.meta_harness),  # candidate code runs in a contained child
    )
    configs = {"rft": config.rft.to_dict(), "meta_harness": config.meta_harness.record()}
    return rft, meta, configs


def _lora_trainer(config: WhaleConfig, backend: InferenceBackend, launcher: Sequence[str]) -> WeightTrainer:
    from whale_dspy.training.lora_trainer import LoraTrainer

    # A shared server may be sampling for other runs while this one trains (see LoraTrainer).
    cpu_threads = 1 if backend.shared else None
    return LoraTrainer(config.rft.training, cpu_threads=cpu_threads, launcher=tuple(launcher))


def optimizer_kwargs(
    config: WhaleConfig,
    run_dir: Path,
    backend: InferenceBackend,
    metric: Callable,
    *,
    record: dict[str, Any],
    trainer: WeightTrainer | None = None,
    base: str | None = None,
    jail: Any = None,
    launcher: Sequence[str] = (),
    on_event: Callable[[dict[str, Any]], None] | None = None,
    shared_evals: Any = None,
) -> dict[str, Any]:
    """WhaleOptimizer's explicit-form arguments for `config`; `record` (what the caller asked for,
    recorded in config.json beside the phases' configs, so that a resume must ask the same)."""
    from optimizers.engine.methods import get_method
    from optimizers.engine.schedules import parse_schedule
    from optimizers.harness.meta_harness import sandbox_limits
    from whale_dspy.sandbox import LONG_EVALUATION_SECONDS, ContainedEvaluator

    weight, harness, configs = make_phases(
        config, backend, run_dir, trainer, base, jail=jail, launcher=launcher
    )
    # Checkpoint evaluations run searched (model-written) harnesses: contained, with room for k x tasks.
    limits = sandbox_limits(
        harness.config, candidate_seconds=LONG_EVALUATION_SECONDS, threads=DEFAULT_THREADS
    )
    return dict(
        backend=backend,
        metric=metric,
        schedule=parse_schedule(config.schedule),
        budget=config.budget,
        budget_unit=config.budget_unit,
        run_dir=run_dir,
        eval_every=config.every,
        eval_k=config.eval_k,
        evaluator=ContainedEvaluator(limits),
        weight_phase=weight,
        harness_phase=harness,
        method=get_method(config.method, weight_share=config.weight_share),
        config={**record, **configs},
        on_event=on_event,
        shared_evals=shared_evals,
        sampling=config.sampling,
    )
