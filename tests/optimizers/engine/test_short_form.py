"""The short form DSPy users expect: an LM whose provider is our backend, the metric passed once,
`auto=` choosing the rest, and everything the run writes under its run folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dspy
import pytest
from student_helpers import exact, lookup, questions, scripted
from test_one_sampling import checkpoint_sampling
from user_programs import LookupQA

from optimizers.engine.whale import WhaleOptimizer
from whale_cli.run_settings import RunSettings
from whale_dspy.backends import WhaleProvider
from whale_dspy.errors import ConfigError
from whale_dspy.harness import HarnessProgram
from whale_dspy.rundir import RunDir
from whale_dspy.testing import FakeBackend, FakeTrainer


def users_program(tmp_path) -> tuple[LookupQA, FakeBackend, FakeTrainer]:
    backend, trainer = FakeBackend(scripted()), FakeTrainer()
    provider = WhaleProvider(backend, trainer, base="base-model", adapters_dir=tmp_path / "provider")
    program = LookupQA(lookup, notes=1)
    program.set_lm(provider.lm())
    return program, backend, trainer


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """One short-form run (with a held-out curve) that several tests read: a run takes ~40 s."""
    tmp_path = tmp_path_factory.mktemp("short")
    program, backend, trainer = users_program(tmp_path)
    run_dir = tmp_path / "run"
    best = WhaleOptimizer(metric=exact, auto="light", run_dir=run_dir).compile(
        program, trainset=questions(8), valset=questions(4), track=questions(2)
    )
    return best, backend, trainer, run_dir


def test_the_short_form_compiles_a_users_program_with_its_lms_backend(short_run):
    best, backend, trainer, run_dir = short_run
    assert isinstance(best, HarnessProgram) and best.report.spend.rollouts > 0
    assert trainer.calls and all(run_dir in call.out_dir.parents for call in trainer.calls)
    assert best.adapter_name in backend.loaded
    assert (run_dir / "harness").is_dir() and RunDir(run_dir).events("run_started")
    config = RunDir(run_dir).config()
    assert config["auto"]["budget"] == 96 and config["sampling"] == {"temperature": 1.0, "max_tokens": 128}


USERS_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
from student_helpers import exact, lookup, questions, scripted
from user_programs import LookupQA
from optimizers import WhaleOptimizer
from whale_dspy.backends import WhaleProvider
from whale_dspy.testing import FakeBackend, FakeTrainer

provider = WhaleProvider(FakeBackend(scripted()), FakeTrainer(), base="base-model", adapters_dir="provider")
program = LookupQA(lookup, notes=1)
program.set_lm(provider.lm())
best = WhaleOptimizer(metric=exact, auto="light").compile(program, trainset=questions(8), valset=questions(8))
print(best.report.summary().text())
"""


def test_a_users_script_says_what_it_does_keeps_its_run_and_ends_with_the_verdict(tmp_path):
    """The short form as a DSPy user runs it: a script, its output in a log, logging never set up.
    It names its run folder (under the working directory), prints a line per weight step, harness
    decision and checkpoint, and ends with the start and the end and their interval."""
    tests = Path(__file__).resolve().parents[2]
    (tmp_path / "users_run.py").write_text(USERS_SCRIPT.format(tests=str(tests)))
    env = {**os.environ, "PYTHONPATH": str(tests.parent)}
    done = subprocess.run(
        [sys.executable, "users_run.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    said = done.stderr
    runs = list((tmp_path / "whale_runs").glob("LookupQA-*"))
    said_first = f"whale: run folder {runs[0]} (run_dir= chooses another)"
    assert len(runs) == 1 and said_first in said and said.index(said_first) < said.index("run started")
    assert "weight step 0: kept" in said and "harness decision 1:" in said and "test mean@8" in said
    assert "at the start ->" in said and "95% interval over 8 tasks" in said  # the summary, logged
    assert "at the start ->" in done.stdout  # and printed from the report
    assert sum("warning" in line.lower() for line in said.splitlines()) <= 5


def test_auto_light_races_a_decision_on_tasks_the_proposer_never_saw(tmp_path):
    """8 search tasks: 2 shown to the proposer, 6 deciding; the summary reads the valset."""
    program, _, _ = users_program(tmp_path)
    best = WhaleOptimizer(metric=exact, auto="light", run_dir=tmp_path / "run").compile(
        program, trainset=questions(8), valset=questions(8)
    )
    slices = json.loads((tmp_path / "run" / "harness" / "phase-001-selection" / "slices.json").read_text())
    decision = next(e["signal"]["decision"] for e in RunDir(tmp_path / "run").events("harness_iteration")
                    if e["signal"]["decision"])  # fmt: skip
    assert decision["tasks"] and set(decision["tasks"]) <= set(slices["selection"])
    assert not set(slices["selection"]) & set(slices["feedback"])
    summary = best.report.summary()
    assert summary.start is not None and summary.gain is not None and summary.decisions >= 1


def test_ten_examples_compile_the_dspy_way_with_the_default_settings(tmp_path):
    program, _, _ = users_program(tmp_path)
    data = questions(10)
    best = WhaleOptimizer(metric=exact, auto="light", run_dir=tmp_path / "run").compile(
        program, trainset=data[:6], valset=data[6:]
    )
    assert isinstance(best, HarnessProgram) and best.report.finished


def test_the_short_form_refuses_what_auto_chooses_and_an_lm_without_our_provider(tmp_path):
    with pytest.raises(ConfigError, match="budget"):
        WhaleOptimizer(metric=exact, auto="light", budget=10)
    with pytest.raises(ConfigError, match="explicit form needs backend, schedule, budget, run_dir"):
        WhaleOptimizer(metric=exact)
    program = LookupQA(lookup, notes=1)
    program.set_lm(dspy.LM("openai/gpt-4o-mini"))
    with pytest.raises(ConfigError, match="whale_dspy.LM"):
        WhaleOptimizer(metric=exact, auto="light", run_dir=tmp_path).compile(program, trainset=questions(2))


def test_config_show_prints_the_settings_the_short_form_runs(short_run, tmp_path, capsys):
    from whale_cli.main import main
    from whale_cli.settings_file import read_settings_file

    ran = RunDir(short_run[3]).config()
    assert main(["config", "show", "--auto", "light", "--machine", "cpu", "--model", "base-model"]) == 0
    (tmp_path / "shown.toml").write_text(capsys.readouterr().out)
    shown = RunSettings(**read_settings_file(tmp_path / "shown.toml"))
    engine = shown.whale_config()
    assert ran["auto"] == {"level": "light", "model": shown.model, **engine.record()}
    assert engine.meta_harness.record() == ran["meta_harness"]
    assert {**engine.rft.to_dict(), "run_tag": ran["rft"]["run_tag"]} == ran["rft"]  # the tag names the run


def test_the_short_form_evaluates_the_start_as_its_weight_checkpoints(short_run):
    best, _, _, run_dir = short_run
    assert best.report.phases[0].phase == "weight"  # a later checkpoint on trained weights
    seen = checkpoint_sampling(run_dir)
    trained = checkpoint_sampling(run_dir, "traces/rft")  # what the weight phase sampled
    assert {json.dumps(s, sort_keys=True) for s in seen} == {json.dumps(s, sort_keys=True) for s in trained}
