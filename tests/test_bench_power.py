"""bench/power.py: the variance components of a method difference are recovered from synthetic
reads drawn with known ones, and the standard error it sizes with is the spread such comparisons show."""

from __future__ import annotations

import numpy as np
import pytest
from bench_helpers import load_bench


def test_tiny_mode_recovers_the_seed_task_and_residual_components(capsys):
    bench = load_bench("power")
    found = bench.main(["--tiny", "--tasks", "400", "--k", "1"])
    truth = bench.TINY_SD
    assert np.sqrt(found.seed) == pytest.approx(truth["seed"], rel=0.15)
    assert np.sqrt(found.task) == pytest.approx(truth["task"], rel=0.1)
    assert np.sqrt(found.residual) == pytest.approx(truth["residual"], rel=0.02)
    low, high = found.seed_interval()
    assert low < truth["seed"] ** 2 < high
    out = capsys.readouterr().out
    assert "| test tasks | k | seeds per method for ±0.05 |" in out


def test_the_standard_error_is_the_spread_of_simulated_comparisons():
    bench = load_bench("power")
    truth = bench.TINY_SD
    known = bench.Components(truth["seed"] ** 2, truth["residual"] ** 2, truth["task"] ** 2, None, 0, 100)
    rng = np.random.default_rng(1)
    gaps = []
    for _ in range(400):
        drawn = bench.synthetic(rng, methods=2, seeds=4, tasks=100, sd=truth)
        gaps.append(drawn["m0"].mean() - drawn["m1"].mean())
    assert np.std(gaps, ddof=1) == pytest.approx(bench.standard_error(known, 4, 100), rel=0.12)
    fewer = bench.seeds_needed(known, 100, 0.1)
    assert bench.half_width(known, fewer, 100) <= 0.1 < bench.half_width(known, fewer - 1, 100)
