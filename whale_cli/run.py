"""`whale run`: one method (WHALE or a baseline) on one domain, seed and rollout budget.

A run directory that already holds a run continues it (`--resume DIR` says so
explicitly and takes the recorded settings); any setting that differs from the
recorded one is refused with the differences listed. The terminal shows a
rollout progress bar and the current phase, then the phase table, the
best/final mean@k table and where the plot went.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from whale_cli.arguments import add_restarts_argument, add_run_arguments, add_seed_argument
from whale_cli.report import decision_cell, print_phases, print_summary, write_outputs
from whale_cli.run_settings import RunSettings
from whale_cli.settings_file import given_settings
from whale_cli.wiring import RestartingServer, RunData, load_data, make_backend, make_optimizer, student_of
from whale_dspy.errors import ConfigError
from whale_dspy.protocols import InferenceBackend
from whale_dspy.rundir import RunDir, config_differences

Builder = Callable[..., Any]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run", help="optimize harness and weights (WHALE or a baseline) on a budget"
    )
    add_run_arguments(parser)
    add_seed_argument(parser)
    add_restarts_argument(parser)
    parser.add_argument("--run-dir", dest="run_dir", type=Path, help="default runs/DOMAIN-METHOD-seedS")
    parser.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue the run recorded in RUN_DIR")
    parser.add_argument(
        "--dry-run", dest="dry_run", action="store_true",
        help="check the settings and print them resolved (as `whale config show`); start nothing",
    )  # fmt: skip
    parser.set_defaults(func=run)


def resolve(args: argparse.Namespace) -> tuple[RunSettings, Path]:
    """Settings from the flags, or the resumed run's with flags on top; checked before any work."""
    given = given_settings(args)
    if args.resume is not None:
        settings, run_dir = replace(RunSettings.from_run(args.resume), **given), args.resume
    elif "domain" not in given:
        raise ConfigError("whale run needs --domain (or --resume RUN_DIR)")
    else:
        settings = RunSettings(**given).pinned()
        run_dir = args.run_dir or Path("runs") / f"{settings.domain}-{settings.method}-seed{settings.seed}"
    check_same_settings(settings, run_dir)
    return settings, run_dir


def check_same_settings(settings: RunSettings, run_dir: Path) -> None:
    """Refuse to continue a recorded run with other settings, before a server starts."""
    recorded = (RunDir(run_dir).config() or {}).get("cli")
    asked = settings.record()
    if recorded is not None and recorded != asked:
        differences = "; ".join(config_differences(recorded, asked))
        raise ConfigError(f"run {run_dir} was started with other settings: {differences}")


class RunProgress:
    """Rich progress for one run: rollouts spent out of the budget and the time left at this pace,
    the current phase and its steps, and each test score as it comes.

    On a console that cannot redraw (a log file, a pipe, CI) the bar would print only at the end, so
    there each checkpoint (a weight step, a harness iteration) and each phase change prints one plain
    line with the bar's facts and the latest test score instead."""

    def __init__(self, console: Console, settings: RunSettings):
        self.live = console.is_interactive  # rich's own test, the one its live display redraws by
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
            console=console,
            disable=not self.live,
        )
        self.unit = {"rollouts": "rollouts", "calls": "lm_calls", "tokens": "completion_tokens"}[
            settings.budget_unit
        ]
        self.rollouts = self.progress.add_task(
            f"{settings.method} {settings.budget_unit}", total=settings.budget
        )
        self.phase = self.progress.add_task("phase", total=None)
        self.score = "no test score yet"

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event["kind"]
        console = self.progress.console
        if kind in ("run_started", "run_resumed"):
            self.progress.update(self.rollouts, completed=event.get("spent", event["rollouts"]))
        elif kind == "phase_started":
            self.progress.reset(self.phase, description=f"{event['phase']} phase (cycle {event['cycle']})")
            self.print_line()
        elif kind in ("weight_step", "harness_iteration"):
            self.progress.advance(self.rollouts, event["signal"].get(self.unit) or 0)
            self.progress.advance(self.phase)
            if event["signal"].get("decision"):
                console.print(f"harness decision: {decision_cell(event['signal']['decision'])}")
            self.print_line()
        elif kind == "evaluation":
            where = f"{event['harness']}, {event['adapter'] or 'base'}"
            truncated = event.get("truncated_calls", 0)  # absent from runs recorded before the count
            cut = f"; {truncated} of its LM calls hit max_tokens" if truncated else ""
            self.score = f"test mean@{event['k']} {event['mean_at_k']:.3f} at {event['rollouts']} rollouts"
            console.print(
                f"test mean@{event['k']} at {event['rollouts']} rollouts: {event['mean_at_k']:.3f} "
                f"[{event['ci_low']:.3f}, {event['ci_high']:.3f}] ({where}{cut})"
            )

    def print_line(self) -> None:
        """The bar as one line, where no bar is drawn: spent/budget, elapsed and left, the phase and
        its steps so far, the latest test score."""
        if self.live:
            return
        spent, phase = self.progress.tasks[self.rollouts], self.progress.tasks[self.phase]
        left = spent.time_remaining
        self.progress.console.print(
            f"{spent.description} {spent.completed:.0f}/{spent.total:.0f}, "
            f"{timedelta(seconds=int(spent.elapsed or 0))} elapsed, "
            f"{'?' if left is None else timedelta(seconds=int(left))} left; "
            f"{phase.description}, {phase.completed:.0f} done; {self.score}",
            highlight=False,
            soft_wrap=True,
        )


def execute(
    settings: RunSettings,
    run_dir: Path,
    backend: InferenceBackend,
    data: RunData,
    *,
    console: Console | None = None,
    build: Builder = make_optimizer,
    shared_evals: Any = None,
) -> dict[str, Any]:
    """Compile (or continue) the run on a started backend, write its outputs, return its report dict."""
    console = console or Console()
    progress = RunProgress(console, settings)
    with progress.progress:
        optimizer = build(settings, run_dir, backend, data, on_event=progress, shared_evals=shared_evals)
        program = optimizer.compile(
            student_of(data, backend, settings),
            trainset=data.trainset,
            valset=data.searchset,
            track=data.testset,
        )
    report = program.report.to_dict()
    table, plot = write_outputs(
        run_dir, [report], title=f"{settings.domain}: {settings.method}, seed {settings.seed}"
    )
    print_phases(console, report)
    print_summary(console, [report])
    console.print(f"wrote {table} and {plot}")
    return report


def run(args: argparse.Namespace) -> int:
    settings, run_dir = resolve(args)
    if args.dry_run:
        from whale_cli.config import show_settings

        show_settings(settings)
        return 0
    data = load_data(settings)
    make = partial(make_backend, settings, run_dir, args.server_url)
    with RestartingServer(make, restarts=args.server_restarts) as server:
        server.run(lambda backend: execute(settings, run_dir, backend, data))
    return 0
