"""Crash-safe files and run directories."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from whale_dspy.errors import ConfigError
from whale_dspy.jsonl import append_jsonl, atomic_write_json, atomic_write_text, read_jsonl
from whale_dspy.records import AdapterRef
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


def test_a_write_killed_half_way_leaves_the_previous_file_whole(tmp_path):
    """RLIMIT_FSIZE kills the writer (SIGXFSZ) after its first kilobyte: a deterministic kill mid-write.
    A plain `open(path, "w")` write would leave the file truncated to that kilobyte."""
    path = tmp_path / "checkpoint.json"
    atomic_write_json(path, {"events": 7})
    before = path.read_text()
    script = (
        "import resource, signal\n"
        "from pathlib import Path\n"
        "from whale_dspy.jsonl import atomic_write_json\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it; the kernel's default kills\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))\n"
        f"atomic_write_json(Path({str(path)!r}), {{'events': 8, 'pad': 'x' * 100000}})\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True)
    assert done.returncode == -signal.SIGXFSZ
    assert path.read_text() == before


def test_a_write_that_fails_half_way_leaves_the_previous_file_and_no_temporary(tmp_path):
    path = tmp_path / "state.txt"
    atomic_write_text(path, "old\n")
    with pytest.raises(UnicodeEncodeError):
        atomic_write_text(path, "new" * 10000 + "\udc80")  # a lone surrogate: UTF-8 cannot encode it
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["state.txt"]


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


def test_an_adapter_is_found_where_a_restored_run_folder_holds_it(tmp_path):
    run = RunDir(tmp_path / "here" / "run")
    copy = run.path / "adapters" / "a1" / "adapter"
    copy.mkdir(parents=True)
    (copy / "adapter_config.json").write_text("{}")
    old = AdapterRef("a1", "/gone/runs/run/adapters/a1/adapter", "/gone/cache/model")

    moved = run.adapter_here(old, "/here/cache/model")
    assert (moved.path, moved.base) == (str(copy.resolve()), "/here/cache/model")
    hub = AdapterRef("a1", str(copy), "Qwen/Qwen2.5-0.5B")  # a hub id is no path: never swapped
    assert run.adapter_here(hub, "/here/cache/model") == hub
    elsewhere = AdapterRef("a2", "/gone/a2/adapter", "/gone/cache/model")  # a server may hold it
    assert run.adapter_here(elsewhere, None) == elsewhere


def test_a_restored_run_serves_its_own_copy_even_where_another_run_holds_the_recorded_path(tmp_path):
    """A new run at the original folder writes adapters under the same names and paths."""
    original = tmp_path / "original" / "adapters" / "a1" / "adapter"
    restored = RunDir(tmp_path / "restored")
    for folder in (original, restored.path / "adapters" / "a1" / "adapter"):
        folder.mkdir(parents=True)
        (folder / "adapter_config.json").write_text("{}")
    ref = AdapterRef("a1", str(original), "base")
    assert restored.adapter_here(ref, None).path == str(
        (restored.path / "adapters" / "a1" / "adapter").resolve()
    )
