"""`whale study`: Optuna tunes WHALE's switching schedule; each trial is one budget-capped `whale run`.

Trials are scored on the validation split (the run's periodic evaluations run
on it, so the test split is never seen while choosing); the best trial's
best-checkpoint harness and adapter are evaluated on the test split once, at
the end. Several workers (`whale study` processes with the same --storage and
--study-name, on one or many machines) share one study; --server-url lets them
share one inference server too (adapter names carry the study and trial).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import socket
import uuid
from collections.abc import Callable
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any

from whale_cli.arguments import add_run_arguments
from whale_cli.run_settings import RunSettings
from whale_cli.settings_file import given_settings
from whale_cli.wiring import (
    DATA_SEED,
    RunData,
    evaluate_on_test,
    load_data,
    make_backend,
    make_optimizer,
    name_part,
    served,
    shared_evaluations,
    student_of,
)
from whale_dspy.errors import ConfigError, WhaleError


def register(subparsers: argparse._SubParsersAction) -> None:
    from optimizers.study import PRUNERS

    parser = subparsers.add_parser(
        "study", help="tune the switching schedule with Optuna (pruning, shared storage)"
    )
    add_run_arguments(parser, method=False)
    parser.add_argument(
        "--trials", type=int, required=True, help="finished trials wanted, all workers together"
    )
    parser.add_argument("--storage", help="sqlite:///F.db, postgresql://..., mysql://..., journal:///F.log")
    parser.add_argument("--study-name", dest="study_name", default=None, help="default whale-DOMAIN-bBUDGET")
    parser.add_argument("--pruner", choices=PRUNERS, default="patient-median")
    parser.add_argument(
        "--startup-trials",
        dest="startup_trials",
        type=int,
        default=3,
        help="patient-median: completed trials before any pruning (default 3)",
    )
    parser.add_argument(
        "--prune-patience",
        dest="prune_patience",
        type=int,
        default=2,
        help="patient-median: evaluations without a new best before a trial may be stopped (default 2)",
    )
    parser.add_argument("--out", type=Path, default=Path("studies"), help="trial run directories and figures")
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of every trial's run (common random numbers)"
    )
    parser.add_argument(
        "--sampler-seed", dest="sampler_seed", type=int, help="TPE seed (default random per worker)"
    )
    parser.add_argument(
        "--enqueue",
        action="append",
        default=[],
        metavar="SCHEDULE",
        help="a schedule to try first (repeatable; must lie in the search space)",
    )
    parser.add_argument("--val-limit", dest="val_limit", type=int, help="at most N validation tasks")
    parser.add_argument("--space", type=Path, help="JSON file of search ranges overriding the defaults")
    parser.add_argument(
        "--no-test", dest="no_test", action="store_true", help="skip the final test evaluation"
    )
    parser.set_defaults(func=run)


def study_config(args: argparse.Namespace, settings: RunSettings) -> Any:
    """The StudyConfig from the flags; every check that needs no server happens here."""
    from optimizers.engine import parse_schedule
    from optimizers.study import SearchSpace, StudyConfig

    space = SearchSpace()
    if args.space is not None:
        try:
            space = SearchSpace.from_dict({**space.to_dict(), **json.loads(args.space.read_text())})
        except (OSError, ValueError, TypeError) as error:
            raise ConfigError(f"--space {args.space}: {error}") from error
    return StudyConfig(
        study_name=args.study_name or f"whale-{settings.domain}-b{settings.budget}",
        trials=args.trials,
        budget=settings.budget,
        report_every=settings.every,
        storage=args.storage,
        pruner=args.pruner,
        startup_trials=args.startup_trials,
        patience=args.prune_patience,
        enqueue=tuple(parse_schedule(spec) for spec in args.enqueue),
        seed=args.sampler_seed,
        space=space,
    )


def run_settings(args: argparse.Namespace) -> RunSettings:
    given = given_settings(args)  # the flags and the --config file together
    if "schedule" in given:
        raise ConfigError(
            "whale study searches the schedule: drop --schedule, or `schedule` from the --config file "
            "(narrow the range with --space)"
        )
    if "domain" not in given or "budget" not in given:
        raise ConfigError(
            "whale study needs --domain and --budget (rollouts per trial), as flags or in --config"
        )
    return RunSettings(**given)


def run_arguments(settings: RunSettings) -> list[str]:
    """The `whale run` flags that reproduce these settings (defaults left out), schedule aside."""
    defaults = RunSettings(domain=settings.domain)
    argv = ["--domain", settings.domain]
    for f in fields(RunSettings):
        value = getattr(settings, f.name)
        if f.name not in ("domain", "schedule", "run_tag") and value != getattr(defaults, f.name):
            argv += [f"--{f.name.replace('_', '-')}", str(value)]
    return argv


def make_trial_optimizer(
    settings: RunSettings, run_dir: Path, backend: Any, data: RunData, **options: Any
) -> Any:
    """`make_optimizer` with adapter names tagged by study and trial, so trials can share one server."""
    tagged = dataclasses.replace(settings, run_tag=options.pop("tag"))
    return make_optimizer(tagged, run_dir, backend, data, **options)


class StudyTrials:
    """Runs trials as WHALE runs on one started backend, and evaluates the chosen one on the test split."""

    def __init__(
        self,
        settings: RunSettings,
        data: RunData,
        valset: list,
        backend: Any,
        out: Path,
        *,
        tag: str,
        wilcoxon: bool,
        build: Callable[..., Any] = make_trial_optimizer,
    ):
        self.settings, self.data, self.valset, self.backend = settings, data, valset, backend
        self.out, self.tag, self.wilcoxon, self.build = out, tag, wilcoxon, build
        self.shared = shared_evaluations(settings, out)  # every trial starts from the same base program

    def __call__(self, context: Any, reporter: Any) -> float:
        # the schedule and any harness-decision settings the space tunes (confidence, race_start)
        settings = replace(self.settings, schedule=context.schedule.spec(), **context.decisions)
        run_dir = self.out / context.name
        reporter.record(run_dir=str(run_dir.resolve()), host=socket.gethostname())
        listener = ValidationListener(reporter, run_dir, wilcoxon=self.wilcoxon)
        tag = f"{self.tag}-{context.name}"
        optimizer = self.build(
            settings, run_dir, self.backend, self.data, on_event=listener, tag=tag, shared_evals=self.shared
        )
        program = optimizer.compile(
            student_of(self.data, self.backend, self.settings),
            trainset=self.data.trainset,
            valset=self.data.searchset,
            track=self.valset,  # the periodic evaluations score validation tasks, never test
            track_name="val",
        )
        report = program.report
        reporter.record(rollouts=report.spend.rollouts, final_validation=report.final.mean_at_k)
        return report.best.mean_at_k

    def test(self, trial: Any) -> float:
        """Test mean@k of the trial's best checkpoint, under a fresh adapter name (names are never reused)."""
        from whale_dspy.harness import HarnessSource
        from whale_dspy.records import AdapterRef

        harness = Path(trial.user_attrs["best_harness"])
        if not harness.exists():
            raise WhaleError(
                f"trial {trial.number} ran on {trial.user_attrs.get('host')}: {harness} is not here"
            )
        adapter, name = trial.user_attrs.get("best_adapter"), None
        if adapter:
            ref = AdapterRef(**{**adapter, "name": f"{adapter['name']}-test-{uuid.uuid4().hex[:6]}"})
            self.backend.load_adapter(ref)
            name = ref.name
        result = evaluate_on_test(
            self.data, self.backend, self.settings, HarnessSource.from_path(harness), adapter=name,
            k=self.settings.eval_k, trace_path=self.out / f"test-trial-{trial.number:04d}.jsonl",
        )  # fmt: skip
        return result.mean_at_k


class ValidationListener:
    """Feeds each periodic validation evaluation to the trial's reporter; remembers the best checkpoint."""

    def __init__(self, reporter: Any, run_dir: Path, *, wilcoxon: bool):
        self.reporter, self.run_dir, self.wilcoxon = reporter, run_dir, wilcoxon
        self.best = float("-inf")

    def __call__(self, event: dict[str, Any]) -> None:
        if event["kind"] != "evaluation":
            return
        from optimizers.engine import read_state
        from whale_dspy.rundir import RunDir

        if event["mean_at_k"] > self.best:
            self.best = event["mean_at_k"]
            state = read_state(RunDir(self.run_dir))
            self.reporter.record(
                best_validation=self.best, best_rollouts=event["rollouts"], best_adapter=state.adapter,
                best_harness=str((self.run_dir / state.harness["path"]).resolve()),
            )  # fmt: skip
        per_task = event["per_task"] if self.wilcoxon else None
        self.reporter.report(event["rollouts"], event["mean_at_k"], per_task)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from optimizers.study import open_study, run_study, save_plots, summarize

    console = Console()
    settings = run_settings(args)
    config = study_config(args, settings)
    study = open_study(config)  # storage and search space are checked before any server starts
    out = args.out / name_part(config.study_name, "study")
    data = load_data(settings)
    valset = data.domain.load("val", args.val_limit, DATA_SEED)
    with served(make_backend(settings, out, args.server_url)) as backend:
        wilcoxon = config.pruner == "wilcoxon"
        trials = StudyTrials(
            settings, data, valset, backend, out, tag=name_part(config.study_name, "study"), wilcoxon=wilcoxon
        )
        run_study(config, trials, study)
        plots = save_plots(study, out / "plots")  # before the summary, which fails if no trial completed
        summary = summarize(study, run_arguments(settings), None if args.no_test else trials.test)
    (out / "summary.json").write_text(json.dumps(asdict(summary), indent=2, default=str))
    print_summary(console, summary, config, plots)
    return 0


def print_summary(console: Any, summary: Any, config: Any, plots: list[Path]) -> None:
    console.print(f"study {config.study_name}: trials {summary.counts}")
    console.print(
        f"best trial {summary.best_trial}: validation mean@k {summary.validation:.3f} ({summary.schedule})"
    )
    if summary.test is not None:
        console.print(f"test mean@k of its best checkpoint (measured once): {summary.test:.3f}")
    console.print(f"run it again with:\n  {summary.command}")
    for path in plots:
        console.print(f"figure: {path}")
    if config.storage:
        target = config.storage.removeprefix("journal://")  # the dashboard takes a journal file's path
        console.print(f"browse the study with: optuna-dashboard {target}")
