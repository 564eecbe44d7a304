"""Each default a run, a search and an evaluation share has one home: `whale search` reads the
harness phase's sizes from the cpu preset that `whale run` uses, not from its own literals."""

from __future__ import annotations

from optimizers.engine.presets import get_preset
from whale_cli.main import build_parser


def test_whale_search_defaults_are_the_cpu_presets_harness_phase():
    args = build_parser().parse_args(["search", "--domain", "math"])
    phase = get_preset("cpu").meta_harness_config()
    given = (args.iterations, args.patience, args.candidates, args.tasks, args.threads)
    assert given == (phase.max_iterations, phase.patience, phase.candidates, phase.tasks, phase.threads)
