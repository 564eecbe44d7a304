"""Every checkpoint of a run, the start included, is evaluated under one sampling, whichever
entry point built the run: a start bound at the backend's defaults and later checkpoints at the
weight phase's own settings would compare programs under different completion budgets. (The
short form's case is in test_short_form.py, on the run its tests share.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from student_helpers import exact, lookup, questions, scripted
from user_programs import LookupQA
from whale_helpers import toy_evaluator

from optimizers import RejectionSamplingFinetune, RFTConfig
from optimizers.engine.schedules import Fixed
from optimizers.engine.whale import WhaleOptimizer
from whale_cli.main import build_parser
from whale_cli.settings_file import settings_from_args
from whale_cli.wiring import load_data, make_optimizer, student_of
from whale_dspy.backends import RemoteServer
from whale_dspy.rundir import RunDir
from whale_dspy.testing import FakeBackend, FakeTrainer


def checkpoint_sampling(run_dir: Path, folder: str = "evals") -> list[dict]:
    """The sampling of every LM call of every checkpoint evaluation (or of the rollouts traced in
    another folder), in order."""
    traces = sorted((run_dir / folder).glob("*.jsonl"))
    assert len(traces) >= 2, "a start and at least one later checkpoint"
    return [
        {key: call["sampling"].get(key) for key in ("temperature", "max_tokens")}
        for trace in traces
        for line in trace.read_text().splitlines()
        for call in json.loads(line)["lm_calls"]
    ]


def test_the_explicit_form_without_sampling_evaluates_the_start_as_its_weight_checkpoints(tmp_path):
    backend = FakeBackend(scripted())
    weight = RejectionSamplingFinetune(
        backend=backend,
        trainer=FakeTrainer(),
        metric=exact,
        config=RFTConfig(batch_size=2, k=2, threads=2, run_tag="ut", max_tokens=64, temperature=0.9),
        run_dir=RunDir.open(tmp_path / "rft", {"test": True}),
        base="base-model",
    )
    optimizer = WhaleOptimizer(
        backend=backend,
        metric=exact,
        schedule=Fixed(1, 1),
        budget=8,
        run_dir=tmp_path / "run",
        eval_every=4,
        eval_k=1,
        evaluator=toy_evaluator(),
        weight_phase=weight,
        method="weight-only",
    )
    optimizer.compile(LookupQA(lookup, notes=1), trainset=questions(2), track=questions(2))
    seen = checkpoint_sampling(tmp_path / "run")
    assert {json.dumps(s, sort_keys=True) for s in seen} == {'{"max_tokens": 64, "temperature": 0.9}'}


@pytest.mark.parametrize("from_file", [False, True], ids=["whale run", "whale run --config"])
def test_whale_run_binds_its_start_and_evaluates_every_checkpoint_as_the_weight_phase_samples(
    tmp_path, from_file
):
    flags = ["--domain", "math", "--train-limit", "8", "--search-limit", "12", "--test-limit", "2"]
    if from_file:
        (tmp_path / "run.toml").write_text(
            'domain = "math"\ntrain_limit = 8\nsearch_limit = 12\ntest_limit = 2\n'
        )
        flags = ["--config", str(tmp_path / "run.toml")]
    settings = settings_from_args(build_parser().parse_args(["run", *flags, "--selection-tasks", "4"]))
    data = load_data(settings)
    backend = RemoteServer("http://127.0.0.1:9", base_model="base")
    optimizer = make_optimizer(settings, tmp_path / "run", backend, data)
    weight = optimizer.weight_phase.sampling()
    assert optimizer.sampling == weight  # what every checkpoint is bound and evaluated under
    start = student_of(data, backend, settings).bound_lm.kwargs
    assert {key: start[key] for key in weight} == weight
