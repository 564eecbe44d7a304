"""No process the library starts outlives the script that started it, however that script ends."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from whale_dspy.backends.process import ensure_port_free, group_members
from whale_dspy.lifeline import Lifeline, run_in_group

HOLDER = Path(__file__).parents[1] / "process_holder.py"
GONE_WITHIN_S = 30.0


def hold(kind: str, folder: Path, *extra: str) -> tuple[subprocess.Popen, dict]:
    """Start a script holding `kind`; return it and what it announced once its processes were up."""
    roots = os.pathsep.join([str(Path(__file__).parents[2]), str(HOLDER.parent)])
    env = {**os.environ, "PYTHONPATH": roots}
    script = subprocess.Popen(
        [sys.executable, str(HOLDER), kind, str(folder), *extra], stdout=subprocess.PIPE, text=True, env=env
    )
    line = script.stdout.readline()
    assert line, f"the holder ended before its processes were up (exit {script.wait()})"
    return script, json.loads(line)


def assert_group_goes(pgid: int) -> None:
    deadline = time.monotonic() + GONE_WITHIN_S
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = group_members(pgid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)  # a failing test leaves nothing running either
    assert left == [], f"left behind: {left}"


def kill_and_check(script: subprocess.Popen, announced: dict, sig: signal.Signals) -> None:
    members = group_members(announced["pgid"])
    assert len(members) == 2, members  # the leader and the child it started (vLLM's engine core)
    script.send_signal(sig)
    script.wait()
    assert_group_goes(announced["pgid"])
    if announced["port"] is not None:
        ensure_port_free(announced["port"])  # no BackendError: nobody listens there any more


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
@pytest.mark.parametrize("kind", ["fake", "agent", "worker"])
def test_a_killed_script_leaves_none_of_its_processes_or_ports_behind(tmp_path, kind, sig):
    script, announced = hold(kind, tmp_path)
    kill_and_check(script, announced, sig)


def test_a_released_lifeline_leaves_the_group_alone_and_a_dropped_one_stops_it():
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    lifeline = Lifeline(sleeper.pid, grace_s=1)
    lifeline.release()
    lifeline.release()  # idempotent
    assert group_members(sleeper.pid) == [sleeper.pid]
    os.killpg(sleeper.pid, signal.SIGKILL)
    sleeper.wait()


def test_run_in_group_ends_what_its_command_left_running(tmp_path):
    pgid_file = tmp_path / "pgid"
    code = run_in_group(["sh", "-c", f"sleep 60 & echo $$ > {pgid_file}; exit 3"], timeout_s=30, grace_s=1)
    assert code == 3 and group_members(int(pgid_file.read_text())) == []
    with pytest.raises(subprocess.TimeoutExpired):
        run_in_group(["sleep", "60"], timeout_s=0.2, grace_s=1)


@pytest.mark.integration
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_killed_script_leaves_no_real_vllm_server_behind(tmp_path, smollm2_dir, sig):
    script, announced = hold("real", tmp_path, smollm2_dir)
    members = group_members(announced["pgid"])
    assert len(members) >= 2, members  # the API server and its engine core
    script.send_signal(sig)
    script.wait()
    assert_group_goes(announced["pgid"])
    ensure_port_free(announced["port"])
