"""bench/eval_overhead.py's tiny mode: framework rounds against their HTTP replay, on the fake vLLM."""

from __future__ import annotations

import re

from bench_helpers import load_bench

NUMBER = r"\d+\.\d+"


def test_the_tiny_overhead_benchmark_replays_the_framework_calls_and_prints_the_ratio(capsys) -> None:
    bench = load_bench("eval_overhead")
    bench.main(["--tiny", "--tasks", "2", "--k", "2", "--threads", "2"])
    out = capsys.readouterr().out
    assert "| side | rounds | seconds (total) |" in out
    rows = dict(re.findall(rf"^\| (direct|framework) \| 2 \| {NUMBER} \| .* \| (\d+/\d+) \|$", out, re.M))
    assert set(rows) == {"direct", "framework"}
    assert rows["direct"] == rows["framework"]  # the replay sent the framework's calls, token for token
    assert re.search(rf"framework/direct rollouts per second: {NUMBER} \(framework share", out)
    assert re.search(rf"the tool calls alone \(serial, 4 searches\): {NUMBER} s", out)
