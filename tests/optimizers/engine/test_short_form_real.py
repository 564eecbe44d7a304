"""The short form end to end on the embedded model: `whale_dspy.LM` starts the server, and
`WhaleOptimizer(metric=..., auto="light")` finds it and the trainer on the student's LM."""

from __future__ import annotations

import pytest
from user_programs import EchoAgent

import whale_dspy
from optimizers.engine import auto
from optimizers.engine.whale import WhaleOptimizer
from whale_dspy.rundir import RunDir
from whale_dspy.testing.echo import WORDS, echo_metric, echo_tasks

pytestmark = pytest.mark.integration


def tidy(text: str) -> str:
    """The reply without surrounding spaces, quotes or capitals."""
    return text.strip().strip("\"'.").lower()


def test_the_short_form_runs_auto_light_on_the_embedded_model(tmp_path, monkeypatch):
    # light's own budget (96) took over 15 minutes on an AVX2 CPU beside the other worker's tests,
    # and 40 (two weight steps, 8 valset tasks) 515 s in the suite. At 24 on 4 valset tasks the run
    # makes one weight step and opens a harness phase that cannot afford a decision: the short
    # form's own path (its decisions: test_short_form.py; light's full run: bench/RESULTS.md)
    monkeypatch.setitem(auto.AUTO["cpu"], "light", auto.AutoLevel(24, auto.AUTO["cpu"]["light"].schedule))
    program = EchoAgent(tidy)
    program.set_lm(whale_dspy.LM("smollm2-135m", folder=tmp_path / "lm"))
    best = WhaleOptimizer(metric=echo_metric, auto="light", run_dir=tmp_path / "run").compile(
        program, trainset=echo_tasks(WORDS[:8]), valset=echo_tasks(WORDS[8:12])
    )
    run = RunDir(tmp_path / "run")
    assert best.report.spend.rollouts <= 24 and run.events("run_finished")
    weight, harness = best.report.phases[:2]
    assert (weight.phase, weight.units) == ("weight", 1)
    assert (harness.phase, harness.units, harness.reason) == ("harness", 0, "budget")
    trained = list((tmp_path / "run").rglob("adapter_config.json"))
    assert trained and not (tmp_path / "lm" / "adapters").exists()  # adapters only in the run folder
