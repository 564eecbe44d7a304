"""`whale`'s output as a log file holds it (CI, nohup): no library chatter, and one plain progress line
per checkpoint or phase change where a terminal would show the live bar; `-v` lets the libraries in."""

from __future__ import annotations

import io
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from whale_cli.eval import _progress
from whale_cli.logs import LIBRARIES, quiet_libraries
from whale_cli.run import RunProgress, RunSettings
from whale_dspy.rundir import RunDir

HELPER = Path(__file__).parents[1] / "noisy_run.py"
PROGRESS = re.compile(
    r"^whale rollouts (\d+)/60, .* elapsed, .* left; (\w+ phase \(cycle \d+\)), (\d+) done; (.*)$"
)
CHATTER = ("httpx", "bm25s", "font_manager", "fontManager")
"""What a run's log carried before: a line per adapter swap, the index build, the font cache."""


def logged_run(folder: Path, *flags: str) -> tuple[list[str], Path]:
    """The noisy run's stdout and stderr together, as `whale run ... > log 2>&1` writes them, with a
    fresh font cache (matplotlib logs its build once per cache) and a fresh index cache."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")  # rich: a log is no terminal
    }
    here = HELPER.parent
    env.update(
        PYTHONPATH=os.pathsep.join([str(here.parent), str(here)]),
        MPLCONFIGDIR=str(folder / "matplotlib"),
        WHALE_CACHE_DIR=str(folder / "cache"),
    )
    run_dir = folder / "run"
    command = [sys.executable, str(HELPER), *flags, "run", "--domain", "scripted", "--run-dir", str(run_dir)]
    done = subprocess.run(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:]
    return done.stdout.splitlines(), run_dir


@pytest.fixture(scope="module")
def quiet_log(tmp_path_factory) -> tuple[list[str], Path]:
    return logged_run(tmp_path_factory.mktemp("quiet"))


def test_a_logged_run_carries_no_library_chatter_and_keeps_our_own_lines(quiet_log):
    lines, _ = quiet_log
    assert [line for line in lines if any(word in line for word in CHATTER)] == []
    assert any("INFO domains.bm25_index: building the BM25 index" in line for line in lines)


def test_a_logged_run_prints_one_progress_line_per_checkpoint_and_phase_change(quiet_log):
    lines, run_dir = quiet_log
    shown = [PROGRESS.match(line) for line in lines if line.startswith("whale rollouts")]
    assert all(shown), [line for line in lines if line.startswith("whale rollouts")]
    spent, phase, steps, expected = 0, "", 0, []
    for event in RunDir(run_dir).events():
        if event["kind"] == "phase_started":
            phase, steps = f"{event['phase']} phase (cycle {event['cycle']})", 0
        elif event["kind"] in ("weight_step", "harness_iteration"):
            spent, steps = spent + event["signal"]["rollouts"], steps + 1
        else:
            continue
        expected.append((spent, phase, steps))
    assert [(int(m[1]), m[2], int(m[3])) for m in shown] == expected
    # the 2 rollouts left of 60 fit no weight step (4) and no harness decision, so the run ends at 58
    assert expected[-1][0] == 58 and {phase for _, phase, _ in expected} >= {"weight phase (cycle 1)"}
    assert shown[-1][4] == "test mean@2 1.000 at 42 rollouts"  # the latest test score before the last
    bars = [line for line in lines if "━" in line and ("rollouts" in line or "phase (cycle" in line)]
    assert bars == []  # nor is the bar drawn at the end


def test_verbose_lets_the_library_lines_through(tmp_path):
    lines, _ = logged_run(tmp_path, "-v")
    text = "\n".join(lines)
    assert (
        'INFO httpx: HTTP Request: POST http://127.0.0.1:8000/v1/load_lora_adapter "HTTP/1.1 200 OK"' in text
    )
    assert "DEBUG bm25s: Building index from tokens" in text
    assert "INFO matplotlib.font_manager: generated new fontManager" in text


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """The test changes process-wide logging (root's level, the libraries'): undo it after."""
    root = logging.getLogger()
    levels = {name: logging.getLogger(name).level for name in ("", *LIBRARIES)}
    filters = {handler: list(handler.filters) for handler in root.handlers}
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
    for handler, kept in filters.items():
        handler.filters[:] = kept


def test_a_library_that_writes_through_its_own_handler_is_held_at_warning_too(restored_logging):
    """LiteLLM logs through a stderr handler of its own (and again through root's): root's filter
    never sees what that handler writes, so only its logger's level keeps it out."""
    logging.getLogger().setLevel(logging.INFO)  # as `whale` logs
    quiet_libraries()
    litellm = logging.getLogger("LiteLLM")
    assert litellm.isEnabledFor(logging.WARNING) and not litellm.isEnabledFor(logging.INFO)


def events() -> list[dict]:
    signal = {"rollouts": 10, "lm_calls": 10}
    return [
        {"kind": "phase_started", "phase": "weight", "cycle": 0},
        {"kind": "weight_step", "signal": signal},
        {"kind": "weight_step", "signal": signal},
    ]


def test_a_terminal_keeps_the_live_bar_and_prints_no_plain_lines():
    out = io.StringIO()
    progress = RunProgress(
        Console(file=out, force_terminal=True, width=120), RunSettings(domain="math", budget=100)
    )
    with progress.progress:
        for event in events():
            progress(event)
    assert "━" in out.getvalue() and "whale rollouts 20/100," not in out.getvalue()


def test_a_log_gets_the_bar_s_facts_as_lines():
    out = io.StringIO()
    progress = RunProgress(Console(file=out, width=120), RunSettings(domain="math", budget=100))
    with progress.progress:
        for event in events():
            progress(event)
    lines = out.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == [f"whale rollouts {n}/100" for n in (0, 10, 20)]
    assert lines[-1].endswith("; weight phase (cycle 0), 2 done; no test score yet")


def test_an_evaluation_logs_a_line_at_each_tenth_of_its_rollouts():
    out = io.StringIO()
    with _progress(40, 12, Console(file=out)) as advance:  # a read continued after 12 of 40
        for _ in range(28):
            advance()
    shown = [line.split(" (")[0] for line in out.getvalue().splitlines()]
    assert shown == [f"rollouts {n}/40" for n in (16, 20, 24, 28, 32, 36, 40)]
