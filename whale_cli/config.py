"""`whale config show`: the settings `whale run` would use with these options, resolved and checked.

It prints them as a settings file (`whale run --config FILE` reads it back), then,
as comments, what they resolve to: the sampling every checkpoint is measured under
and the weight phase's preset. Nothing starts: no server, no data beyond the check.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, replace
from typing import Any

from optimizers.engine import AUTO, auto_level, get_preset
from whale_cli.arguments import add_run_arguments, add_seed_argument
from whale_cli.run_settings import RunSettings
from whale_cli.settings_file import given_settings, settings_from_args, settings_toml
from whale_dspy.errors import ConfigError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("config", help="print resolved run settings (a valid --config file)")
    commands = parser.add_subparsers(dest="config_command", required=True, metavar="SUBCOMMAND")
    show = commands.add_parser("show", help="the settings `whale run` would use with these options")
    add_run_arguments(show)
    add_seed_argument(show)
    show.add_argument(
        "--auto", choices=tuple(AUTO["cpu"]),
        help="the settings of WhaleOptimizer(metric=..., auto=LEVEL) on a user's program (flags on top)",
    )  # fmt: skip
    show.add_argument("--machine", choices=tuple(AUTO), help="size --auto for it (default: this one)")
    show.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        settings = auto_from_args(args) if args.auto else settings_from_args(args)
    except TypeError as error:  # RunSettings' one required field
        raise ConfigError("the settings need a domain: --domain, or `domain = ...` in the file") from error
    show_settings(settings)
    return 0


PROGRAM = "dspy-program"
"""What a settings file calls the domain of a run on a user's own program and data."""


def auto_from_args(args: argparse.Namespace) -> RunSettings:
    """What the Python short form builds for `--auto` on `--model` (its preset, budget, schedule and
    decision rule), with the other flags laid over it."""
    given = given_settings(args)
    machine, level = auto_level(args.auto, args.machine)
    model = given.pop("model", None) or RunSettings.model
    auto = RunSettings(
        domain=PROGRAM, model=model, preset=machine, budget=level.budget, schedule=level.schedule,
        **level.decision,
    )  # fmt: skip
    return replace(auto, **given)


def show_settings(settings: RunSettings) -> None:
    """Check the names the settings hold, then print them as a settings file with what they resolve to
    as comments (`whale config show`, `whale run --dry-run`)."""
    from domains import get_domain
    from optimizers.engine import get_method, parse_schedule

    if settings.domain != PROGRAM:  # a user's own program has no registered domain
        get_domain(settings.domain)
    get_method(settings.method, weight_share=settings.weight_share)
    parse_schedule(settings.schedule)
    print(settings_toml(settings), end="")
    resolved: dict[str, Any] = {"sampling": settings.sampling}
    sizing = settings.gpu_sizing()
    if sizing is not None:
        resolved["gpu_sizing"] = sizing.to_dict()
    elif get_preset(settings.preset).sized_on_gpu:  # a GPU file checked where no GPU is
        resolved["gpu_sizing"] = "not sized here: give --gpu-memory-gib, or run where the GPUs are"
    config = settings.whale_config(sizing)
    resolved["weight_phase"] = config.rft.to_dict()
    resolved["harness_phase"] = asdict(config.meta_harness)  # feedback and selection tasks, the rule
    print("\n# resolved (not settings: derived from the preset and the settings above):")
    for line in json.dumps(resolved, indent=2).splitlines():
        print(f"# {line}")
