"""`RunSettings`: the command line's record of a run, validated when built, kept in its run folder.

It holds what `whale run` was asked for: the data (domain and limits), the model and its servers
(replicas, adapter serving and store), the trainer's host (device, launcher, chat template switch),
an agent's jail, and the engine's own knobs, which it lays over a preset as a `WhaleConfig`
(`whale_config`): the engine never sees this record. The CLI's flags and `--config` file parse text
into it, and `whale config show` prints it resolved.

The run's config.json holds `RunSettings.record()`, so `whale run --resume DIR` rebuilds exactly
the same run from the directory alone (`RunSettings.from_run`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from optimizers.engine import DECISION_FIELDS, DEFAULT_PRESET, WhaleConfig, get_preset, run_sizing
from whale_dspy.backends.vllm_server import ADAPTER_SERVING, DEFAULT_MODEL, thinking_template_kwargs
from whale_dspy.errors import ConfigError
from whale_dspy.rundir import RunDir


@dataclass(frozen=True)
class RunSettings:
    """Everything `whale run` was asked for; one run directory holds exactly one of these. The
    engine's knobs default to WhaleConfig's (their one home)."""

    domain: str
    method: str = WhaleConfig.method
    schedule: str = WhaleConfig.schedule
    budget: int = WhaleConfig.budget
    model: str = DEFAULT_MODEL
    seed: int = 0
    eval_every: int | None = None
    eval_k: int = WhaleConfig.eval_k
    proposer: str = WhaleConfig.proposer
    preset: str = DEFAULT_PRESET
    weight_share: float | None = None
    train_limit: int | None = None
    search_limit: int | None = None
    test_limit: int | None = None
    run_tag: str | None = None
    """Adapter-name tag; defaults to method-seed. Runs sharing a server need distinct tags."""
    agent_read: tuple[str, ...] = ()
    agent_env: tuple[str, ...] = ()
    agent_network: bool = False
    """What the jail of a `command:` proposer's agent grants (see `add_agent_arguments`)."""
    adapters: str = "auto"
    """How the run's own server serves adapters: "merged" into the weights (no per-token LoRA
    cost; the CPU build's "auto"), or "runtime" LoRA by name (GPUs' "auto")."""
    replicas: int = 1
    """How many servers the run starts for itself; more than one serve runtime LoRA behind one
    replica set (whale_dspy.backends.replicas), each call on the least busy."""
    adapter_store: str | None = None
    """Where a replica set publishes adapters for every replica to read (a shared file system when
    replicas run on other hosts); default the run folder's `adapter-store`."""
    train_device: str | None = None
    """Where the trainer puts the model (cpu, cuda, cuda:N: off the serving GPU); default the preset's."""
    train_launcher: tuple[str, ...] = ()
    """A command prefix that runs each training elsewhere (`ssh trainhost`, `srun --gres=gpu:1`), with
    the run folder at the same path there (see LoraTrainer)."""
    thinking: bool | None = None
    """A chat template's thinking switch (Qwen3's `enable_thinking`), set once for both sides: the
    run's own servers render every prompt with it and the trainer renders its prompts the same way.
    None leaves the template's default (a server someone else runs needs the same switch:
    `whale serve --no-thinking`, or vLLM's `--default-chat-template-kwargs`)."""
    gpu_memory_gib: tuple[float, ...] = ()
    """Each GPU's memory, for sizing a GPU preset's run; default what torch sees when the run starts
    (give it to size a run, or check a GPU settings file, on a machine without the GPUs)."""

    budget_unit: str = WhaleConfig.budget_unit
    """What `budget` counts: rollouts, policy LM calls or completion tokens (optimizers.engine.budget)."""
    max_tokens: int | None = None
    """Each LM call's completion budget in the run (weight phase, harness phase, checkpoints and a
    `whale eval` of the run): a domain whose answers reason at length (GSM8K) needs more than the
    cpu preset's; None: the preset's."""
    acceptance: str | None = None
    confidence: float | None = None
    margin: float | None = None
    selection_tasks: int | None = None
    race_start: int | None = None
    """How harness phases decide (MetaHarnessConfig's fields of those names); None: its default."""

    LATER_FIELDS: ClassVar[dict[str, Any]] = {
        "thinking": None,
        "gpu_memory_gib": (),
        "budget_unit": "rollouts",
        "max_tokens": None,
        **dict.fromkeys(DECISION_FIELDS),
    }
    """Fields added after runs were recorded, with what a record without them meant: a record leaves
    a field out while it holds that value, so a run recorded before it resumes (RunDir compares
    records key by key), and a record read back gets that value, not whatever the default is now."""

    def record(self) -> dict[str, Any]:
        """The settings as the run folder records them (JSON types: tuples become lists)."""
        fields = {
            key: value
            for key, value in asdict(self).items()
            if key not in self.LATER_FIELDS or value != self.LATER_FIELDS[key]
        }
        return json.loads(json.dumps(fields))

    def __post_init__(self) -> None:
        get_preset(self.preset)
        if self.adapters not in ADAPTER_SERVING:
            raise ConfigError(
                f"unknown adapter serving {self.adapters!r}; valid: {', '.join(ADAPTER_SERVING)}"
            )
        if self.replicas < 1:
            raise ConfigError(f"replicas must be >= 1, got {self.replicas}")
        if self.replicas > 1 and self.adapters == "merged":
            raise ConfigError("replicas serve runtime LoRA: --adapters merged swaps one server's weights")
        object.__setattr__(self, "agent_read", tuple(str(Path(p).resolve()) for p in self.agent_read))
        object.__setattr__(self, "agent_env", tuple(self.agent_env))
        object.__setattr__(self, "train_launcher", tuple(self.train_launcher))
        object.__setattr__(self, "gpu_memory_gib", tuple(float(gib) for gib in self.gpu_memory_gib))
        harness = self.whale_config().meta_harness  # the engine's fields, checked before anything starts
        if self.search_limit is not None and harness.selection_tasks and self.search_limit <= harness.tasks:
            raise ConfigError(
                f"search_limit {self.search_limit} leaves no selection tasks: the harness phase shows "
                f"{harness.tasks} to its proposer and decides on up to {harness.selection_tasks} others "
                f"(give --search-limit {harness.tasks + harness.selection_tasks}, or --selection-tasks 0 to "
                "decide on the tasks the proposer sees, as WHALE did)"
            )

    def decision(self) -> dict[str, Any]:
        """The harness decision settings given (MetaHarnessConfig fields); the rest take its defaults."""
        return {key: getattr(self, key) for key in DECISION_FIELDS if getattr(self, key) is not None}

    @property
    def agent_jail(self) -> Any:
        """The jail a `command:` proposer's agent runs in."""
        return agent_jail(self.agent_read, self.agent_env, self.agent_network)

    def whale_config(self, sizing: Any = None) -> WhaleConfig:
        """The engine's configuration these settings ask for: the preset's phases tagged so that
        runs sharing a server never share adapter names, a GPU run's `sizing` over them, and the
        trainer's device and chat template switch over the weight phase's training."""
        config = WhaleConfig.for_preset(
            self.preset, seed=self.seed, run_tag=self.run_tag, sizing=sizing, decision=self.decision(),
            budget=self.budget, budget_unit=self.budget_unit, schedule=self.schedule, method=self.method,
            weight_share=self.weight_share, eval_every=self.eval_every, eval_k=self.eval_k,
            proposer=self.proposer,
        )  # fmt: skip
        training = config.rft.training
        if self.thinking is not None:
            training = replace(training, chat_template_kwargs=thinking_template_kwargs(self.thinking))
        if self.train_device is not None:
            training = replace(training, device=self.train_device)
        rft = replace(config.rft, training=training)
        if self.max_tokens is not None:
            rft = replace(rft, max_tokens=self.max_tokens)
        return replace(config, rft=rft)

    @property
    def every(self) -> int:
        """Test evaluations every this many budget units (`WhaleConfig.every`)."""
        return self.whale_config().every

    def pinned(self) -> RunSettings:
        """A new run's settings with the GPUs it sizes for written in (a GPU preset, none given), so
        that resuming it elsewhere sizes it the same or is refused, never silently resized."""
        if self.gpu_memory_gib or not get_preset(self.preset).sized_on_gpu:
            return self
        from whale_dspy.backends.gpu_sizing import visible_gpu_gib

        return replace(self, gpu_memory_gib=tuple(round(gib, 1) for gib in visible_gpu_gib()))

    def gpu_sizing(self) -> Any:
        """How a GPU preset's run is sized for this model on these GPUs (optimizers.engine.presets:
        `run_sizing`); None for the other presets."""
        return run_sizing(self.preset, self.model, tuple(self.gpu_memory_gib))

    @property
    def sampling(self) -> dict[str, Any]:
        """The run's sampling (`WhaleConfig.sampling`): every program the run binds and evaluates."""
        return self.whale_config().sampling

    @classmethod
    def from_run(cls, run_dir: Path) -> RunSettings:
        config = RunDir(run_dir).config()
        if not config or "cli" not in config:
            raise ConfigError(f"{run_dir} holds no `whale run` (no config.json with its settings)")
        return cls(**{**cls.LATER_FIELDS, **config["cli"]})


def agent_jail(read: Sequence[str], env: Sequence[str], network: bool) -> Any:
    """The jail of a `command:` proposer's agent (paths made absolute, as bubblewrap needs them)."""
    from optimizers.harness import Jail

    return Jail(tuple(str(Path(path).resolve()) for path in read), tuple(env), network)
