"""Optuna studies over the switching schedule: mapping, enqueueing, pruning, storage, mismatch, figures."""

from __future__ import annotations

import json
import sys
import threading
import time

import optuna
import pytest
from optuna.trial import FixedTrial, TrialState
from test_study_workers import scripted_run_trial, synthetic_curve

from optimizers.engine.schedules import Fixed, Patience, parse_schedule
from optimizers.study import StudyConfig, TrialContext, TrialReporter, open_study, run_study, summarize
from optimizers.study.plots import save_plots
from optimizers.study.pruners import PlateauPruner
from optimizers.study.search_space import FloatRange, IntRange, SearchSpace, config_to_params, trial_to_config
from optimizers.study.storage import Lease, fail_stale_trials, open_storage
from whale_dspy.errors import ConfigError, WhaleError

optuna.logging.set_verbosity(optuna.logging.WARNING)


def config(**overrides) -> StudyConfig:
    values = {
        "study_name": "s",
        "trials": 6,
        "budget": 1000,
        "report_every": 100,
        "startup_trials": 2,
        "patience": 1,
    }
    return StudyConfig(**{**values, **overrides})


@pytest.mark.parametrize(
    "schedule",
    [
        Fixed(0.6, 6),
        Fixed(1.7, 2),
        Patience(),
        Patience(weight_burn_in=0, min_delta=0.015, harness_min=4, harness_max=4),
    ],
)
def test_a_schedule_round_trips_through_fixed_trial_and_the_command_line(schedule):
    params = config_to_params(schedule)
    assert trial_to_config(FixedTrial(params), SearchSpace()) == schedule
    assert parse_schedule(schedule.spec()) == schedule


def test_sampled_schedules_stay_inside_the_ranges_and_keep_harness_min_below_max():
    space = SearchSpace(
        epochs=FloatRange(0.3, 0.9, step=0.1), harness_min=IntRange(2, 5), harness_max_extra=IntRange(0, 2)
    )
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    schedules = [trial_to_config(study.ask(), space) for _ in range(200)]
    kinds = {type(s) for s in schedules}
    assert kinds == {Fixed, Patience}
    for s in schedules:
        if isinstance(s, Fixed):
            assert 0.3 <= s.epochs <= 0.9 and 2 <= s.iterations <= 8
        else:
            assert 2 <= s.harness_min <= s.harness_max <= s.harness_min + 2
            assert space.contains(s)


def test_one_kind_only_samples_only_that_kind():
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    space = SearchSpace(kinds=("fixed",))
    assert all(isinstance(trial_to_config(study.ask(), space), Fixed) for _ in range(20))


@pytest.mark.parametrize(
    "bad",
    [
        {"epochs": FloatRange(1.0, 0.5)},
        {"harness_iterations": IntRange(6, 2)},
        {"kinds": ()},
        {"kinds": ("fixed", "cosine")},
        {"epochs": FloatRange(0.0, 1.0)},
        {"weight_window": IntRange(0, 4)},
    ],
)
def test_an_empty_or_inverted_search_range_is_a_config_error(bad):
    with pytest.raises(ConfigError):
        SearchSpace(**bad)


def test_a_space_read_from_json_keeps_defaults_and_names_unknown_ranges():
    space = SearchSpace.from_dict({"epochs": {"low": 0.2, "high": 1.0, "step": 0.2}, "kinds": ["fixed"]})
    assert (
        space.epochs == FloatRange(0.2, 1.0, 0.2)
        and space.harness_iterations == SearchSpace().harness_iterations
    )
    assert SearchSpace.from_dict(json.loads(json.dumps(space.to_dict()))) == space
    with pytest.raises(ConfigError, match="valid names are"):
        SearchSpace.from_dict({"epoch": {"low": 0.2, "high": 1.0}})


def test_the_paper_settings_run_first():
    study = run_study(config(trials=3, pruner="none"), scripted_run_trial())
    first, second = sorted(study.trials, key=lambda t: t.number)[:2]
    assert first.user_attrs["schedule"] == "fixed:0.6,5"
    assert second.user_attrs["schedule"] == Patience().spec()


def test_paper_settings_outside_the_space_are_not_enqueued():
    space = SearchSpace(epochs=FloatRange(1.0, 2.0, step=0.1), kinds=("fixed",))
    study = run_study(config(trials=2, pruner="none", space=space), scripted_run_trial())
    assert all(1.0 <= t.params["epochs"] <= 2.0 for t in study.trials)


def test_requested_schedules_run_after_the_paper_settings_once_and_must_lie_in_the_space():
    extra = (Fixed(0.3, 2), Fixed(1.5, 3))
    study = run_study(config(trials=5, pruner="none", enqueue=extra), scripted_run_trial())
    schedules = [t.user_attrs["schedule"] for t in sorted(study.trials, key=lambda t: t.number)]
    assert schedules[:4] == ["fixed:0.6,5", Patience().spec(), "fixed:0.3,2", "fixed:1.5,3"]
    with pytest.raises(ConfigError, match="outside the search space: fixed:9,2, fixed:0.25,2"):
        config(enqueue=(Fixed(9.0, 2), Fixed(0.25, 2)))  # 0.25 is off the default grid 0.2 + 0.1 n


def replaying(curves: dict[int, list[float]], calls: list[int]):
    """A run_trial that replays the given validation curve for each trial number."""

    def run_trial(context, reporter):
        calls.append(context.number)
        for index, score in enumerate(curves[context.number]):
            reporter.report((index + 1) * 100 + 3, score)
        return max(curves[context.number])

    return run_trial


GOOD = [0.3, 0.45, 0.55, 0.6, 0.62, 0.64, 0.65, 0.66, 0.66, 0.67]


def test_a_clearly_worse_curve_is_pruned_and_a_good_one_is_not():
    curves = {
        0: GOOD,
        1: [v - 0.02 for v in GOOD],
        2: [0.10, 0.15, 0.15, 0.15, 0.15, 0.15, 0.15, 0.15, 0.15, 0.15],  # an exact plateau far below
        3: [v + 0.01 for v in GOOD],
        4: [0.05, 0.10, 0.20, 0.30, 0.40, 0.50, 0.60, 0.70, 0.75, 0.80],  # slow start, but always improving
    }
    study = run_study(config(trials=5), replaying(curves, []))
    states = {t.number: t.state for t in study.trials}
    assert states == {0: TrialState.COMPLETE, 1: TrialState.COMPLETE, 2: TrialState.PRUNED} | {
        3: TrialState.COMPLETE,
        4: TrialState.COMPLETE,
    }
    pruned = study.trials[2]
    assert max(pruned.intermediate_values) < 1000  # stopped early, on the rollouts grid
    assert all(step % 100 == 0 for step in pruned.intermediate_values)


def test_optunas_patient_pruner_would_never_stop_an_exact_plateau():
    """Why the default is PlateauPruner: PatientPruner defers on equal values forever."""
    flat = {0: GOOD, 1: GOOD, 2: [0.15] * 10}
    for pruner, expected in (
        (
            optuna.pruners.PatientPruner(optuna.pruners.MedianPruner(n_startup_trials=2), patience=1),
            TrialState.COMPLETE,
        ),
        (PlateauPruner(optuna.pruners.MedianPruner(n_startup_trials=2), patience=1), TrialState.PRUNED),
    ):
        study = optuna.create_study(direction="maximize", pruner=pruner)
        study.optimize(
            lambda trial: replaying(flat, [])(_context(trial), TrialReporter(trial, report_every=100)),
            n_trials=3,
        )
        assert study.trials[2].state == expected


def _context(trial):
    return TrialContext(trial.number, Fixed(0.6, 6), f"trial-{trial.number:04d}")


def test_without_a_pruner_every_trial_runs_its_whole_budget():
    curves = {n: [0.1] * 10 if n == 2 else GOOD for n in range(4)}
    study = run_study(config(trials=4, pruner="none"), replaying(curves, []))
    assert all(t.state == TrialState.COMPLETE for t in study.trials)


def test_wilcoxon_compares_per_task_scores_with_the_best_trial():
    tasks = [f"t{i:02d}" for i in range(20)]

    def run_trial(context, reporter):
        good = context.number != 1
        for checkpoint in range(1, 4):
            per_task = {t: [1.0 if good or i % 5 == 0 else 0.0] for i, t in enumerate(tasks)}
            reporter.report(checkpoint * 100, sum(s[0] for s in per_task.values()) / 20, per_task)
        return 1.0 if good else 0.2

    study = run_study(config(trials=3, pruner="wilcoxon", space=SearchSpace(kinds=("fixed",))), run_trial)
    states = [t.state for t in sorted(study.trials, key=lambda t: t.number)]
    assert states == [TrialState.COMPLETE, TrialState.PRUNED, TrialState.COMPLETE]
    assert len(study.trials[1].intermediate_values) == 20  # one evaluation's tasks, then pruned


def test_wilcoxon_without_per_task_scores_is_a_config_error():
    study = optuna.create_study()
    reporter = TrialReporter(study.ask(), report_every=100, wilcoxon=True)
    with pytest.raises(ConfigError, match="per-task"):
        reporter.report(100, 0.5)


@pytest.mark.parametrize(
    "url",
    [
        "redis://localhost",
        "sqlite:////no/such/dir/study.db",
        "postgresql://nobody@127.0.0.1:1/none",
        "journal:///no/dir/x.log",
    ],
)
def test_an_unusable_storage_is_a_config_error(url):
    with pytest.raises(ConfigError, match="storage"):
        open_storage(url)


def test_a_missing_postgresql_driver_names_the_extra_that_installs_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if psycopg were not installed
    with pytest.raises(ConfigError, match=r"driver is not installed .*whale-dspy\[postgres\]"):
        open_storage("postgresql://nobody@127.0.0.1:1/none")


def test_a_storage_error_does_not_show_the_database_password():
    with pytest.raises(ConfigError, match="storage") as caught:
        open_storage("postgresql://whale:s3cret@127.0.0.1:1/none")
    assert "s3cret" not in str(caught.value) and "whale:***@127.0.0.1:1" in str(caught.value)


def test_a_negative_retry_count_is_a_config_error():
    with pytest.raises(ConfigError, match="retries must be >= 0"):
        Lease(retries=-1)


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
@pytest.mark.parametrize("scheme", ["sqlite", "journal"])
def test_a_trial_whose_run_raised_is_failed_but_not_retried(tmp_path, scheme):
    """Only a trial whose worker went silent is queued again; a run that raised was a real answer."""
    storage = f"sqlite:///{tmp_path / 's.db'}" if scheme == "sqlite" else f"journal:///{tmp_path / 's.log'}"
    scripted = scripted_run_trial()

    def first_one_breaks(context: TrialContext, reporter: TrialReporter) -> float:
        if context.number == 0:
            raise WhaleError("the run's server died")
        return scripted(context, reporter)

    lease = Lease(heartbeat_interval=1, grace_period=2)
    study = run_study(config(trials=3, storage=storage, pruner="none", lease=lease), first_one_breaks)
    time.sleep(2.5)  # past the grace period: a heartbeat-failed trial would be stale by now
    assert fail_stale_trials(study, lease) == []
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE, TrialState.COMPLETE]
    assert [optuna.storages.RetryHeartbeatStaleTrialCallback.retried_trial_number(t) for t in trials] == [
        None
    ] * 3


def test_a_study_recorded_with_another_space_is_refused_before_any_trial(tmp_path):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    run_study(config(trials=1, storage=storage, pruner="none"), scripted_run_trial())
    calls: list[int] = []
    other = config(storage=storage, space=SearchSpace(harness_iterations=IntRange(2, 4)))
    with pytest.raises(ConfigError, match="harness_iterations"):
        run_study(other, replaying({}, calls))
    assert calls == []
    with pytest.raises(ConfigError, match="budget"):
        open_study(config(storage=storage, budget=500, report_every=100))
    assert open_study(config(storage=storage, pruner="none")).user_attrs["whale_study"]["budget"] == 1000


def test_the_summary_gives_a_ready_command_and_measures_test_once(tmp_path):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    study = run_study(config(trials=4, storage=storage), scripted_run_trial())
    tested = []

    def test_best(trial):
        tested.append(trial.number)
        return 0.42

    summary = summarize(study, ["--domain", "math", "--budget", "1000"], test_best)
    again = summarize(optuna.load_study(study_name="s", storage=storage), ["--domain", "math"], test_best)
    assert tested == [study.best_trial.number] and summary.test == again.test == 0.42
    assert summary.validation == study.best_value
    argv = summary.command.split()
    assert argv[:6] == ["whale", "run", "--domain", "math", "--budget", "1000"] and argv[6] == "--schedule"
    best_params = study.best_trial.params
    assert parse_schedule(argv[7]) == trial_to_config(FixedTrial(best_params), SearchSpace())
    assert summary.counts["COMPLETE"] + summary.counts.get("PRUNED", 0) == 4
    for trial in study.trials:
        json.dumps(trial.user_attrs)  # JSON-only, so optuna-dashboard shows them
    assert {"run_dir", "adapter", "curve", "rollouts", "schedule"} <= set(summary.attrs)


def test_figures_are_written_when_the_trials_support_them(tmp_path, caplog):
    only_one = run_study(config(trials=1, pruner="none"), scripted_run_trial())
    written = {p.name for p in save_plots(only_one, tmp_path / "one")}
    assert "optimization_history.png" in written and "param_importances.png" not in written

    space = SearchSpace(kinds=("fixed",))
    study = run_study(config(trials=6, pruner="none", space=space, study_name="fixed"), scripted_run_trial())
    written = {p.name for p in save_plots(study, tmp_path / "six")}
    assert {"optimization_history.png", "param_importances.png", "contour_epochs_iterations.png"} <= written
    assert all((tmp_path / "six" / name).read_bytes().startswith(b"\x89PNG") for name in written)


def test_the_synthetic_curve_favours_the_paper_setting():
    paper, far = synthetic_curve(Fixed(0.6, 6)), synthetic_curve(Fixed(1.8, 2))
    assert max(v for _, v in paper) > max(v for _, v in far)


def test_workers_opening_a_new_sqlite_file_together_all_get_the_finished_schema(tmp_path):
    """Optuna creates tables and stamps their version in separate steps; racing openers must all succeed."""
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'new.db'}"
    opener = (
        "import sys, optuna; from optimizers.study.storage import open_storage; "
        "optuna.create_study(study_name='s', storage=open_storage(sys.argv[1]), load_if_exists=True)"
    )
    command = [sys.executable, "-c", opener, url]
    openers = [subprocess.Popen(command, stderr=subprocess.PIPE) for _ in range(4)]
    errors = [p.communicate(timeout=120)[1].decode() for p in openers]
    assert [p.returncode for p in openers] == [0] * 4, errors
    assert len(optuna.get_all_study_summaries(open_storage(url))) == 1


def test_two_workers_cannot_both_start_one_queued_trial_on_sqlite(tmp_path):
    """Optuna's WAITING -> RUNNING is a read, then a write; SQLite ignores FOR UPDATE, so the first
    worker pauses between the two here while a second worker tries the same trial. Exactly one
    may start it (two did under load, and the slower crashed on "Cannot tell a COMPLETE trial")."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    first, second = open_storage(url), open_storage(url)
    study = optuna.create_study(study_name="s", storage=first)
    study.enqueue_trial({"x": 1.0})
    trial_id = study.get_trials()[0]._trial_id
    read, resumed = threading.Event(), threading.Event()
    check = first.check_trial_is_updatable  # called between the read and the write

    def pause_after_the_read(*args):
        check(*args)
        read.set()
        resumed.wait(timeout=30)

    first.check_trial_is_updatable = pause_after_the_read
    started: dict[str, bool] = {}

    def start(name, storage):
        started[name] = storage.set_trial_state_values(trial_id, TrialState.RUNNING)

    workers = [threading.Thread(target=start, args=("first", first))]
    workers[0].start()
    assert read.wait(timeout=30)
    workers.append(threading.Thread(target=start, args=("second", second)))
    workers[1].start()
    workers[1].join(timeout=2)  # without the write lock the second worker starts the trial now
    resumed.set()
    for worker in workers:
        worker.join(timeout=60)
    assert started == {"first": True, "second": False}


def test_the_default_space_tunes_the_schedule_alone_so_recorded_studies_still_resume(tmp_path):
    """The decision settings are opt-in: the default space's record is what studies recorded before."""
    recorded_before = {
        "epochs", "harness_iterations", "weight_window", "weight_burn_in", "weight_patience", "weight_max",
        "min_delta", "harness_min", "harness_patience", "harness_max_extra", "kinds",
    }  # fmt: skip
    assert set(SearchSpace().to_dict()) == recorded_before
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    run_study(config(trials=1, storage=storage, pruner="none"), scripted_run_trial())
    assert open_study(config(storage=storage, pruner="none")).user_attrs["whale_study"]["budget"] == 1000
    tuned = SearchSpace(confidence=FloatRange(0.8, 0.99, step=0.01))
    with pytest.raises(ConfigError, match="confidence"):
        open_study(config(storage=storage, pruner="none", space=tuned))


def test_a_space_that_opts_in_tunes_the_acceptance_confidence_and_the_race_s_first_round(tmp_path):
    space = SearchSpace.from_dict(
        {"confidence": {"low": 0.8, "high": 0.99, "step": 0.01}, "race_start": {"low": 4, "high": 16}}
    )
    assert SearchSpace.from_dict(json.loads(json.dumps(space.to_dict()))) == space
    seen: list[dict] = []
    replay = scripted_run_trial()

    def run_trial(context, reporter):
        seen.append(context.decisions)
        return replay(context, reporter)

    study = run_study(config(trials=5, pruner="none", space=space), run_trial)
    assert len(seen) == 5 and all(set(d) == {"confidence", "race_start"} for d in seen)
    assert all(0.8 <= d["confidence"] <= 0.99 and 4 <= d["race_start"] <= 16 for d in seen)
    assert len({(d["confidence"], d["race_start"]) for d in seen}) > 1  # sampled, not pinned
    best = study.best_trial
    argv = summarize(study, ["--domain", "math", "--confidence", "0.95"]).command.split()
    assert argv.count("--confidence") == 1 and "0.95" not in argv  # the tuned value replaces the study's own
    assert argv[argv.index("--confidence") + 1] == str(best.params["confidence"])
    assert argv[argv.index("--race-start") + 1] == str(best.params["race_start"])
    with pytest.raises(ConfigError, match="confidence"):
        SearchSpace(confidence=FloatRange(0.4, 0.9))
