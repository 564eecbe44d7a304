"""Several `run_study` worker processes on one shared storage, with a scripted fast objective.

This file is also the worker: `python tests/optimizers/study/test_study_workers.py STORAGE NAME ...`
runs one worker, so the tests start real processes and can kill one with -9.
Each test runs on SQLite and on a PostgreSQL database of its own (on the
session's `postgres_server`), the kill test on a journal file too.
The scripted objective gives each schedule a deterministic validation curve
that rises to a peak and then sags (too much training on too little harness
search), higher for schedules near the paper's E=0.6, I=6.
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from optimizers.engine.schedules import Fixed, Schedule
from optimizers.study import RunTrial, StudyConfig, TrialContext, TrialReporter, open_study, run_study
from optimizers.study.storage import Lease
from whale_dspy.seeding import derive_seed

BUDGET, EVERY = 1000, 100


def synthetic_quality(schedule: Schedule) -> float:
    """Peak validation score of a schedule: best near fixed(0.6, 6), patience a bit below."""
    if isinstance(schedule, Fixed):
        return max(0.05, 0.8 - 0.35 * abs(schedule.epochs - 0.6) - 0.06 * abs(schedule.iterations - 6))
    return max(
        0.05, 0.7 - 0.03 * schedule.weight_patience - 0.02 * (schedule.harness_max - schedule.harness_min)
    )


def synthetic_curve(schedule: Schedule, budget: int = BUDGET, every: int = EVERY) -> list[tuple[int, float]]:
    """(rollouts, validation score) at each evaluation: rise to the peak by 40% of the budget, then sag."""
    peak = synthetic_quality(schedule)
    points = []
    for rollouts in range(every, budget + 1, every):
        x = rollouts / budget
        shape = x / 0.4 if x <= 0.4 else 1 - 0.5 * (x - 0.4)
        wobble = (derive_seed(schedule.spec(), rollouts) % 100) / 100 * 0.02
        points.append((rollouts + derive_seed(rollouts) % 7, round(peak * shape + wobble, 4)))
    return points


def scripted_run_trial(*, seconds_per_eval: float = 0.0, hang_after: int | None = None) -> RunTrial:
    """A run_trial that replays the synthetic curve (optionally hanging, to be killed mid-trial)."""

    def run_trial(context: TrialContext, reporter: TrialReporter) -> float:
        reporter.record(run_dir=f"/runs/{context.name}", worker=os.getpid(), adapter=f"{context.name}-policy")
        best = 0.0
        for index, (rollouts, score) in enumerate(synthetic_curve(context.schedule)):
            if hang_after is not None and index >= hang_after:
                time.sleep(600)
            time.sleep(seconds_per_eval)
            best = max(best, score)
            reporter.report(rollouts, score)
        return best

    return run_trial


def start_worker(tmp: Path, storage: str, *args: str) -> subprocess.Popen:
    root = str(Path(__file__).parents[3])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    log = open(tmp / f"worker-{time.monotonic_ns()}.log", "w")  # noqa: SIM115 (the process owns it)
    return subprocess.Popen(
        [sys.executable, __file__, storage, *args], stdout=log, stderr=subprocess.STDOUT, env=env
    )


@pytest.fixture
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new, empty study storage of the kind the test is parametrized with."""
    if request.param == "postgresql":
        return request.getfixturevalue("postgres_url")
    return {
        "sqlite": f"sqlite:///{tmp_path / 'study.db'}",
        "journal": f"journal:///{tmp_path / 'study.log'}",
    }[request.param]


@functools.cache
def _connection(storage: str):
    """One storage object per URL: polling must not open a new connection pool every time."""
    from optimizers.study.storage import open_storage

    return open_storage(storage, Lease(1, 2))


def _open(storage: str):
    import optuna

    return optuna.load_study(study_name="demo", storage=_connection(storage))


def _wait_for_running_trial(storage: str, worker: subprocess.Popen, timeout: float = 60.0) -> int:
    from optuna.trial import TrialState

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert worker.poll() is None, "the worker exited before its trial started"
        try:
            running = _open(storage).get_trials(states=(TrialState.RUNNING,))
        except KeyError:  # the study does not exist yet
            running = []
        if running and "curve" in running[0].user_attrs:
            return running[0].number
        time.sleep(0.3)
    raise AssertionError("no trial started")


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
@pytest.mark.parametrize("storage", ["sqlite", "journal", "postgresql"], indirect=True)
def test_a_killed_workers_trial_is_failed_and_retried_by_another(tmp_path, storage):
    _kill_a_worker_and_check_its_trial_is_retried(tmp_path, storage)


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
@pytest.mark.parametrize("storage", ["sqlite"], indirect=True)
def test_a_worker_killed_before_optunas_own_first_beat_still_has_its_trial_retried(tmp_path, storage):
    # Optuna's heartbeat thread may not have written yet (it lagged on a loaded CI machine); the
    # trial's start is its first beat.
    _kill_a_worker_and_check_its_trial_is_retried(tmp_path, storage, "--without-optunas-beats")


def _kill_a_worker_and_check_its_trial_is_retried(tmp_path: Path, storage: str, *doomed_args: str) -> None:
    from optuna.storages import RetryHeartbeatStaleTrialCallback
    from optuna.trial import TrialState

    doomed = start_worker(tmp_path, storage, "--trials", "3", "--hang-after", "1", *doomed_args)
    try:
        number = _wait_for_running_trial(storage, doomed)
    finally:
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait()
    time.sleep(2.5)  # past the grace period: the dead worker's heartbeat is stale now
    survivor = start_worker(tmp_path, storage, "--trials", "3", "--pruner", "none")
    assert survivor.wait(timeout=120) == 0, [p.read_text() for p in tmp_path.glob("worker-*.log")]
    trials = {t.number: t for t in _open(storage).get_trials()}
    states = [t.state for t in trials.values()]
    assert trials[number].state == TrialState.FAIL
    assert states.count(TrialState.COMPLETE) >= 2
    assert TrialState.RUNNING not in states and TrialState.WAITING not in states
    retries = [
        t for t in trials.values() if RetryHeartbeatStaleTrialCallback.retried_trial_number(t) == number
    ]
    assert [(t.state, t.params) for t in retries] == [(TrialState.COMPLETE, trials[number].params)]
    assert retries[0].number > number and retries[0].user_attrs["worker"] == survivor.pid


@pytest.mark.parametrize("storage", ["sqlite", "postgresql"], indirect=True)
def test_two_workers_share_one_study_and_prune(tmp_path, storage):
    from optuna.trial import TrialState

    gate = str(tmp_path / "gate")  # both open the study, then start their first trial together
    workers = [
        start_worker(
            tmp_path, storage, "--trials", "10", "--seed", str(seed), "--seconds", "0.05", "--gate", gate
        )
        for seed in (1, 2)
    ]
    assert [w.wait(timeout=240) for w in workers] == [0, 0], [
        p.read_text() for p in tmp_path.glob("worker-*.log")
    ]
    trials = _open(storage).get_trials()
    states = [t.state for t in trials]
    assert states.count(TrialState.COMPLETE) >= 3
    assert states.count(TrialState.PRUNED) >= 1
    assert 10 <= len(trials) <= 11  # one trial may overshoot: both workers can start the 10th
    assert {t.user_attrs["worker"] for t in trials} == {w.pid for w in workers}
    first = min(trials, key=lambda t: t.number)
    assert first.params == {"schedule": "fixed", "epochs": 0.6, "harness_iterations": 5}


def wait_at_gate(gate: Path, *, workers: int, timeout: float = 120.0) -> None:
    """Check in at `gate`, then wait until `workers` have: on a loaded machine one must not do every trial."""
    gate.mkdir(exist_ok=True)
    (gate / str(os.getpid())).touch()
    deadline = time.monotonic() + timeout
    while len(list(gate.iterdir())) < workers:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {len(list(gate.iterdir()))} of {workers} workers reached {gate}")
        time.sleep(0.05)


def _worker_main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("storage")
    parser.add_argument("--trials", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=0.0)
    parser.add_argument("--hang-after", type=int, default=None)
    parser.add_argument("--pruner", default="patient-median")
    parser.add_argument("--gate", type=Path, default=None, help="wait here for the other worker")
    parser.add_argument("--without-optunas-beats", action="store_true", help="its beat thread never writes")
    args = parser.parse_args()
    if args.without_optunas_beats:
        from optuna.storages._heartbeat import HeartbeatThread

        HeartbeatThread._record_heartbeat = staticmethod(lambda *_: None)
    config = StudyConfig(
        "demo",
        trials=args.trials,
        budget=BUDGET,
        report_every=EVERY,
        storage=args.storage,
        pruner=args.pruner,
        startup_trials=2,
        patience=1,
        seed=args.seed,
        lease=Lease(heartbeat_interval=1, grace_period=2),
    )
    runner = scripted_run_trial(seconds_per_eval=args.seconds, hang_after=args.hang_after)
    study = open_study(config)  # imports optuna and creates the schema: the slow, uneven part
    if args.gate is not None:
        wait_at_gate(args.gate, workers=2)
    run_study(config, runner, study=study)


if __name__ == "__main__":
    _worker_main()
