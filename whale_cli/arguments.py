"""Command-line options shared by several commands; their defaults live in `RunSettings`."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from domains import DOMAIN_HELP
from optimizers.engine import PRESET_HELP, PRESETS
from whale_cli.run_settings import RunSettings
from whale_dspy.backends.vllm_server import ADAPTER_SERVING, DEFAULT_MODEL
from whale_dspy.defaults import SERVER_RESTARTS


def add_model_argument(
    parser: argparse.ArgumentParser, default: str | None = DEFAULT_MODEL, shown: str = DEFAULT_MODEL
) -> None:
    """--model; `default` None leaves it to the command (a run's settings), `shown` says what it is."""
    help_text = f"embedded model name, local folder or hub id (default {shown})"
    parser.add_argument("--model", default=default, help=help_text)


def add_thinking_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--thinking", action=argparse.BooleanOptionalAction, default=None,
        help="the chat template's thinking switch (Qwen3), for serving and training alike "
        "(default: the template's own)",
    )  # fmt: skip


def add_dtype_argument(parser: argparse.ArgumentParser) -> None:
    """--dtype of the command's own server, named as records name it: a machine's default
    (`default_dtype`) can be overridden, say to resume a read begun on another machine."""
    parser.add_argument(
        "--dtype", default=None, choices=("bfloat16", "float16", "float32"),
        help="vLLM --dtype of the command's own server (default: bfloat16 where the hardware has bf16 "
        "math, else float32)",
    )  # fmt: skip


def add_restarts_argument(parser: argparse.ArgumentParser) -> None:
    """--server-restarts of a command whose own server may die mid-run (`whale run`, `whale compare`)."""
    parser.add_argument(
        "--server-restarts", dest="server_restarts", type=int, default=SERVER_RESTARTS, metavar="N",
        help="start the command's own server anew at most N times a run after it died, resuming the run "
        f"from its records (default {SERVER_RESTARTS}; 0 stops at the first death; --replicas above 1 "
        "route around a dead replica, and are started anew together when none answers)",
    )  # fmt: skip


def add_seed_argument(parser: argparse.ArgumentParser) -> None:
    """`--seed` of a single run (`whale compare` takes `--seeds`)."""
    parser.add_argument(
        "--seed", type=int, help=f"seed of the phases' sampling and search (default {RunSettings.seed})"
    )


def schedule_help() -> str:
    from optimizers.engine import SCHEDULE_HELP

    return f"{SCHEDULE_HELP} (default {RunSettings.schedule})"


def proposer_help() -> str:
    """The proposer registry's forms, and the CLI's own MODEL value."""
    from optimizers.harness import PROPOSER_HELP

    return f"{PROPOSER_HELP} (MODEL 'served': the run's own served model)"


def add_decision_arguments(parser: argparse.ArgumentParser) -> None:
    """How a harness phase decides to adopt a candidate (MetaHarnessConfig's fields; its defaults)."""
    from optimizers.harness import ACCEPTANCE_RULES
    from optimizers.harness import MetaHarnessConfig as Config

    rules = "; ".join(f"{name}: {about}" for name, about in ACCEPTANCE_RULES.items())
    parser.add_argument(
        "--acceptance", choices=tuple(ACCEPTANCE_RULES), help=f"{rules} (default {Config.acceptance})"
    )
    parser.add_argument(
        "--confidence", type=float,
        help=f"the paired rule's one-sided confidence over a race (default {Config.confidence})",
    )  # fmt: skip
    parser.add_argument(
        "--margin", type=float, help=f"the gain the paired lower bound must clear (default {Config.margin})"
    )
    parser.add_argument(
        "--selection-tasks", dest="selection_tasks", type=int,
        help="search tasks that only decide adoption, never shown to a proposer; 0 decides on the "
        f"feedback tasks, as WHALE did (default {Config.selection_tasks})",
    )  # fmt: skip
    parser.add_argument(
        "--race-start", dest="race_start", type=int,
        help=f"tasks of a race's first round; rounds double (default {Config.race_start})",
    )  # fmt: skip


def add_run_arguments(parser: argparse.ArgumentParser, *, method: bool = True, schedule: bool = True) -> None:
    """The options `run`, `compare` and `study` share (defaults live in RunSettings)."""
    from optimizers.engine import BUDGET_UNITS, METHODS

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
    parser.add_argument(
        "--budget", type=int, help=f"optimization budget, in --budget-unit (default {RunSettings.budget})"
    )
    parser.add_argument(
        "--budget-unit", dest="budget_unit", choices=tuple(BUDGET_UNITS),
        help="what the budget counts (reports show all three): rollouts, policy LM calls or completion "
        f"tokens (default {RunSettings.budget_unit})",
    )  # fmt: skip
    add_model_argument(parser, default=None, shown=RunSettings.model)
    parser.add_argument("--eval-every", dest="eval_every", type=int, help="rollouts between test evaluations")
    parser.add_argument(
        "--eval-k", dest="eval_k", type=int, help=f"samples per test task (default {RunSettings.eval_k})"
    )
    parser.add_argument(
        "--max-tokens", dest="max_tokens", type=int,
        help="each LM call's completion budget, in every phase and checkpoint (default: the preset's)",
    )  # fmt: skip
    parser.add_argument(
        "--proposer",
        help=f"harness proposer: {proposer_help()}",
    )
    add_agent_arguments(parser, defaults=False)
    add_decision_arguments(parser)
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
