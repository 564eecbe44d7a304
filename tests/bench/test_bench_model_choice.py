"""bench/model_choice.py's tiny mode: every model x domain x output format, each model on the fake vLLM."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bench_helpers import load_bench

NUMBER = r"\d+\.\d+"


def test_the_tiny_model_choice_benchmark_fills_the_table_for_each_model_domain_and_format(
    tmp_path, capsys
) -> None:
    bench = load_bench("model_choice")
    argv = ["--tiny", "--models", "m1", "m2", "--domains", "math", "chess", "--limit", "2", "--k", "2"]
    assert bench.main([*argv, "--threads", "2", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| model | domain | output | parsed | mean@k [95% CI] | tokens/rollout | rollouts/s |" in out
    ci = rf"{NUMBER} \[{NUMBER}, {NUMBER}\]"
    rows = re.findall(
        rf"^\| (m\d) \| (\w+) \| (chat|json) \| (\d+)% \| {ci} \| \d+ \| {NUMBER} \|$", out, re.M
    )
    cells = [(model, domain, fmt) for model, domain, fmt, _ in rows]
    assert cells == [(m, d, f) for m in ("m1", "m2") for d in ("math", "chess") for f in ("chat", "json")]
    parsed = {(model, domain, fmt): int(rate) for model, domain, fmt, rate in rows}
    assert parsed[("m1", "math", "json")] == 100  # the fake's {"answer": ...} fits math's output field
    assert parsed[("m1", "chess", "json")] == 0  # and not the chess harness's "move"
    for model in ("m1", "m2"):  # "json" asked the server for schema-constrained output, "chat" did not
        assert first_calls_constrained(tmp_path / model / "math-json.jsonl") == {True}
        assert first_calls_constrained(tmp_path / model / "math-chat.jsonl") == {False}


def first_calls_constrained(trace: Path) -> set[bool]:
    """Whether each traced rollout's first LM call sent a response format."""
    rollouts = [json.loads(line) for line in trace.read_text().splitlines()]
    return {rollout["lm_calls"][0]["sampling"].get("response_format") is not None for rollout in rollouts}
