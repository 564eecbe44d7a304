"""Ctrl-C and SIGTERM stop a command promptly: an evaluation unwinds without waiting for its
rollouts in flight, and a second signal kills the process groups we started and exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import weakref

import dspy
import pytest

from whale_cli import main as cli_main
from whale_dspy.backends import process
from whale_dspy.backends.process import ManagedProcess, group_members, kill_all_now
from whale_dspy.evaluation import EvalRequest, evaluate
from whale_dspy.harness import HarnessProgram, HarnessSource
from whale_dspy.testing.scripted_lm import ScriptedLM

WAITING_HARNESS = """
import dspy


class Waits(dspy.Module):
    def __init__(self, signature, hold):
        super().__init__()
        self.predict = dspy.Predict(signature)
        self.hold = hold

    def forward(self, question):
        self.hold(question)
        return self.predict(question=question)


def build(signature, tools):
    return Waits(signature, tools["hold"])
"""


def test_an_interrupted_evaluation_does_not_wait_for_its_rollouts_in_flight() -> None:
    released, finished = threading.Event(), threading.Event()

    def hold(question: str) -> None:  # the "slow" task's rollout blocks until the test ends
        if question == "slow":
            released.wait(timeout=10)
            finished.set()

    program = HarnessProgram(
        HarnessSource("waits", WAITING_HARNESS).vouched(),
        dspy.Signature("question -> answer"),
        tools_factory=lambda example: {"hold": hold},
    )
    tasks = [
        dspy.Example(task_id=q, question=q, answer="a").with_inputs("question") for q in ("slow", "fast")
    ]

    def interrupt(rollout) -> None:
        raise KeyboardInterrupt  # what the first Ctrl-C does in the main thread

    try:
        with pytest.raises(KeyboardInterrupt):
            evaluate(
                program,
                EvalRequest(
                    tasks,
                    metric=lambda e, p, trace=None: 1.0,
                    lm=ScriptedLM({"": "[[ ## answer ## ]]\na"}),
                    k=1,
                    on_rollout=interrupt,
                ),
                threads=2,
            )
        assert not finished.is_set()  # it returned while the slow rollout still ran
    finally:
        released.set()


INTERRUPTED_COMMAND = """
import argparse, sys, threading
from concurrent.futures import ThreadPoolExecutor
from whale_cli import main as cli

def run(args):
    print("said before the stop")  # buffered: stdout is a pipe
    pool = ThreadPoolExecutor(max_workers=1)
    started = threading.Event()
    pool.submit(lambda: (started.set(), threading.Event().wait(120)))  # a request a server never answers
    started.wait()
    pool.shutdown(wait=False, cancel_futures=True)  # what an interrupted evaluation does
    raise KeyboardInterrupt  # what the first signal does

class Parser:
    def parse_args(self, argv):
        return argparse.Namespace(func=run, verbose=False)

cli.build_parser = Parser
sys.exit(cli.main([]))
"""


def test_an_interrupted_command_exits_without_joining_its_rollouts_in_flight() -> None:
    started = time.monotonic()
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    command = [sys.executable, "-c", INTERRUPTED_COMMAND]
    done = subprocess.run(command, timeout=90, capture_output=True, env=env)
    assert done.returncode == 130, done.stderr.decode()[-2000:]
    assert done.stdout.decode() == "said before the stop\n"  # flushed, though exit skips the usual flush
    assert time.monotonic() - started < 60  # the thread would hold a normal exit for 120 s


@pytest.fixture(autouse=True)
def own_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """kill_all_now kills every group this process started: keep the session's vLLM servers out."""
    monkeypatch.setattr(process, "_started", weakref.WeakSet())


def test_the_first_signal_unwinds_and_the_second_kills_what_we_started(tmp_path, monkeypatch) -> None:
    sleeper = ManagedProcess([sys.executable, "-c", "import time; time.sleep(60)"], log_path=tmp_path / "log")
    sleeper.start()
    exits = []
    monkeypatch.setattr(cli_main.os, "_exit", exits.append)
    stop = cli_main.StopOnSignals()
    with pytest.raises(KeyboardInterrupt):
        stop(signal.SIGTERM, None)
    assert group_members(sleeper.pid)  # the first signal leaves stopping to the unwinding code
    stop(signal.SIGINT, None)
    assert exits == [130]
    sleeper._proc.wait(timeout=10)
    assert sleeper.exit_code() == -signal.SIGKILL
    sleeper.stop()


def test_kill_all_now_spares_what_was_already_stopped(tmp_path) -> None:
    stopped = ManagedProcess([sys.executable, "-c", "import time; time.sleep(60)"], log_path=tmp_path / "a")
    stopped.start()
    stopped.stop()
    kill_all_now()  # nothing left to kill, and no error for the reaped group
    assert stopped.exit_code() == -signal.SIGTERM
