"""`whale study` pieces: flag checks before any work, the `whale run` flags, and the validation listener
driving a real WhaleOptimizer (scripted phases) inside Optuna trials."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import optuna
import pytest
from whale_helpers import (
    FakeHarnessPhase,
    FakeWeightPhase,
    backend,
    exact_match,
    optimizer,
    scripted_data,
    student,
    tasks,
    toy_evaluator,
)

from optimizers.engine.schedules import parse_schedule
from optimizers.study import StudyConfig, make_pruner, run_study, summarize
from optimizers.study.search_space import FloatRange, IntRange, SearchSpace
from whale_cli import study as study_cli
from whale_cli.run_settings import RunSettings
from whale_dspy.errors import ConfigError
from whale_dspy.testing.fake_backend import FakeBackend
from whale_dspy.testing.scripted_lm import ScriptedLM

optuna.logging.set_verbosity(optuna.logging.WARNING)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    study_cli.register(parser.add_subparsers())
    return parser.parse_args(["study", *argv])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--domain", "math", "--budget", "200", "--trials", "2", "--storage", "redis://x"], "storage"),
        (
            ["--domain", "math", "--budget", "200", "--trials", "2", "--schedule", "fixed:1,2"],
            "drop --schedule",
        ),
        (["--domain", "math", "--trials", "2"], "--budget"),
        (["--domain", "math", "--budget", "200", "--trials", "2", "--space", "/no/such.json"], "--space"),
        (
            ["--domain", "math", "--budget", "200", "--trials", "2", "--startup-trials", "-1"],
            "startup_trials",
        ),
        (["--domain", "math", "--budget", "200", "--trials", "2", "--prune-patience", "0"], "patience"),
        (["--domain", "math", "--budget", "200", "--trials", "2", "--enqueue", "fixed:50,2"], "outside"),
        (["--domain", "math", "--budget", "200", "--trials", "2", "--enqueue", "fixed:x"], "fixed"),
    ],
)
def test_bad_flags_fail_before_data_or_a_server(argv, message, tmp_path):
    with pytest.raises(ConfigError, match=message):
        study_cli.run(parse(*argv, "--out", str(tmp_path)))
    assert not any(tmp_path.iterdir())  # nothing started, nothing written


def test_a_space_file_narrows_the_defaults(tmp_path):
    space_file = tmp_path / "space.json"
    space_file.write_text('{"kinds": ["fixed"], "harness_iterations": {"low": 2, "high": 4}}')
    args = parse("--domain", "math", "--budget", "500", "--trials", "3", "--space", str(space_file))
    config = study_cli.study_config(args, study_cli.run_settings(args))
    assert config.space.kinds == ("fixed",) and config.space.harness_iterations.high == 4
    assert config.space.epochs == SearchSpace().epochs
    assert (config.budget, config.report_every, config.study_name) == (500, 50, "whale-math-b500")
    assert config.startup_trials == 3


def test_startup_trials_and_patience_reach_the_patient_median_pruner():
    flags = ("--startup-trials", "1", "--prune-patience", "1")
    args = parse("--domain", "math", "--budget", "500", "--trials", "3", *flags)
    pruner = make_pruner(study_cli.study_config(args, study_cli.run_settings(args)))
    assert pruner.wrapped._n_startup_trials == 1 and pruner.patience == 1


def test_the_printed_run_flags_rebuild_the_same_settings():
    args = parse("--domain", "math", "--budget", "500", "--trials", "3", "--eval-k", "4", "--preset", "gpu")
    settings = study_cli.run_settings(args)
    argv = study_cli.run_arguments(settings)
    assert argv[:2] == ["--domain", "math"] and "--schedule" not in argv
    rebuilt = parse(*argv, "--trials", "1")
    assert study_cli.run_settings(rebuilt) == settings


def whale_trials(tmp_path: Path, *, wilcoxon: bool, wrong: frozenset[int] = frozenset()):
    """run_trial: a real WhaleOptimizer on scripted phases, scored on the validation tasks.

    Trials whose number is in `wrong` get a model that always answers wrongly.
    """

    def run_trial(context, reporter):
        server = FakeBackend(ScriptedLM({"": {"answer": "5"}})) if context.number in wrong else backend()
        run_dir = tmp_path / context.name
        listener = study_cli.ValidationListener(reporter, run_dir, wilcoxon=wilcoxon)
        opt = optimizer(
            run_dir,
            server,
            weight=FakeWeightPhase(server),
            harness=FakeHarnessPhase(),
            schedule=context.schedule,
            on_event=listener,
        )
        valset = tasks("val", 3)
        program = opt.compile(
            student(server),
            trainset=tasks("train", 10),
            valset=tasks("search", 3),
            track=valset,
            track_name="val",
        )
        return program.report.best.mean_at_k

    return run_trial


@pytest.mark.parametrize("pruner", ["patient-median", "wilcoxon"])
def test_validation_evaluations_of_a_whale_run_reach_optuna_on_the_rollouts_grid(tmp_path, pruner):
    config = StudyConfig(
        "s", trials=2, budget=100, report_every=20, pruner=pruner, space=SearchSpace(kinds=("fixed",))
    )
    study = run_study(config, whale_trials(tmp_path, wilcoxon=pruner == "wilcoxon"))
    trial = study.trials[0]
    assert trial.state == optuna.trial.TrialState.COMPLETE and trial.value == 1.0
    steps = sorted(trial.intermediate_values)
    if pruner == "wilcoxon":  # three validation tasks per evaluation, paired by (evaluation, task)
        assert len(steps) % 3 == 0 and len(steps) >= 9
    else:
        assert steps[0] == 0 and all(step % 20 == 0 for step in steps) and len(steps) >= 4
    assert Path(trial.user_attrs["best_harness"]).is_file()
    assert trial.user_attrs["best_adapter"] is None  # the first evaluation (base weights) was already perfect
    assert [point[0] for point in trial.user_attrs["curve"]][0] == 0
    assert parse_schedule(trial.user_attrs["schedule"]).spec() == "fixed:0.6,5"


def test_a_pruned_trial_stops_its_whale_run_midway(tmp_path):
    tasks_per_eval, evaluations = 3, 6  # budget 100, evaluated at 0, 20, ..., 100
    config = StudyConfig(
        "s", trials=3, budget=100, report_every=20, pruner="wilcoxon", space=SearchSpace(kinds=("fixed",))
    )
    study = run_study(config, whale_trials(tmp_path, wilcoxon=True, wrong=frozenset({2})))
    states = [t.state.name for t in sorted(study.trials, key=lambda t: t.number)]
    assert states == ["COMPLETE", "COMPLETE", "PRUNED"]
    pruned = study.trials[2]
    assert len(pruned.intermediate_values) < tasks_per_eval * evaluations
    assert max(point[0] for point in pruned.user_attrs["curve"]) < 100  # its run stopped before the budget
    assert (tmp_path / "trial-0002" / "events.jsonl").exists()


def test_run_settings_of_the_study_default_to_ten_evaluations_per_trial():
    args = parse("--domain", "math", "--budget", "1000", "--trials", "1")
    assert study_cli.run_settings(args) == RunSettings(domain="math", budget=1000, seed=0)


class ScriptedBuild:
    """The trial builder on scripted phases; remembers the adapter-name tag each trial was given.

    FakeWeightPhase names its adapters fake-sNNNN whatever the tag, so each trial's weight
    phase serves them on its own FakeBackend; the shared backend sees only the test adapter.
    """

    def __init__(self):
        self.tags: list[str] = []
        self.settings: list[RunSettings] = []

    def __call__(self, settings, run_dir, server, data, *, on_event, tag, shared_evals):
        from optimizers.engine.schedules import parse_schedule
        from optimizers.engine.whale import WhaleOptimizer

        self.tags.append(tag)
        self.settings.append(settings)
        trial_server = backend()
        return WhaleOptimizer(
            backend=trial_server,
            metric=exact_match,
            schedule=parse_schedule(settings.schedule),
            budget=settings.budget,
            run_dir=run_dir,
            eval_every=settings.every,
            eval_k=settings.eval_k,
            evaluator=toy_evaluator(),
            weight_phase=FakeWeightPhase(trial_server, adapter_dir=run_dir / "adapters"),
            harness_phase=FakeHarnessPhase(),
            config={"cli": {"tag": tag}},
            on_event=on_event,
            shared_evals=shared_evals,
        )


def test_study_trials_run_whale_on_validation_and_test_the_chosen_checkpoint_once(tmp_path):
    settings = RunSettings(domain="scripted", budget=100, eval_every=20, eval_k=2)
    data = scripted_data()
    shared = backend()
    build = ScriptedBuild()
    trials = study_cli.StudyTrials(
        settings, data, tasks("val", 3), shared, tmp_path, tag="my-study", wilcoxon=False, build=build
    )
    config = StudyConfig("my study", trials=3, budget=100, report_every=20, pruner="none")
    study = run_study(config, trials)
    assert build.tags == ["my-study-trial-0000", "my-study-trial-0001", "my-study-trial-0002"]
    for trial in study.trials:
        assert trial.user_attrs["rollouts"] <= 100 and trial.value == 1.0
        assert trial.user_attrs["run_dir"] == str((tmp_path / f"trial-{trial.number:04d}").resolve())
        # the periodic evaluations ran on the validation tasks, never on the test split
        traces = list((tmp_path / f"trial-{trial.number:04d}" / "evals").glob("*.jsonl"))
        task_ids = {json.loads(line)["task_id"] for path in traces for line in path.read_text().splitlines()}
        assert task_ids == {"val0", "val1", "val2"}
        # every trial starts from the seed harness on base weights: trial 0 measures it, the others copy it
        events = [json.loads(line) for line in (Path(trial.user_attrs["run_dir"]) / "events.jsonl").open()]
        first = next(e for e in events if e["kind"] == "evaluation")
        assert ("shared" in first) == (trial.number > 0)
    summary = summarize(study, study_cli.run_arguments(settings), trials.test)
    assert summary.test == 1.0 and (tmp_path / f"test-trial-{summary.best_trial:04d}.jsonl").exists()
    assert summary.command.startswith(
        "whale run --domain scripted --budget 100 --eval-every 20 --eval-k 2 --schedule "
    )


def test_a_space_that_tunes_the_decision_hands_each_trial_its_sampled_confidence_and_race_start(tmp_path):
    settings = RunSettings(domain="scripted", budget=40, eval_every=20, eval_k=1)
    data = scripted_data()
    build = ScriptedBuild()
    trials = study_cli.StudyTrials(
        settings, data, tasks("val", 2), backend(), tmp_path, tag="s", wilcoxon=False, build=build
    )
    space = SearchSpace(confidence=FloatRange(0.8, 0.99), race_start=IntRange(4, 16))
    study = run_study(
        StudyConfig("decisions", trials=2, budget=40, report_every=20, pruner="none", space=space), trials
    )
    for trial, given in zip(study.trials, build.settings, strict=True):
        assert {"confidence": given.confidence, "race_start": given.race_start} == trial.user_attrs[
            "decisions"
        ]
