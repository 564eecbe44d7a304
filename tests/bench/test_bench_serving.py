"""bench/serving.py's tiny mode: the before/after comparison's code path on the shipped fake backend."""

from __future__ import annotations

from bench_helpers import load_bench


def test_the_tiny_serving_benchmark_compares_before_and_after_for_the_base_and_an_adapter(capsys) -> None:
    bench = load_bench("serving")
    bench.main(["--tiny", "--levels", "1", "3"])
    out = capsys.readouterr().out
    for served in ("base", "bench-r00"):
        for level, requests in ((1, 2), (3, 3)):
            assert f"| {served} | {level} | {requests} |" in out
    assert "c=3: adapter/base before" in out
