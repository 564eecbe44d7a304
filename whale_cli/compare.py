"""`whale compare`: several methods on the same seeds, tasks and rollout budget, sharing one server.

Each (method, seed) is an ordinary run directory under OUT/METHOD/seed-S, so an
interrupted comparison continues where it stopped when run again. --schedule
may be repeated (WHALE fixed and adaptive in one table): whale then runs once
per schedule, under OUT/whale-KIND/seed-S, and the baselines once, under the
first schedule (fst alternates by it; the others do not consult one).
All runs start from the seed harness on base weights, so that program's
evaluation is measured once and shared (OUT/shared-evals). OUT gets the
Markdown table (best and final mean@k with CIs, mean over seeds) and the plot
of accuracy against rollouts per method.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from functools import partial
from pathlib import Path

from rich.console import Console

from whale_cli.arguments import add_restarts_argument, add_run_arguments, schedule_help
from whale_cli.report import print_summary, write_outputs
from whale_cli.run import check_same_settings, execute
from whale_cli.run_settings import RunSettings
from whale_cli.settings_file import given_settings
from whale_cli.wiring import RestartingServer, load_data, make_backend, name_part, shared_evaluations
from whale_dspy.errors import ConfigError
from whale_dspy.reporting.tables import SWEPT

ALL_METHODS = "whale,weight-only,harness-only,fst,stagewise"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("compare", help="run several methods on the same seeds and budget")
    add_run_arguments(parser, method=False, schedule=False)
    add_restarts_argument(parser)
    parser.add_argument(
        "--schedule", action="append", help=f"{schedule_help()}; repeat to run whale under each"
    )
    parser.add_argument("--methods", default=ALL_METHODS, help=f"comma-separated (default {ALL_METHODS})")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    parser.add_argument("--out", type=Path, help="default runs/compare-DOMAIN")
    parser.set_defaults(func=run)


def plan(args: argparse.Namespace) -> tuple[list[tuple[RunSettings, Path]], Path]:
    """Every (settings, run dir) of the comparison, validated before the server starts."""
    from optimizers.engine import get_method, parse_schedule
    from whale_dspy.reporting.tables import schedule_label

    given = given_settings(args)
    if not given.get("domain"):
        raise ConfigError("whale compare needs --domain (or `domain = ...` in its --config file)")
    if {"method", "seed"} & set(given):
        raise ConfigError("whale compare takes methods and seeds from --methods and --seeds, not from a file")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for method in methods:
        get_method(method)
    specs = getattr(args, "schedule", None) or [given.get("schedule", RunSettings.schedule)]
    if len({parse_schedule(spec) for spec in specs}) < len(specs):
        raise ConfigError(f"--schedule lists one schedule twice: {specs}")
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        raise ConfigError(f"--seeds must be comma-separated integers, got {args.seeds!r}") from None
    if not methods or not seeds:
        raise ConfigError("whale compare needs at least one method and one seed")
    base = RunSettings(**{**given, "schedule": specs[0]}).pinned()
    out = args.out or Path("runs") / f"compare-{base.domain}"
    runs = []
    for seed in seeds:
        for method in methods:
            for spec in specs if method == SWEPT else specs[:1]:
                settings, name = replace(base, method=method, seed=seed, schedule=spec), method
                if len(specs) > 1 and method == SWEPT:
                    name = f"{method}-{name_part(schedule_label(spec, specs), 'schedule')}"
                    settings = replace(settings, run_tag=f"{name}-{seed}")  # adapter names stay distinct
                runs.append((settings, out / name / f"seed-{seed}"))
    for settings, run_dir in runs:
        check_same_settings(settings, run_dir)
    return runs, out


def run(args: argparse.Namespace) -> int:
    console = Console()
    runs, out = plan(args)
    data = load_data(runs[0][0])
    shared = shared_evaluations(runs[0][0], out)  # the seed program is scored once
    make = partial(make_backend, runs[0][0], out, args.server_url)
    with RestartingServer(make, restarts=args.server_restarts) as server:
        reports = [
            server.run(
                lambda backend, settings=settings, run_dir=run_dir: execute(
                    settings, run_dir, backend, data, console=console, shared_evals=shared
                )
            )
            for settings, run_dir in runs
        ]
    table, plot = write_outputs(
        out, reports, title=f"{runs[0][0].domain}: methods on {runs[0][0].budget} rollouts"
    )
    print_summary(console, reports)
    console.print(f"wrote {table} and {plot}")
    return 0
