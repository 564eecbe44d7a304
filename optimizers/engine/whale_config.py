"""`WhaleConfig`: the alternation's own configuration, as TRL's `SFTConfig` is its trainer's.

It holds what the engine decides with (budget and its unit, schedule, method, evaluation cadence
and k, the proposer) and the two phases' own configs (`RFTConfig`, `MetaHarnessConfig`); nothing
about where the data, the servers, the trainer's host or an agent's jail are: those are the
command line's record (whale_cli.run_settings), which lays its choices over a WhaleConfig. The
short form (`auto=`) and `whale run` both build their optimizer from one of these
(optimizers.engine.assembly), so each default has one home: the presets and the fields below.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from optimizers.engine.presets import DEFAULT_PRESET, get_preset
from optimizers.harness.config import MetaHarnessConfig
from optimizers.weights.config import RFTConfig
from whale_dspy.defaults import DEFAULT_EVAL_K
from whale_dspy.errors import ConfigError

DECISION_FIELDS = ("acceptance", "confidence", "margin", "selection_tasks", "race_start")
"""MetaHarnessConfig fields a run may set for its harness decisions (the rest are the preset's)."""


@dataclass(frozen=True)
class WhaleConfig:
    """budget: in `budget_unit`s (rollouts, calls or tokens; optimizers.engine.budget); schedule: a
    spec (optimizers.engine.schedules); method: whale or a baseline, `weight_share` for stagewise;
    eval_every: a checkpoint evaluation every this many budget units (None: ten over the budget);
    eval_k: samples per tracked task; proposer: the harness phase's (optimizers.harness.proposers);
    rft / meta_harness: the phases' own configs, sized by a preset (`for_preset`)."""

    rft: RFTConfig
    meta_harness: MetaHarnessConfig
    budget: int = 2000
    budget_unit: str = "rollouts"
    schedule: str = "fixed:0.6,5"
    method: str = "whale"
    weight_share: float | None = None
    eval_every: int | None = None
    eval_k: int = DEFAULT_EVAL_K
    proposer: str = "mutation"

    def __post_init__(self) -> None:
        from optimizers.engine.budget import Budget
        from optimizers.engine.methods import get_method
        from optimizers.engine.schedules import parse_schedule

        Budget(self.budget, self.budget_unit)
        parse_schedule(self.schedule)
        get_method(self.method)  # whether weight_share applies is checked where the method is built
        for name in ("eval_every", "eval_k"):
            value = getattr(self, name)
            if value is not None and not (type(value) is int and value >= 1):
                raise ConfigError(f"WhaleConfig.{name} must be an int >= 1, got {value!r}")

    @classmethod
    def for_preset(
        cls,
        preset: str = DEFAULT_PRESET,
        *,
        seed: int = 0,
        run_tag: str | None = None,
        sizing: Any = None,
        decision: dict[str, Any] | None = None,
        **fields: Any,
    ) -> WhaleConfig:
        """The config a preset sizes, with the run's seed and adapter tag laid over its phases, a GPU
        run's `sizing` (threads, trainer device, gradient checkpointing; optimizers.engine.presets)
        over both, and `decision` (DECISION_FIELDS) over the harness phase's."""
        from optimizers.engine.methods import get_method

        chosen = get_preset(preset)
        method = fields.get("method", cls.method)
        tag = run_tag or f"{method}-{seed}"
        rft = chosen.rft_config(seed=seed, run_tag=tag)
        sized = {}
        if sizing is not None:
            training = replace(
                rft.training, device=sizing.train_device, gradient_checkpointing=sizing.gradient_checkpointing
            )
            rft, sized = replace(rft, threads=sizing.threads, training=training), {"threads": sizing.threads}
        unknown = set(decision or ()) - set(DECISION_FIELDS)
        if unknown:
            valid = ", ".join(DECISION_FIELDS)
            raise ConfigError(f"not a decision field: {', '.join(sorted(unknown))}; valid: {valid}")
        meta = chosen.meta_harness_config(
            seed=seed, prompt_only=get_method(method).prompt_only, **sized, **(decision or {})
        )
        return cls(rft=rft, meta_harness=meta, **fields)

    @property
    def every(self) -> int:
        """Checkpoint evaluations every this many budget units (default: ten over the budget)."""
        return self.eval_every or max(1, self.budget // 10)

    @property
    def sampling(self) -> dict[str, Any]:
        """LM request settings of every program a run binds and evaluates: the weight phase's, so
        that checkpoints from either phase (and `whale eval` of them) share one completion budget."""
        return {"temperature": self.rft.temperature, "max_tokens": self.rft.max_tokens}

    def record(self) -> dict[str, Any]:
        """The engine's part of a run folder's config.json (the phases' configs are recorded beside it)."""
        fields = asdict(self)
        del fields["rft"], fields["meta_harness"]
        return fields
