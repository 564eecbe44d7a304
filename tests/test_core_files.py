"""Crash-safe files and run directories."""

from __future__ import annotations

import subprocess
import sys

import pytest

from whale_dspy.errors import ConfigError
from whale_dspy.jsonl import append_jsonl, atomic_write_json, read_jsonl
from whale_dspy.rundir import RunDir


def test_a_torn_last_line_is_dropped_but_earlier_records_survive(tmp_path):
    path = tmp_path / "events.jsonl"
    append_jsonl(path, {"n": 1})
    append_jsonl(path, {"n": 2})
    with open(path, "a") as handle:
        handle.write('{"n": 3, "trunc')
    assert [r["n"] for r in read_jsonl(path)] == [1, 2]


def test_a_torn_line_in_the_middle_is_an_error(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text('{"n": 1}\n{"bad\n{"n": 3}\n')
    with pytest.raises(ValueError):
        list(read_jsonl(path))


def test_atomic_write_replaces_whole_files(tmp_path):
    path = tmp_path / "state.json"
    atomic_write_json(path, {"a": 1})
    atomic_write_json(path, {"a": 2})
    assert path.read_text().strip().endswith("}") and '"a": 2' in path.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_run_dir_reopens_same_config_and_refuses_a_different_one(tmp_path):
    run = RunDir.open(tmp_path / "run", {"domain": "math", "budget": 100, "schedule": {"E": 0.6}})
    run.log_event("step", n=1)
    again = RunDir.open(tmp_path / "run", {"domain": "math", "budget": 100, "schedule": {"E": 0.6}})
    assert [e["n"] for e in again.events("step")] == [1]
    with pytest.raises(ConfigError) as error:
        RunDir.open(tmp_path / "run", {"domain": "math", "budget": 200, "schedule": {"E": 1.0}})
    assert "budget: 100 -> 200" in str(error.value) and "schedule.E: 0.6 -> 1.0" in str(error.value)


def test_events_written_before_a_kill_are_kept(tmp_path):
    script = (
        "import os, signal\n"
        "from whale_dspy.jsonl import append_jsonl\n"
        "from pathlib import Path\n"
        f"p = Path({str(tmp_path / 'e.jsonl')!r})\n"
        "for i in range(5):\n"
        "    append_jsonl(p, {'i': i})\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    subprocess.run([sys.executable, "-c", script], check=False)
    assert [r["i"] for r in read_jsonl(tmp_path / "e.jsonl")] == list(range(5))
