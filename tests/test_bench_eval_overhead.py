"""bench/eval_overhead.py's tiny mode: framework rounds against their HTTP replay, on the fake vLLM."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "eval_overhead.py"
NUMBER = r"\d+\.\d+"


def test_the_tiny_overhead_benchmark_replays_the_framework_calls_and_prints_the_ratio(capsys) -> None:
    spec = importlib.util.spec_from_file_location("eval_overhead_bench", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.main(["--tiny", "--tasks", "2", "--k", "2", "--threads", "2"])
    out = capsys.readouterr().out
    assert "| side | rounds | seconds (total) |" in out
    rows = dict(re.findall(rf"^\| (direct|framework) \| 2 \| {NUMBER} \| .* \| (\d+/\d+) \|$", out, re.M))
    assert set(rows) == {"direct", "framework"}
    assert rows["direct"] == rows["framework"]  # the replay sent the framework's calls, token for token
    assert re.search(rf"framework/direct rollouts per second: {NUMBER} \(framework share", out)
    assert re.search(rf"the tool calls alone \(serial, 4 searches\): {NUMBER} s", out)
