"""Optuna studies over WHALE's switching schedule: one trial = one budget-capped run, scored on validation.

The objective is injected (`run_trial(context, reporter) -> validation mean@k`),
so the study logic is tested with scripted curves and the CLI plugs in the real
WHALE run. The study maximizes validation mean@k; the chosen configuration's
test score is computed once, at the end, by a separate callable.

Pruning x-axis: rollouts spent, snapped down to a grid of `report_every`
rollouts (the run's evaluation interval), because Optuna's median pruner
compares trials only at identical steps and a cycle index means different
amounts of work for different E. Pruners:

- `patient-median` (default): `PlateauPruner(MedianPruner)`. A trial stops
  only if its best validation score so far is below the median of completed
  trials at the same step AND its last `patience` evaluations did not beat
  that best: slow starters (long first weight phases) that keep improving
  survive the noise of small validation sets. (Optuna's `PatientPruner` never
  stops a trial on an exact plateau; see `optimizers.study.pruners`.) The trial reports
  its raw score per evaluation: the median rule takes the trial's best itself,
  and a best-so-far curve would hide a stall.
- `wilcoxon`: `WilcoxonPruner` on per-task scores paired with the best trial's
  at the same (evaluation, task); step = evaluation index * tasks + task index.
  A paired test suits noisy LLM accuracy when the validation set has ~20+
  tasks; with fewer, prefer `patient-median`.
- `none`: run every trial to its budget.
"""

from __future__ import annotations

import itertools
import logging
import shlex
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from optimizers.engine.schedules import Schedule
from optimizers.study.search_space import (
    SearchSpace,
    config_to_params,
    paper_configs,
    trial_to_config,
    trial_to_decisions,
)
from optimizers.study.storage import (
    JournalHeartbeat,
    Lease,
    fail_stale_trials,
    first_beat,
    needs_own_heartbeat,
    open_storage,
)
from whale_dspy.errors import ConfigError, WhaleError
from whale_dspy.jsonl import to_jsonable
from whale_dspy.rundir import config_differences

if TYPE_CHECKING:
    import optuna

logger = logging.getLogger(__name__)

PRUNERS = ("patient-median", "wilcoxon", "none")
STUDY_ATTR = "whale_study"
"""Study user attribute holding what every trial must share (space, budget, grid, pruner)."""
TEST_ATTR = "test"


@dataclass(frozen=True)
class StudyConfig:
    """One study. `trials` counts finished trials across all workers; `budget` is rollouts per trial."""

    study_name: str
    trials: int
    budget: int
    report_every: int
    storage: str | None = None
    pruner: str = "patient-median"
    startup_trials: int = 3
    warmup_fraction: float = 0.25
    patience: int = 2
    p_threshold: float = 0.1
    seed: int | None = 0
    space: SearchSpace = field(default_factory=SearchSpace)
    lease: Lease = field(default_factory=Lease)
    enqueue: tuple[Schedule, ...] = ()
    """Schedules to try first, after the paper's (hand-picked corners of the space)."""

    def __post_init__(self) -> None:
        if self.pruner not in PRUNERS:
            raise ConfigError(f"pruner must be one of {', '.join(PRUNERS)}, got {self.pruner!r}")
        if not self.study_name or self.trials < 1 or self.budget < 1:
            raise ConfigError("study_name must be non-empty and trials and budget >= 1")
        if not 1 <= self.report_every <= self.budget:
            raise ConfigError(f"report_every must be in 1..budget ({self.budget}), got {self.report_every}")
        if self.startup_trials < 0 or self.patience < 1 or not 0 <= self.warmup_fraction < 1:
            raise ConfigError("startup_trials must be >= 0, patience >= 1 and warmup_fraction in [0, 1)")
        if not 0 < self.p_threshold < 1:
            raise ConfigError(f"p_threshold must be in (0, 1), got {self.p_threshold}")
        outside = [schedule.spec() for schedule in self.enqueue if not self.space.contains(schedule)]
        if outside:
            raise ConfigError(f"enqueued schedules outside the search space: {', '.join(outside)}")

    def shared(self) -> dict[str, Any]:
        """What a reopened study must agree on: trials scored under other rules are not comparable."""
        return {
            "search_space": self.space.to_dict(),
            "budget": self.budget,
            "report_every": self.report_every,
            "intermediate_values": "per-task scores" if self.pruner == "wilcoxon" else "validation score",
        }


@dataclass(frozen=True)
class TrialContext:
    """What one trial runs: its schedule and a name for its run directory and adapter-name prefix."""

    number: int
    schedule: Schedule
    name: str
    decisions: dict[str, Any] = field(default_factory=dict)
    """Harness-decision settings the trial's run must use (`confidence`, `race_start`): those the
    search space opts in to tune; empty when it tunes the schedule alone."""


class TrialReporter:
    """Hands a run's validation curve to Optuna and stops the run (TrialPruned) when the pruner says so."""

    def __init__(self, trial: optuna.Trial, *, report_every: int, wilcoxon: bool = False):
        self.trial = trial
        self.report_every = report_every
        self.wilcoxon = wilcoxon
        self.curve: list[list[float]] = []
        self._last_step = -1

    def report(
        self, rollouts: int, score: float, per_task: Mapping[str, Sequence[float]] | None = None
    ) -> None:
        """Call after each validation evaluation, with the rollouts spent so far."""
        import optuna

        self.curve.append([rollouts, score])
        self.trial.set_user_attr("curve", self.curve)
        self.trial.set_user_attr("rollouts", rollouts)
        step = rollouts // self.report_every * self.report_every
        if step <= self._last_step:
            return  # a second evaluation in one grid cell: Optuna keeps the first value of a step
        self._last_step = step
        if self.wilcoxon:
            self._report_tasks(step // self.report_every, per_task)
        else:
            self.trial.report(score, step)
        if self.trial.should_prune():
            raise optuna.TrialPruned(
                f"trial {self.trial.number} pruned at {rollouts} rollouts (score {score:.3f})"
            )

    def _report_tasks(self, checkpoint: int, per_task: Mapping[str, Sequence[float]] | None) -> None:
        if not per_task:
            raise ConfigError("the wilcoxon pruner needs per-task validation scores from every evaluation")
        for index, task in enumerate(sorted(per_task)):
            scores = per_task[task]
            self.trial.report(sum(scores) / len(scores), checkpoint * len(per_task) + index)

    def record(self, **attrs: Any) -> None:
        """Per-trial user attributes (run directory, best harness, adapter, ...), stored as JSON."""
        for key, value in attrs.items():
            self.trial.set_user_attr(key, to_jsonable(value))


RunTrial = Callable[[TrialContext, TrialReporter], float]
TestBest = Callable[["optuna.trial.FrozenTrial"], float]


def make_pruner(config: StudyConfig) -> optuna.pruners.BasePruner:
    import optuna

    from optimizers.study.pruners import PlateauPruner

    if config.pruner == "none":
        return optuna.pruners.NopPruner()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if config.pruner == "wilcoxon":
            return optuna.pruners.WilcoxonPruner(p_threshold=config.p_threshold)
        median = optuna.pruners.MedianPruner(
            n_startup_trials=config.startup_trials, n_warmup_steps=int(config.budget * config.warmup_fraction)
        )
        return PlateauPruner(median, patience=config.patience)


def open_study(config: StudyConfig) -> optuna.Study:
    """Create or join the study, refuse one recorded under other rules, enqueue the paper's settings
    and the requested ones (each once per study, whichever worker comes first)."""
    import optuna

    storage = open_storage(config.storage, config.lease)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(seed=config.seed, multivariate=True, group=True)
    study = optuna.create_study(
        storage=storage,
        study_name=config.study_name,
        direction="maximize",
        sampler=sampler,
        pruner=make_pruner(config),
        load_if_exists=True,
    )
    _check_shared(study, config)
    for schedule in paper_configs():
        if config.space.contains(schedule):
            study.enqueue_trial(config_to_params(schedule), skip_if_exists=True)
        else:
            logger.info("paper setting %s lies outside the search space: not enqueued", schedule.spec())
    for schedule in config.enqueue:
        study.enqueue_trial(config_to_params(schedule), skip_if_exists=True)
    fail_stale_trials(study, config.lease)
    return study


def _check_shared(study: optuna.Study, config: StudyConfig) -> None:
    recorded = study.user_attrs.get(STUDY_ATTR)
    if recorded is None:
        study.set_user_attr(STUDY_ATTR, config.shared())
    elif recorded != config.shared():
        differences = "; ".join(config_differences(recorded, config.shared()))
        raise ConfigError(
            f"study {config.study_name!r} exists with another search space, budget or "
            f"intermediate-value form ({differences}); use a new --study-name or the recorded settings"
        )


def make_objective(
    study: optuna.Study, config: StudyConfig, run_trial: RunTrial
) -> Callable[[optuna.Trial], float]:
    own_heartbeat = needs_own_heartbeat(study._storage)

    def objective(trial: optuna.Trial) -> float:
        schedule = trial_to_config(trial, config.space)
        decisions = trial_to_decisions(trial, config.space)
        context = TrialContext(trial.number, schedule, f"trial-{trial.number:04d}", decisions)
        trial.set_user_attr("schedule", schedule.spec())
        if decisions:
            trial.set_user_attr("decisions", decisions)
        reporter = TrialReporter(
            trial, report_every=config.report_every, wilcoxon=config.pruner == "wilcoxon"
        )
        logger.info("trial %d: %s", trial.number, schedule.spec())
        if not own_heartbeat:
            first_beat(study, trial)
            return run_trial(context, reporter)
        fail_stale_trials(study, config.lease)  # Optuna does this before each trial for RDB storages only
        with JournalHeartbeat(trial, config.lease.heartbeat_interval):
            return run_trial(context, reporter)

    return objective


def run_study(config: StudyConfig, run_trial: RunTrial, study: optuna.Study | None = None) -> optuna.Study:
    """Work on the study until it holds `config.trials` finished trials (all workers together).

    Pass the `open_study` result to check storage and search space before expensive setup.
    """
    import optuna
    from optuna.trial import TrialState

    study = study or open_study(config)
    finished = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    stop = optuna.study.MaxTrialsCallback(config.trials, states=finished)
    if len(study.get_trials(deepcopy=False, states=finished)) < config.trials:
        study.optimize(
            make_objective(study, config, run_trial),
            n_trials=config.trials,
            callbacks=[stop],
            catch=(WhaleError,),  # a failed run is one FAIL trial; a bug elsewhere still stops the worker
        )
    return study


@dataclass(frozen=True)
class StudySummary:
    """The study's outcome: the best configuration by validation, and its test score measured once."""

    best_trial: int
    validation: float
    schedule: str
    command: str
    test: float | None
    counts: dict[str, int]
    attrs: dict[str, Any]


def summarize(
    study: optuna.Study, run_args: Sequence[str] = (), test_best: TestBest | None = None
) -> StudySummary:
    """Pick the best trial by validation; its test score is computed only if no worker recorded it yet."""
    try:
        best = study.best_trial
    except ValueError:
        raise WhaleError(f"study {study.study_name!r} has no completed trial yet") from None
    spec = best.user_attrs["schedule"]
    recorded = study.user_attrs.get(TEST_ATTR) or {}
    test = recorded.get("mean_at_k") if recorded.get("trial") == best.number else None
    if test is None and test_best is not None:
        try:
            test = test_best(best)
            study.set_user_attr(TEST_ATTR, {"trial": best.number, "mean_at_k": test})
        except WhaleError as error:  # e.g. the best trial's files live on another worker's machine
            logger.warning("no test score for trial %d: %s", best.number, error)
    counts: dict[str, int] = {}
    for trial in study.get_trials(deepcopy=False):
        counts[trial.state.name] = counts.get(trial.state.name, 0) + 1
    decided = best.user_attrs.get("decisions", {})
    flags = {f"--{key.replace('_', '-')}": str(value) for key, value in decided.items()}
    kept = _without_flags(list(run_args), flags)  # a tuned value replaces the study's own
    command = shlex.join(["whale", "run", *kept, "--schedule", spec, *itertools.chain(*flags.items())])
    return StudySummary(best.number, float(best.value), spec, command, test, counts, dict(best.user_attrs))


def _without_flags(args: list[str], flags: Collection[str]) -> list[str]:
    """`args` without each of `flags` and the value after it."""
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in flags:
            skip = True
        else:
            kept.append(arg)
    return kept
