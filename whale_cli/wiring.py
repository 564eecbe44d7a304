"""Builds a run from CLI settings: domain data, seed harness, server, trainer, phases, optimizer.

This is the one place that knows every package (domains, harness programs,
backends, optimizers). `RunSettings` is recorded in the run's config.json, so
`whale run --resume DIR` rebuilds exactly the same run from the directory alone.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import dspy

from domains import DOMAIN_HELP
from whale_cli.presets import PRESET_HELP, PRESETS, get_preset
from whale_dspy.backends.vllm_server import ADAPTER_SERVING, DEFAULT_MODEL, thinking_template_kwargs
from whale_dspy.errors import ConfigError
from whale_dspy.harness import HarnessProgram, HarnessSource
from whale_dspy.protocols import Domain, InferenceBackend
from whale_dspy.rundir import RunDir

log = logging.getLogger(__name__)
DATA_SEED = 0
"""Task subsampling does not follow --seed: every method and seed sees the same tasks."""


@dataclass(frozen=True)
class RunSettings:
    """Everything `whale run` was asked for; one run directory holds exactly one of these."""

    domain: str
    method: str = "whale"
    schedule: str = "fixed:0.6,6"
    budget: int = 2000
    model: str = DEFAULT_MODEL
    seed: int = 0
    eval_every: int | None = None
    eval_k: int = 8
    proposer: str = "mutation"
    preset: str = "cpu"
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

    LATER_FIELDS: ClassVar[tuple[str, ...]] = ("thinking", "gpu_memory_gib")
    """Fields added after runs were recorded: a record leaves them out while they hold their
    default, so a run recorded before them resumes (RunDir compares records key by key)."""

    def record(self) -> dict[str, Any]:
        """The settings as the run folder records them (JSON types: tuples become lists)."""
        fields = {key: value for key, value in asdict(self).items() if key not in self.LATER_FIELDS}
        later = {key: getattr(self, key) for key in self.LATER_FIELDS}
        fields |= {key: value for key, value in later.items() if value != getattr(RunSettings, key)}
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
        if self.train_device is not None:
            self.rft_config()  # the trainer's config checks the device now, before anything starts

    @property
    def agent_jail(self) -> Any:
        """The jail a `command:` proposer's agent runs in."""
        return agent_jail(self.agent_read, self.agent_env, self.agent_network)

    @property
    def every(self) -> int:
        """Test evaluations every this many rollouts (default: ten points over the budget)."""
        return self.eval_every or max(1, self.budget // 10)

    def rft_config(self, sizing: Any = None) -> Any:
        """The preset's weight-phase settings, tagged so that runs sharing a server never share names,
        with a GPU run's `sizing` (threads, trainer device, gradient checkpointing) laid over them."""
        tag = self.run_tag or f"{self.method}-{self.seed}"
        config = get_preset(self.preset).rft_config(seed=self.seed, run_tag=tag)
        training = config.training
        if sizing is not None:
            config = replace(config, threads=sizing.threads)
            training = replace(
                training, device=sizing.train_device, gradient_checkpointing=sizing.gradient_checkpointing
            )
        if self.thinking is not None:
            training = replace(training, chat_template_kwargs=thinking_template_kwargs(self.thinking))
        if self.train_device is not None:
            training = replace(training, device=self.train_device)
        return replace(config, training=training)

    def pinned(self) -> RunSettings:
        """A new run's settings with the GPUs it sizes for written in (a GPU preset, none given), so
        that resuming it elsewhere sizes it the same or is refused, never silently resized."""
        if self.gpu_memory_gib or not get_preset(self.preset).sized_on_gpu:
            return self
        from whale_dspy.backends.gpu_sizing import visible_gpu_gib

        return replace(self, gpu_memory_gib=tuple(round(gib, 1) for gib in visible_gpu_gib()))

    def gpu_sizing(self) -> Any:
        """How a GPU preset's run is sized for this model on these GPUs; None (the preset's fixed
        sizes, with a warning) for other presets, where no GPU is visible and none is given (a
        controller of servers on other hosts), or where the model's shape cannot be read."""
        if not get_preset(self.preset).sized_on_gpu:
            return None
        from whale_dspy.backends.gpu_sizing import visible_gpu_gib

        return _sized_gpu_run(self.preset, self.model, tuple(self.gpu_memory_gib) or tuple(visible_gpu_gib()))

    @property
    def sampling(self) -> dict[str, Any]:
        """The preset's sampling (`Preset.sampling`): every program the run binds and evaluates."""
        return get_preset(self.preset).sampling()

    @classmethod
    def from_run(cls, run_dir: Path) -> RunSettings:
        config = RunDir(run_dir).config()
        if not config or "cli" not in config:
            raise ConfigError(f"{run_dir} holds no `whale run` (no config.json with its settings)")
        return cls(**config["cli"])


def add_model_argument(parser: argparse.ArgumentParser, default: str | None = DEFAULT_MODEL) -> None:
    """--model of the commands that serve one model (eval, search, train, serve, smoke)."""
    help_text = f"embedded model name, local folder or hub id (default {DEFAULT_MODEL})"
    parser.add_argument("--model", default=default, help=help_text)


def add_thinking_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--thinking", action=argparse.BooleanOptionalAction, default=None,
        help="the chat template's thinking switch (Qwen3), for serving and training alike "
        "(default: the template's own)",
    )  # fmt: skip


def thinking_server_options(server_url: str | None, thinking: bool | None) -> dict[str, Any]:
    """`backend_for_model` options that give the command's own server the thinking switch (a server
    at `server_url` was started with its own: `whale serve --no-thinking`)."""
    kwargs = thinking_template_kwargs(thinking)
    return {"chat_template_kwargs": kwargs} if kwargs and not server_url else {}


def add_seed_argument(parser: argparse.ArgumentParser) -> None:
    """`--seed` of a single run (`whale compare` takes `--seeds`)."""
    parser.add_argument(
        "--seed", type=int, help=f"seed of the phases' sampling and search (default {RunSettings.seed})"
    )


def schedule_help() -> str:
    from optimizers.schedules import SCHEDULE_HELP

    return f"{SCHEDULE_HELP} (default {RunSettings.schedule})"


def proposer_help() -> str:
    """The proposer registry's forms, and the CLI's own MODEL value."""
    from optimizers.proposers import PROPOSER_HELP

    return f"{PROPOSER_HELP} (MODEL 'served': the run's own served model)"


def add_run_arguments(parser: argparse.ArgumentParser, *, method: bool = True, schedule: bool = True) -> None:
    """The options `run`, `compare` and `study` share (defaults live in RunSettings)."""
    from optimizers.methods import METHODS

    parser.add_argument(
        "--config", type=Path, metavar="FILE",
        help="run settings from a TOML file (RunSettings fields); flags override it (`whale config show`)",
    )  # fmt: skip
    parser.add_argument("--domain", help=DOMAIN_HELP)
    if method:
        parser.add_argument(
            "--method", choices=tuple(METHODS), help=f"whale or a baseline (default {RunSettings.method})"
        )
    if schedule:
        parser.add_argument("--schedule", help=schedule_help())
    parser.add_argument("--budget", type=int, help=f"optimization rollouts (default {RunSettings.budget})")
    parser.add_argument(
        "--model", help=f"embedded model name, local folder or hub id (default {RunSettings.model})"
    )
    parser.add_argument("--eval-every", dest="eval_every", type=int, help="rollouts between test evaluations")
    parser.add_argument(
        "--eval-k", dest="eval_k", type=int, help=f"samples per test task (default {RunSettings.eval_k})"
    )
    parser.add_argument(
        "--proposer",
        help=f"harness proposer: {proposer_help()}",
    )
    add_agent_arguments(parser, defaults=False)
    parser.add_argument("--preset", choices=tuple(PRESETS), help=f"phase sizes ({PRESET_HELP})")
    parser.add_argument(
        "--weight-share", dest="weight_share", type=float, help="stagewise: weight budget share"
    )
    for split in ("train", "search", "test"):
        parser.add_argument(
            f"--{split}-limit", dest=f"{split}_limit", type=int, help=f"at most N {split} tasks"
        )
    parser.add_argument(
        "--server-url", dest="server_url",
        help="reuse running servers: one URL, or several comma-separated as replicas (not recorded)",
    )  # fmt: skip
    parser.add_argument(
        "--replicas", type=int, help=f"servers the run starts for itself (default {RunSettings.replicas})"
    )
    parser.add_argument(
        "--train-device", dest="train_device", help="where the trainer puts the model: cpu, cuda, cuda:N"
    )
    add_thinking_argument(parser)
    parser.add_argument(
        "--gpu-memory-gib", dest="gpu_memory_gib", type=float, action="append", metavar="GIB",
        help="a GPU's memory for sizing a gpu preset run (repeat per GPU; default: what torch sees)",
    )  # fmt: skip
    parser.add_argument(
        "--train-launcher", dest="train_launcher", type=shlex.split, metavar="CMD",
        help="run each training through this command prefix (e.g. 'ssh trainhost'; shared run folder)",
    )  # fmt: skip
    parser.add_argument(
        "--adapter-store", dest="adapter_store", metavar="DIR",
        help="where replicas read adapters from (shared by every replica's host; default in the run folder)",
    )  # fmt: skip
    parser.add_argument(
        "--adapters", choices=ADAPTER_SERVING,
        help="the run's own server: adapters merged into the weights or runtime LoRA (auto: merged on CPU)",
    )  # fmt: skip


def agent_jail(read: Sequence[str], env: Sequence[str], network: bool) -> Any:
    """The jail of a `command:` proposer's agent (paths made absolute, as bubblewrap needs them)."""
    from optimizers.proposers import Jail

    return Jail(tuple(str(Path(path).resolve()) for path in read), tuple(env), network)


def add_agent_arguments(parser: argparse.ArgumentParser, *, defaults: bool = True) -> None:
    """What a `command:` proposer's agent may reach from its jail beyond its archive copy.
    `defaults=False` leaves unset options out of the namespace (RunSettings holds the defaults)."""
    empty = [] if defaults else None
    parser.add_argument(
        "--agent-read", dest="agent_read", action="append", default=empty, metavar="PATH",
        help="a path the command proposer's agent may read (its binary, its configuration); repeatable",
    )  # fmt: skip
    parser.add_argument(
        "--agent-env", dest="agent_env", action="append", default=empty, metavar="NAME",
        help="an environment variable the agent gets (its API key); repeatable; nothing else passes",
    )  # fmt: skip
    parser.add_argument(
        "--agent-network", dest="agent_network", action="store_true", default=False if defaults else None,
        help="let the agent reach the network (to call its API)",
    )  # fmt: skip


@dataclass(frozen=True)
class RunData:
    domain: Domain
    seed_harness: HarnessSource
    trainset: list[dspy.Example]
    searchset: list[dspy.Example]
    testset: list[dspy.Example]


def load_data(settings: RunSettings) -> RunData:
    from domains import domain_entry, get_domain
    from harness_programs import seed_harness

    domain = get_domain(settings.domain)
    return RunData(
        domain=domain,
        seed_harness=seed_harness(domain_entry(settings.domain).seed_harness),
        trainset=domain.load("train", settings.train_limit, DATA_SEED),
        searchset=domain.load("search", settings.search_limit, DATA_SEED),
        testset=domain.load("test", settings.test_limit, DATA_SEED),
    )


@functools.cache
def _sized_gpu_run(preset: str, model: str, gpus: tuple[float, ...]) -> Any:
    """`RunSettings.gpu_sizing`, once per process: a run's server and its phases both ask, and the
    answer (read from the model's config, with a warning when it falls back) is the same."""
    from whale_dspy.backends.gpu_sizing import local_model_folder, size_gpu_run
    from whale_dspy.models import resolve_model

    folder = local_model_folder(resolve_model(model)) if gpus else None
    if folder is None:
        why = "no GPU is visible (--gpu-memory-gib sizes it)" if not gpus else "the model is no local folder"
        log.warning("the %s preset runs unsized, at its fixed sizes: %s", preset, why)
        return None
    longest = get_preset(preset).rft_config().training.max_length  # the longest trace trained
    return size_gpu_run(folder, list(gpus), tokens_per_rollout=longest)


def name_part(text: str, default: str) -> str:
    """`text` as a folder and adapter-name part: runs of other characters become one dash."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.") or default


def make_backend(settings: RunSettings, log_dir: Path, server_url: str | None = None) -> InferenceBackend:
    own: dict[str, Any] = {}  # the run's own servers' options (a server someone else runs is set up)
    if not server_url and settings.replicas == 1 and (sizing := settings.gpu_sizing()) is not None:
        own["kv_cache_gib"] = sizing.kv_cache_gib  # replicas sharing a GPU would each take all of it
        own["max_model_len"] = sizing.max_model_len
        own["extra_args"] = ("--gpu-memory-utilization", str(sizing.gpu_memory_utilization))
    own |= thinking_server_options(server_url, settings.thinking)
    return backend_for_model(
        settings.model,
        log_dir,
        server_url,
        adapters=settings.adapters,
        replicas=settings.replicas,
        adapter_store=settings.adapter_store,
        **own,
    )


def backend_for_model(
    model: str,
    log_dir: Path,
    server_url: str | None = None,
    *,
    adapters: str = "auto",
    replicas: int = 1,
    adapter_store: str | None = None,
    **server_options: Any,
) -> InferenceBackend:
    """Running servers at `server_url` (several, comma-separated: a replica set) serving `model`, or
    the run's own (`replicas` of them, each built with `server_options`), not started yet."""
    from whale_dspy.backends import AdapterStore, RemoteServer, ReplicaSet, embedded_server
    from whale_dspy.backends.vllm_server import cpu_build, split_cores
    from whale_dspy.models import resolve_model

    urls = [url.strip() for url in (server_url or "").split(",") if url.strip()]
    if urls and replicas > 1:
        raise ConfigError("--replicas starts the run's own servers: give it or --server-url, not both")
    if urls and adapters == "merged":
        raise ConfigError(
            "--adapters merged needs the run's own server: a shared --server-url serves runtime LoRA"
        )
    log_dir.mkdir(parents=True, exist_ok=True)
    if len(urls) == 1:
        return RemoteServer(urls[0], base_model=resolve_model(model))
    if not urls and replicas == 1:
        return embedded_server(model, run_dir=log_dir, adapters=adapters, **server_options)
    store = AdapterStore(Path(adapter_store) if adapter_store else log_dir / "adapter-store")
    if urls:
        base = resolve_model(model)  # once for the set: every replica serves the same base
        return ReplicaSet([RemoteServer(url, base_model=base) for url in urls], store=store)
    cores: list[str | None] = list(split_cores(replicas)) if cpu_build() else [None] * replicas
    own = [
        embedded_server(
            model,
            run_dir=log_dir / f"replica-{index}",
            adapters="runtime",
            adapter_store=store.root,
            cpu_cores=group,
            **server_options,
        )
        for index, group in enumerate(cores)
    ]
    return ReplicaSet(own, store=store)


def student_of(
    data: RunData, backend: InferenceBackend, settings: RunSettings, adapter: str | None = None
) -> HarnessProgram:
    """The seed harness on the base model (or a loaded adapter), under the run's sampling."""
    lm = backend.lm(adapter, **settings.sampling)
    return HarnessProgram(data.seed_harness, data.domain.signature, data.domain.tools, lm, adapter)


def evaluate_on_test(
    data: RunData,
    backend: InferenceBackend,
    settings: RunSettings,
    source: HarnessSource,
    *,
    adapter: str | None,
    k: int,
    trace_path: Path | None = None,
) -> Any:
    """Test mean@k of `source` (a run's harness) under `adapter`, on the run's checkpoint rollout
    ids; contained, since a run's harness is model-written unless it is the seed's own code."""
    from optimizers.whale import EVAL_NAMESPACE
    from whale_dspy.sandbox import ContainedEvaluator

    program = student_of(data, backend, settings, adapter=adapter).with_source(source)
    report, _ = ContainedEvaluator.for_long_evaluations(threads=8).evaluate(
        program,
        data.testset,
        metric=data.domain.metric,
        lm=program.bound_lm,
        k=k,
        namespace=f"{EVAL_NAMESPACE}-test",
        trace_path=trace_path,
    )
    return report


SERVED_MODEL = "served"
"""A proposer MODEL naming the run's own served model (offline: no API, no key)."""
PROPOSER_MAX_TOKENS = 256
"""Completion budget of a proposer on the served model (a mechanism choice and one sentence)."""


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


def make_phases(settings: RunSettings, backend: InferenceBackend, metric: Callable, run_dir: Path) -> tuple:
    """(weight phase, harness phase, their configs) sized by the preset."""
    from optimizers.meta_harness import MetaHarness, sandboxed_evaluator
    from optimizers.methods import get_method
    from optimizers.proposers import ProposerOptions, proposer_from_spec
    from optimizers.rft import RejectionSamplingFinetune
    from whale_dspy.training.lora_trainer import LoraTrainer

    prompt_only = get_method(settings.method).prompt_only
    sizing = settings.gpu_sizing()
    rft_config = settings.rft_config(sizing)
    preset = get_preset(settings.preset)
    sized = {"threads": sizing.threads} if sizing else {}
    meta_config = preset.meta_harness_config(seed=settings.seed, prompt_only=prompt_only, **sized)
    rft = RejectionSamplingFinetune(
        backend=backend,
        # A shared server may be sampling for other runs while this one trains (see LoraTrainer).
        trainer=LoraTrainer(
            rft_config.training, cpu_threads=1 if backend.shared else None, launcher=settings.train_launcher
        ),
        metric=metric,
        config=rft_config,
        run_dir=RunDir(run_dir),
    )
    options = ProposerOptions(
        seed=settings.seed,
        prompt_only=prompt_only,
        jail=settings.agent_jail,
        make_lm=lambda model: proposer_lm(model, backend),
    )
    proposer = proposer_from_spec(settings.proposer, options)
    meta = MetaHarness(
        proposer=proposer,
        metric=metric,
        archive_dir=run_dir / "harness",
        config=meta_config,
        evaluator=sandboxed_evaluator(meta_config),  # candidate code runs in a contained child
    )
    configs = {"rft": rft_config.to_dict(), "meta_harness": asdict(meta_config)}
    return rft, meta, configs


def make_optimizer(
    settings: RunSettings,
    run_dir: Path,
    backend: InferenceBackend,
    data: RunData,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    shared_evals: Any = None,
) -> Any:
    from optimizers.meta_harness import sandbox_limits
    from optimizers.methods import get_method
    from optimizers.schedules import parse_schedule
    from optimizers.whale import WhaleOptimizer
    from whale_dspy.sandbox import LONG_EVALUATION_SECONDS, ContainedEvaluator

    method = get_method(settings.method, weight_share=settings.weight_share)
    weight, harness, configs = make_phases(settings, backend, data.domain.metric, run_dir)
    # Checkpoint evaluations run searched (model-written) harnesses: contained, with room for k x tasks.
    limits = sandbox_limits(harness.config, candidate_seconds=LONG_EVALUATION_SECONDS, threads=8)
    evaluator = ContainedEvaluator(limits)
    return WhaleOptimizer(
        backend=backend,
        metric=data.domain.metric,
        schedule=parse_schedule(settings.schedule),
        budget=settings.budget,
        run_dir=run_dir,
        eval_every=settings.every,
        eval_k=settings.eval_k,
        evaluator=evaluator,
        weight_phase=weight,
        harness_phase=harness,
        method=method,
        config={"cli": settings.record(), **configs},
        on_event=on_event,
        shared_evals=shared_evals,
        sampling=settings.sampling,
    )


def shared_evaluations(settings: RunSettings, out: Path) -> Any:
    """OUT/shared-evals: where runs on one model and domain (a comparison's methods, a study's
    trials) share the evaluations of identical base-weight programs."""
    from optimizers.shared_evals import SharedEvaluations

    return SharedEvaluations(out / "shared-evals", scope=f"{settings.model}|{settings.domain}")
