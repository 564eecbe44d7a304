"""No process we start outlives us: a watchdog per process group, tied to this process by a pipe.

A context manager's exit, a finalizer or an atexit hook never runs when this
process is killed (SIGKILL, or a SIGTERM with the default action), and
`PR_SET_PDEATHSIG` in a child reaches only that child, not the processes it
starts (vLLM's engine core is the server's child). So each process group we
start (a server, the trainer, the agent) gets a watchdog: this file run as a
script, in a session of its own, blocked reading a pipe whose only write end
this process holds. When this process dies, however it dies, the kernel closes
that end; the watchdog reads end-of-file and stops the whole group, SIGTERM
first (a server shuts down cleanly) and SIGKILL after a grace period. An owner
that stops its group itself releases the watchdog first (one byte: exit
quietly). No signal handler of the user's is touched.

Standard library only: the watchdog runs as `python -I -S lifeline.py PGID GRACE`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

POLL_S = 0.05


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group, read from /proc (Linux, like vLLM)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # exited while we looked
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(stat.parent.name))
    return members


def kill_group(pgid: int, grace_s: float) -> None:
    """SIGTERM the group, then SIGKILL whatever is left of it after grace_s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace_s
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(POLL_S)


class Lifeline:
    """A watchdog that stops process group `pgid` as soon as this process dies."""

    def __init__(self, pgid: int, grace_s: float) -> None:
        read_end, self._write_end = os.pipe()  # not inheritable: no other child holds this end open
        try:
            self._watchdog = subprocess.Popen(
                [sys.executable, "-I", "-S", __file__, str(pgid), str(grace_s)],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # out of reach of the terminal's Ctrl-C, like the group it guards
            )
        finally:
            os.close(read_end)

    def release(self) -> None:
        """The owner stopped the group itself: the watchdog exits without touching it. Idempotent."""
        if self._write_end < 0:
            return
        with contextlib.suppress(BrokenPipeError):
            os.write(self._write_end, b"x")
        os.close(self._write_end)
        self._write_end = -1
        self._watchdog.wait()


def run_in_group(argv: Sequence[str], *, timeout_s: float | None, grace_s: float, **popen: Any) -> int:
    """`subprocess.run(argv).returncode` with the command in a process group of its own, on a
    lifeline: the whole group is killed when the command ends (what it left running too), on a
    timeout (`subprocess.TimeoutExpired`), on an exception such as Ctrl-C, and when this process dies."""
    proc = subprocess.Popen(argv, start_new_session=True, **popen)
    lifeline = Lifeline(proc.pid, grace_s)
    try:
        return proc.wait(timeout=timeout_s)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        lifeline.release()


def _watch(pgid: int, grace_s: float) -> None:
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    if not os.read(0, 1):  # end of file: the owner died without releasing us
        kill_group(pgid, grace_s)


if __name__ == "__main__":
    _watch(int(sys.argv[1]), float(sys.argv[2]))
