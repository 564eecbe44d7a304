"""The `whale run/report/compare/transfer` CLI path on scripted phases, and a real kill -9 resume."""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console
from whale_helpers import scripted_run

from optimizers.engine.checkpoint import engine_events
from whale_cli import compare, report, run, transfer
from whale_dspy.errors import ConfigError
from whale_dspy.rundir import RunDir

HELPERS = Path(__file__).parents[1] / "whale_helpers.py"
VOLATILE = {"time", "elapsed", "seconds"}


def cli(*argv: str) -> int:
    """Parse and run one of this module's subcommands, as `whale` does."""
    parser = argparse.ArgumentParser()
    subparsers = parser.add_subparsers()
    for module in (run, compare, report, transfer):
        module.register(subparsers)
    args = parser.parse_args(argv)
    return args.func(args)


def quiet() -> Console:
    return Console(file=open(os.devnull, "w"))  # noqa: SIM115


def stable_events(run_dir: Path) -> list[dict]:
    events = [e for e in engine_events(RunDir(run_dir)) if e["kind"] not in ("run_started", "run_resumed")]
    return [{k: v for k, v in e.items() if k not in VOLATILE} for e in events]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("cli") / "run"
    return run_dir, scripted_run(run_dir, console=quiet())


def test_run_writes_its_report_table_and_plot(finished):
    run_dir, result = finished
    assert json.loads((run_dir / "report.json").read_text()) == json.loads(json.dumps(result))
    table = (run_dir / "report.md").read_text()
    assert "| whale | 1 |" in table and "best mean@2" in table
    assert (run_dir / "curve.png").read_bytes()[:4] == b"\x89PNG"


def test_run_prints_its_paired_gain_over_the_start(tmp_path):
    console = Console(file=io.StringIO(), width=120)
    scripted_run(tmp_path / "run", console=console)
    printed = console.file.getvalue()
    written = (tmp_path / "run" / "report.md").read_text()
    row = next(line for line in written.splitlines() if line.startswith("| whale − start"))
    gain, interval = row.split("|")[2].strip(), row.split("|")[3].strip()
    assert "whale − start" in printed and gain in printed and interval in printed


def test_report_redraws_from_the_events(finished, tmp_path):
    run_dir, result = finished
    (run_dir / "report.md").unlink()
    (run_dir / "curve.png").unlink()
    assert cli("report", str(run_dir)) == 0
    redrawn = json.loads((run_dir / "report.json").read_text())
    drop = lambda r: {**r, "spend": {k: v for k, v in r["spend"].items() if k != "wall_seconds"}}  # noqa: E731
    assert drop(redrawn) == drop(json.loads(json.dumps(result)))
    assert (run_dir / "report.md").exists() and (run_dir / "curve.png").exists()


def test_report_over_a_folder_of_runs_compares_methods(tmp_path):
    for seed in (0, 1):
        scripted_run(tmp_path / "runs" / "whale" / f"seed-{seed}", budget=30, console=quiet())
    assert cli("report", str(tmp_path / "runs")) == 0
    assert "| whale | 2 |" in (tmp_path / "runs" / "report.md").read_text()
    assert len(json.loads((tmp_path / "runs" / "report.json").read_text())) == 2


def test_report_over_named_runs_writes_where_it_is_told(tmp_path):
    for seed in (0, 1):
        scripted_run(tmp_path / "runs" / "whale" / f"seed-{seed}", budget=30, console=quiet())
    one = tmp_path / "runs" / "whale" / "seed-1"
    (one / "report.md").unlink()  # the run wrote its own; the report below must not
    assert cli("report", str(one), str(tmp_path / "runs" / "whale" / ".." / "whale" / "seed-1"),
               "--out", str(tmp_path / "figures" / "seed-1")) == 0  # fmt: skip
    assert "| whale | 1 |" in (tmp_path / "figures" / "seed-1" / "report.md").read_text()  # once, not twice
    assert (tmp_path / "figures" / "seed-1" / "curve.png").exists()
    assert not (one / "report.md").exists() and not (tmp_path / "runs" / "report.md").exists()
    with pytest.raises(ConfigError, match="give --out"):  # never over one of the runs' own reports
        cli("report", str(one), str(tmp_path / "runs" / "whale" / "seed-0"))


def test_resume_with_other_settings_is_refused_before_any_server(finished):
    run_dir, _ = finished
    with pytest.raises(ConfigError, match=r"budget: 60 -> 99; .*eval_k: 2 -> 4"):
        cli("run", "--resume", str(run_dir), "--budget", "99", "--eval-k", "4")
    with pytest.raises(ConfigError, match="holds no `whale run`"):
        cli("run", "--resume", str(run_dir.parent / "nothing"))
    with pytest.raises(ConfigError, match="needs --domain"):
        cli("run", "--budget", "10")


def test_compare_validates_methods_and_seeds_first(tmp_path):
    with pytest.raises(
        ConfigError, match="valid methods are whale, weight-only, harness-only, fst, stagewise"
    ):
        cli("compare", "--domain", "math", "--methods", "whale,bogus", "--out", str(tmp_path))
    with pytest.raises(ConfigError, match="--seeds must be comma-separated integers"):
        cli("compare", "--domain", "math", "--seeds", "0,x", "--out", str(tmp_path))
    args = argparse.Namespace(domain="math", methods="whale,fst", seeds="0,1", out=tmp_path, budget=50)
    runs, out = compare.plan(args)
    assert [(s.method, s.seed, s.budget, d.relative_to(out).as_posix()) for s, d in runs] == [
        ("whale", 0, 50, "whale/seed-0"),
        ("fst", 0, 50, "fst/seed-0"),
        ("whale", 1, 50, "whale/seed-1"),
        ("fst", 1, 50, "fst/seed-1"),
    ]


def test_compare_runs_whale_once_per_schedule_and_the_baselines_once(tmp_path):
    args = argparse.Namespace(
        domain="math", methods="whale,weight-only,fst", seeds="0", out=tmp_path, budget=50,
        schedule=["fixed:0.5,2", "patience:harness_max=3"],
    )  # fmt: skip
    runs, out = compare.plan(args)
    assert [(s.method, s.schedule, s.run_tag, d.relative_to(out).as_posix()) for s, d in runs] == [
        ("whale", "fixed:0.5,2", "whale-fixed-0", "whale-fixed/seed-0"),
        ("whale", "patience:harness_max=3", "whale-patience-0", "whale-patience/seed-0"),
        ("weight-only", "fixed:0.5,2", None, "weight-only/seed-0"),
        ("fst", "fixed:0.5,2", None, "fst/seed-0"),
    ]
    args.schedule = ["fixed:0.5,2", "fixed:0.50,2"]
    with pytest.raises(ConfigError, match="one schedule twice"):
        compare.plan(args)
    args.schedule = ["fixed:0.5,2", "fixed:1,2"]
    folders = [d.relative_to(tmp_path).as_posix() for _, d in compare.plan(args)[0]]
    assert folders[:2] == ["whale-fixed-0.5-2/seed-0", "whale-fixed-1-2/seed-0"]


def test_compare_reuses_a_running_server_and_shares_its_evaluations_folder(tmp_path, monkeypatch):
    from whale_dspy.backends import RemoteServer

    calls = []
    monkeypatch.setattr(compare, "load_data", lambda settings: None)
    monkeypatch.setattr(compare, "write_outputs", lambda *args, **kwargs: ("table", "plot"))
    monkeypatch.setattr(compare, "print_summary", lambda *args: None)
    monkeypatch.setattr(
        compare, "execute", lambda settings, run_dir, backend, data, **kw: calls.append((backend, kw)) or {}
    )
    url = "http://127.0.0.1:9"
    argv = ("--domain", "math", "--model", str(tmp_path), "--methods", "whale,fst", "--seeds", "0,1")
    assert cli("compare", *argv, "--server-url", url, "--out", str(tmp_path / "cmp")) == 0
    assert len(calls) == 4 and all(isinstance(backend, RemoteServer) for backend, _ in calls)
    assert {backend.url for backend, _ in calls} == {url}
    assert {kw["shared_evals"].root for _, kw in calls} == {tmp_path / "cmp" / "shared-evals"}


def test_transfer_picks_the_weights_of_another_run(finished, tmp_path):
    run_dir, result = finished
    settings = run.RunSettings.from_run(run_dir)
    assert transfer.weights_of("base", settings) == ("base", None)
    label, adapter = transfer.weights_of(str(run_dir), settings)
    assert adapter.name == result["adapter"]["name"] and label.endswith(adapter.name)
    with pytest.raises(ConfigError, match="another base model"):
        transfer.weights_of(str(run_dir), run.RunSettings(domain="math", model="qwen2.5-coder-0.5b"))


def test_eval_of_a_run_takes_its_final_program_where_the_flags_are_silent(finished, tmp_path):
    from whale_cli import eval as eval_command
    from whale_cli.main import build_parser

    run_dir, result = finished
    parse = lambda *argv: build_parser().parse_args(["eval", *argv])  # noqa: E731
    copy = tmp_path / "adapter-copy"
    copy.mkdir()  # the run's own final adapter is a fake path: a committed copy stands in
    filled = eval_command.with_run_defaults(parse("--run", str(run_dir), "--adapter", str(copy)))
    assert (filled.domain, filled.model) == ("scripted", run.RunSettings.from_run(run_dir).model)
    assert filled.harness == str(run_dir / result["harness"]["path"]) and Path(filled.harness).is_file()
    assert filled.adapter == str(copy)
    told = eval_command.with_run_defaults(
        parse("--run", str(run_dir), "--adapter", str(copy), "--harness", "h0")
    )
    assert told.harness == "h0"  # a flag given wins over the run's
    with pytest.raises(ConfigError, match=r"final adapter /nonexistent/adapters/s\d+ is gone"):
        eval_command.with_run_defaults(parse("--run", str(run_dir)))
    with pytest.raises(ConfigError, match="needs --domain"):
        eval_command.with_run_defaults(parse("--limit", "3"))
    assert eval_command.with_run_defaults(parse("--domain", "math")).model == "smollm2-135m"


def test_eval_of_a_run_samples_as_the_run_did_and_refuses_an_unfinished_one(finished, tmp_path):
    import shutil

    from whale_cli import eval as eval_command
    from whale_cli.main import build_parser

    run_dir = Path(shutil.copytree(finished[0], tmp_path / "run"))
    config = json.loads((run_dir / "config.json").read_text())
    config["cli"] |= {"preset": "gpu", "thinking": False, "max_tokens": 600}
    (run_dir / "config.json").write_text(json.dumps(config))
    parse = lambda *argv: build_parser().parse_args(["eval", "--run", str(run_dir), "--adapter", ".", *argv])  # noqa: E731
    filled = eval_command.with_run_defaults(parse())
    assert (filled.preset, filled.thinking) == ("gpu", False)
    assert eval_command.eval_sampling(filled)["max_tokens"] == 600  # the run's, not the preset's 2048
    assert eval_command.eval_sampling(filled) == run.RunSettings.from_run(run_dir).sampling
    told = eval_command.with_run_defaults(parse("--preset", "cpu", "--thinking", "--max-tokens", "64"))
    assert (told.preset, told.thinking, told.max_tokens) == ("cpu", True, 64)  # the flags given win
    checkpoint = json.loads((run_dir / "checkpoint.json").read_text())
    (run_dir / "checkpoint.json").write_text(json.dumps({**checkpoint, "finished": None}))
    with pytest.raises(ConfigError, match="is unfinished"):
        eval_command.with_run_defaults(parse())


def wait_for_units(run_dir: Path, count: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        units = [
            e for e in engine_events(RunDir(run_dir)) if e["kind"] in ("weight_step", "harness_iteration")
        ]
        if len(units) >= count:
            return
        assert proc.poll() is None, "the scripted run ended before it could be killed"
        time.sleep(0.02)
    raise AssertionError(f"fewer than {count} units after {timeout} s")


def scripted_process(run_dir: Path, delay: float) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HELPERS.parent.parent), str(HELPERS.parent)])}
    return subprocess.Popen(
        [sys.executable, str(HELPERS), str(run_dir), "--delay", str(delay)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


@pytest.mark.parametrize("kill_after", [2, 5, 7])  # of the scripted run's 8 units: 7 is mid-run
def test_kill_9_mid_run_then_resume_matches_an_uninterrupted_run(finished, tmp_path, kill_after):
    reference_dir, reference = finished
    run_dir = tmp_path / "killed"
    proc = scripted_process(run_dir, delay=0.15)
    try:
        wait_for_units(run_dir, kill_after, proc)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    resumed = scripted_process(run_dir, delay=0.0)
    _, stderr = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, stderr.decode()[-2000:]
    assert stable_events(run_dir) == stable_events(reference_dir)
    final = json.loads((run_dir / "report.json").read_text())
    assert final["spend"]["rollouts"] == reference["spend"]["rollouts"]
    assert [p["mean_at_k"] for p in final["curve"]] == [p["mean_at_k"] for p in reference["curve"]]
    assert final["harness"] == reference["harness"] and final["adapter"] == reference["adapter"]
    assert [e["kind"] for e in engine_events(RunDir(run_dir))].count("run_resumed") == 1


@pytest.mark.parametrize("method", ["whale", "fst"])
def test_wiring_builds_the_real_phases_with_their_rollout_bounds(tmp_path, method):
    from whale_cli.wiring import load_data, make_optimizer
    from whale_dspy.backends import RemoteServer

    settings = run.RunSettings(
        domain="math", method=method, budget=100, train_limit=8, search_limit=12, test_limit=2,
        selection_tasks=4,
    )  # fmt: skip
    data = load_data(settings)
    optimizer = make_optimizer(
        settings, tmp_path, RemoteServer("http://127.0.0.1:9", base_model="base"), data
    )
    rft, meta = optimizer.weight_phase, optimizer.harness_phase
    assert optimizer.weight_phase.rollouts_per_step(data.trainset) == rft.config.batch_size * rft.config.k
    k, smoke = meta.config.rollouts_per_task, meta.config.smoke_tasks
    assert (meta.config.tasks, meta.config.selection_tasks) == (8, 4)
    assert optimizer.harness_phase.rollouts_per_iteration(data.searchset, 0) == smoke + 8 * k
    # each candidate's smoke and feedback rollouts, and the racers' and the incumbent's in the race
    racers = min(meta.config.racers, meta.config.candidates)
    assert optimizer.harness_phase.rollouts_per_iteration(data.searchset, 1) == (
        (smoke + 8 * k) * meta.config.candidates + 4 * k * (racers + 1)
    )
    assert meta.config.prompt_only is (method == "fst")
    assert rft.config.run_tag == f"{method}-0"  # runs sharing one server never reuse adapter names
    assert optimizer.evaluator.limits.candidate_seconds > meta.evaluator.limits.candidate_seconds
    # every checkpoint is measured under the completion budget the weight phase samples with
    assert optimizer.sampling == {"temperature": rft.config.temperature, "max_tokens": rft.config.max_tokens}


def test_the_trainer_takes_one_core_beside_a_shared_server_and_all_beside_its_own(tmp_path):
    """A `--server-url` server may sample for other runs while this one trains."""
    import os

    from whale_cli.wiring import load_data, make_optimizer
    from whale_dspy.backends import RemoteServer, VLLMServer

    settings = run.RunSettings(
        domain="math", budget=100, train_limit=8, search_limit=4, test_limit=2, selection_tasks=0
    )
    data = load_data(settings)
    shared = make_optimizer(
        settings, tmp_path / "a", RemoteServer("http://127.0.0.1:9", base_model="b"), data
    )
    own = make_optimizer(settings, tmp_path / "b", VLLMServer("m", log_path=tmp_path / "log"), data)
    assert shared.weight_phase.trainer.cpu_threads == 1
    assert own.weight_phase.trainer.cpu_threads == len(os.sched_getaffinity(0))


def test_progress_counts_the_budget_s_unit_and_prints_each_harness_decision():
    import io

    from rich.console import Console

    from whale_cli.run import RunProgress
    from whale_cli.run_settings import RunSettings

    out = io.StringIO()
    progress = RunProgress(
        Console(file=out, width=200), RunSettings(domain="math", budget=100, budget_unit="calls")
    )
    decision = {
        "adopted": "c0002",
        "reason": "cleared paired on 16 tasks",
        "gain": {"gain": 0.2, "low": 0.05, "tasks": 16},
    }
    signal = {"rollouts": 10, "lm_calls": 50, "decision": decision}
    progress({"kind": "harness_iteration", "signal": signal})
    task = progress.progress.tasks[progress.rollouts]
    assert task.completed == 50 and "calls" in task.description  # a vote of five: five calls a rollout
    assert "harness decision: adopted +0.200 [+0.050, ...] on 16 tasks" in out.getvalue()
