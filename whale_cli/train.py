"""`whale train`: the weight phase alone (rejection-sampling fine-tuning) on one domain's train split.

Starts the server (or uses --server-url), trains LoRA adapters on verified
rollouts of a fixed harness, hot-loads each into the server, and prints one row
per step. Adapters, traces, the event log and report.json land in the run dir.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path
from typing import Any

from domains import DOMAIN_HELP
from optimizers.engine import DEFAULT_PRESET, PRESET_HELP, PRESETS, get_preset
from whale_cli.arguments import add_model_argument, add_thinking_argument
from whale_cli.eval import add_harness_arguments
from whale_dspy.backends.vllm_server import thinking_template_kwargs


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("train", help="run the weight phase alone (RFT of a LoRA adapter)")
    parser.add_argument("--domain", required=True, help=DOMAIN_HELP)
    add_model_argument(parser)
    add_harness_arguments(parser)
    add_thinking_argument(parser)
    parser.add_argument(
        "--preset", choices=tuple(PRESETS), default=DEFAULT_PRESET, help=f"RFT sizes ({PRESET_HELP})"
    )
    parser.add_argument("--steps", type=int, default=None, help="RFT steps (default: the preset's)")
    parser.add_argument("--batch-size", dest="batch_size", type=int, default=None, help="tasks per step")
    parser.add_argument("--k", type=int, default=None, help="rollouts per task")
    parser.add_argument("--max-tokens", dest="max_tokens", type=int, default=None, help="per LM call")
    parser.add_argument(
        "--learning-rate", dest="learning_rate", type=float, default=None, help="LoRA AdamW lr"
    )
    parser.add_argument(
        "--gradient-checkpointing",
        dest="gradient_checkpointing",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="recompute activations in the backward pass: less memory, more time (default: the preset's)",
    )
    parser.add_argument("--train-limit", dest="train_limit", type=int, default=None, help="at most N tasks")
    parser.add_argument("--output-format", dest="output_format", choices=("chat", "json"), default="chat")
    parser.add_argument("--server-url", dest="server_url", default=None, help="use a running server")
    parser.add_argument("--seed", type=int, default=0, help="batch order and rollout ids")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--run-dir", dest="run_dir", type=Path, default=None, help="default runs/train-...")
    where.add_argument(
        "--resume",
        type=Path,
        default=None,
        metavar="RUN_DIR",
        help="continue the run recorded in RUN_DIR after its last step (given the same settings)",
    )
    parser.set_defaults(func=run)


def rft_config_from(args: argparse.Namespace) -> Any:
    """The preset with the flags given on the command line laid over it (validated by RFTConfig)."""
    preset = get_preset(args.preset).rft_config()
    overrides = {
        name: getattr(args, name)
        for name in ("steps", "batch_size", "k", "max_tokens")
        if getattr(args, name) is not None
    }
    training = {
        name: getattr(args, name)
        for name in ("learning_rate", "gradient_checkpointing")
        if getattr(args, name) is not None
    }
    if args.thinking is not None:  # rendered as the server renders it (its --thinking below)
        training["chat_template_kwargs"] = thinking_template_kwargs(args.thinking)
    if training:
        overrides["training"] = dataclasses.replace(preset.training, **training)
    return dataclasses.replace(preset, seed=args.seed, **overrides)


def run(args: argparse.Namespace) -> int:
    from domains import get_domain
    from optimizers.weights import RejectionSamplingFinetune
    from whale_cli.eval import adapter_context, resolve_harness
    from whale_cli.wiring import backend_for_model, served, thinking_server_options
    from whale_dspy.errors import ConfigError
    from whale_dspy.harness import HarnessProgram
    from whale_dspy.jsonl import atomic_write_json
    from whale_dspy.models import resolve_model
    from whale_dspy.rundir import RunDir, sole_writer
    from whale_dspy.training.lora_trainer import LoraTrainer

    config = rft_config_from(args)  # ConfigError before any data or server work
    domain = get_domain(args.domain)
    source = resolve_harness(args.harness, args.domain, trusted=args.trust_harness)
    trainset = domain.load("train", args.train_limit, 0)
    RejectionSamplingFinetune.check_trainset(config, trainset)  # before the server starts
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = args.resume or args.run_dir or Path("runs") / f"train-{args.domain}-{stamp}"
    settings = {
        "domain": args.domain,
        "model": args.model,
        "harness": source.name,
        "harness_digest": source.digest,  # so a resume cannot swap in another file of the same name
        "train_limit": args.train_limit,
        "output_format": args.output_format,
    }
    if args.resume is not None and RunDir(path).config() is None:  # before the lock makes the folder
        raise ConfigError(f"--resume {path}: no run is recorded there")
    with sole_writer(path):
        run_dir = _open_run(path, {"command": "train", **settings, "rft": config.to_dict()}, args.resume)
        own = thinking_server_options(args.server_url, args.thinking)
        with served(backend_for_model(args.model, run_dir.path, args.server_url, **own)) as backend:
            rft = RejectionSamplingFinetune(
                backend=backend,
                trainer=LoraTrainer(config.training),
                metric=domain.metric,
                config=config,
                run_dir=run_dir,
                base=resolve_model(args.model),  # also right for --server-url, whose base the server knows
            )
            student = HarnessProgram(source, domain.signature, domain.tools)
            with adapter_context(args.output_format):
                program = rft.compile(student, trainset=trainset, resume=args.resume is not None)
        atomic_write_json(run_dir.path / "report.json", {**settings, **program.report.to_dict()})
    _print_summary(program.report, run_dir.path)
    return 0


def _open_run(path: Path, config: dict[str, Any], resume: Path | None) -> Any:
    """The run's folder: a new one, or with --resume the recorded one (its settings must match).
    A folder that already holds steps is refused without --resume: its events would repeat steps."""
    from optimizers.weights import STEP_EVENT
    from whale_dspy.errors import ConfigError
    from whale_dspy.jsonl import repair_jsonl
    from whale_dspy.rundir import RunDir

    run_dir = RunDir.open(path, config)
    repair_jsonl(run_dir.events_path)  # a torn last line (a kill) must not swallow the next event
    if resume is None and run_dir.events(STEP_EVENT):
        raise ConfigError(f"run {path} already holds weight steps: continue it with --resume {path}")
    return run_dir


def _print_summary(report: Any, run_path: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"weight phase: {len(report.steps)} RFT steps, {report.rollouts} rollouts")
    for column in ("step", "reward", "accept", "kept", "loss", "adapter", "seconds", "note"):
        table.add_column(column, justify="right")
    for s in report.steps:
        table.add_row(
            str(s.step),
            f"{s.mean_reward:.3f}",
            f"{s.accept_rate:.0%}",
            str(s.accepted),
            "-" if s.train_loss is None else f"{s.train_loss:.4f}",
            s.adapter.name if s.adapter else "base",
            f"{s.seconds:.0f}",
            s.skipped or "",
        )
    console = Console()
    console.print(table)
    final = report.final_adapter
    console.print(f"final adapter: {final.path if final else 'none (base model)'}")
    console.print(f"run directory: {run_path}")
