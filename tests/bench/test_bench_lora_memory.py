"""bench/lora_memory.py's tiny mode: the three variants, each in a fresh process, on a tiny random Qwen2."""

from __future__ import annotations

import re

import pytest
from bench_helpers import load_bench

NUMBER = r"\d+\.\d+"


def test_the_tiny_lora_memory_benchmark_measures_each_variant_and_prints_the_ratios(capsys) -> None:
    bench = load_bench("lora_memory")
    bench.main(["--tiny", "--length", "64", "--completion", "8"])
    out = capsys.readouterr().out
    assert "batch 2 x 64 tokens, 8 trained per row" in out  # --tiny's batch, the lengths given
    labels = ["model loss", "completion loss", "completion loss + checkpointing"]
    line = rf"^  ({'|'.join(map(re.escape, labels))}) +peak +\d+ MiB +{NUMBER} s  loss ({NUMBER})$"
    rows = re.findall(line, out, re.M)
    assert [label for label, _ in rows] == labels
    losses = [float(loss) for _, loss in rows]
    assert losses == pytest.approx([losses[0]] * 3, abs=1e-3)  # every variant took the same step
    ratio = rf"peak memory ({NUMBER}|n/a), step time {NUMBER}$"
    for pair in ("completion / model", "checkpointed / completion"):
        assert re.search(rf"^  {pair}: {ratio}", out, re.M)
