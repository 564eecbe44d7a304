"""bench/harness_eval.py's tiny mode: sandboxed against in-process evaluation on the scripted LM."""

from __future__ import annotations

import re

from bench_helpers import load_bench

NUMBER = r"\d+\.\d+"


def test_the_tiny_isolation_benchmark_alternates_both_evaluators_and_splits_the_overhead(capsys) -> None:
    bench = load_bench("harness_eval")
    bench.main(["--tiny", "--tasks", "2", "--k", "1", "--threads", "2"])
    out = capsys.readouterr().out
    line = rf"^ *(in-process|sandboxed): +{NUMBER} s total, +{NUMBER} s rollouts, (\d+) LM calls$"
    rounds = re.findall(line, out, re.M)
    assert [name for name, _ in rounds] == ["in-process", "sandboxed", "sandboxed", "in-process"]
    assert len({calls for _, calls in rounds}) == 1  # both evaluators did the same work
    summary = rf"in-process {NUMBER} s, sandboxed {NUMBER} s: overhead [+-]{NUMBER} % of evaluation time"
    assert re.search(rf"{summary} \(child start-up {NUMBER} s, proxying [+-]{NUMBER} s\)", out)
