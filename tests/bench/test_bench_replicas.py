"""bench/replicas.py's tiny mode: one replica against two, and an adapter's load time, on the fake vLLM."""

from __future__ import annotations

import re

from bench_helpers import load_bench


def test_the_tiny_replica_benchmark_measures_one_against_two_replicas_and_the_adapter_load(capsys) -> None:
    bench = load_bench("replicas")
    bench.main(["--tiny", "--tasks", "4", "--k", "2", "--threads", "4"])
    out = capsys.readouterr().out
    assert "| 1 (A) |" in out and "| 2 (B) |" in out and "B/A " in out
    answered = re.search(r"calls answered per replica in B: \[(\d+), (\d+)\]", out)
    assert answered and min(map(int, answered.groups())) > 0  # the set used both replicas
    assert re.search(r"adapter written -> served on both replicas: \d+\.\d+ s", out)
