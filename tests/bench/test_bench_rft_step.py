"""bench/rft_step.py's tiny mode: the benchmark's whole code path on the shipped doubles, so it cannot rot."""

from __future__ import annotations

from bench_helpers import load_bench


def test_the_tiny_rft_step_benchmark_runs_both_modes_on_the_same_samples(tmp_path, capsys):
    bench = load_bench("rft_step")
    assert bench.main(["--tiny", "--run-dir", str(tmp_path), "--repeats", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("[in-process] RFT step") == 2 and out.count("[sandboxed] RFT step") == 2
    assert "sampling: sandboxed" in out and "whole step: sandboxed" in out
    agreement = "in-process-0 32/32, sandboxed-0 32/32, in-process-1 32/32, sandboxed-1 32/32"
    assert f"rollouts identical to the first run's: {agreement}" in out


def test_the_tiny_benchmark_compares_the_before_and_after_servers_on_the_same_samples(tmp_path, capsys):
    bench = load_bench("rft_step")
    assert bench.main(["--tiny", "--run-dir", str(tmp_path), "--compare", "servers"]) == 0
    out = capsys.readouterr().out
    assert out.count("[before] RFT step") == 1 and out.count("[after] RFT step") == 1
    for line in ("sampling: before", "adapter evaluation: before", "whole step: before"):
        assert line in out
    assert "rollouts identical to the first run's: before-0 32/32, after-0 32/32" in out
