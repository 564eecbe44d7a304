"""A server subprocess in its own process group: started, logged to a file, stopped as a whole.

vLLM forks engine workers; stopping only the parent leaves them holding GBs of
memory and the CPU. Killing the whole group, also when the interpreter exits
(a finalizer, not a caller's discipline), leaves no orphan; when this process
is killed and no finalizer runs, the group's lifeline (`whale_dspy.lifeline`)
stops it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path

from whale_dspy.errors import BackendError
from whale_dspy.lifeline import Lifeline, group_members

logger = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"


PORT_PICKS = 100
"""How many kernel picks free_port tries before it gives up on finding one not handed out before."""

_handed_out: set[int] = set()
_handed_out_lock = threading.Lock()


def free_port() -> int:
    """A loopback port nobody listens on now (the kernel picks it) and that this process has not
    handed out before. The kernel can pick a just-closed port again (twice in a row in 4 of 20,000
    pairs measured): two replicas started together were given one port, and the second found it
    taken. Processes can still collide; `ensure_port_free` then says so before launch, and a server
    that picked the port picks again (`VLLMServer.start`)."""
    with _handed_out_lock:
        for _ in range(PORT_PICKS):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((LOOPBACK, 0))
                port = sock.getsockname()[1]
            if port not in _handed_out:
                _handed_out.add(port)
                return port
    raise BackendError(f"no loopback port that this process has not used yet in {PORT_PICKS} picks")


class PortTaken(BackendError):
    """Another process holds the port a server was to bind."""


PORT_TAKEN_MARK = "Address already in use"
"""What a server's log says when its bind found the port taken (errno 98's text, as Python and
uvicorn print it)."""


def ensure_port_free(port: int) -> None:
    """PortTaken before launching when another process already listens on the port.

    SO_REUSEADDR, as the server itself binds: connections a stopped server left in TIME_WAIT
    do not hold the port (without it, a restart on the same port failed for a minute)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError as error:
            raise PortTaken(
                f"port {port} on {LOOPBACK} is taken ({error.strerror}); pass another port or none "
                "to pick a free one"
            ) from None


def _wait_group(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Wait until the leader is reaped and no member of its group is left."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None and not group_members(proc.pid):
            return True
        time.sleep(0.1)
    return False


def _stop_group(proc: subprocess.Popen[bytes], lifeline: Lifeline, grace_s: float) -> None:
    """SIGTERM the whole group (pgid == leader pid), then SIGKILL whatever outlives grace_s; then
    the group's watchdog is released."""
    try:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            if _wait_group(proc, grace_s):
                break
            logger.warning("process group %d outlived %s for %.0f s", proc.pid, sig.name, grace_s)
        proc.poll()
    finally:
        lifeline.release()


_started: weakref.WeakSet[ManagedProcess] = weakref.WeakSet()


def kill_all_now() -> None:
    """SIGKILL the group of every process started here and not stopped yet (a second Ctrl-C: no
    grace period, but no server left behind either)."""
    for process in list(_started):
        if process._proc is not None and process._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process._proc.pid, signal.SIGKILL)


class ManagedProcess:
    """One command in its own session, stdout+stderr appended to log_path."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        grace_s: float = 15.0,
    ) -> None:
        self.argv = tuple(argv)
        self.log_path = Path(log_path)
        self.env = dict(env) if env is not None else None
        self.grace_s = grace_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize | None = None
        self._log_start = 0  # where this process's lines begin in a log earlier processes wrote to

    def start(self) -> None:
        if self._proc is not None:
            raise BackendError(f"process already started (pid {self._proc.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._log_start = log.tell()
            self._proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        lifeline = Lifeline(self._proc.pid, self.grace_s)  # for a death no finalizer sees
        # Runs on stop(), on garbage collection and at interpreter exit, whichever comes first.
        self._finalizer = weakref.finalize(self, _stop_group, self._proc, lifeline, self.grace_s)
        _started.add(self)
        logger.info("started pid %d: %s (log %s)", self._proc.pid, " ".join(self.argv), self.log_path)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def exit_code(self) -> int | None:
        """None while running (or never started), else the exit status."""
        return self._proc.poll() if self._proc else None

    def stop(self) -> None:
        if self._finalizer is not None:
            try:
                self._finalizer()
            except BaseException:  # a Ctrl-C cut the grace period short: no second chance at exit
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._proc.pid, signal.SIGKILL)
                raise
            finally:
                _started.discard(self)
            logger.info("stopped pid %s", self.pid)

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the log, for error messages."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log written)"
        return "\n".join(text.splitlines()[-lines:])

    def logged(self, limit_bytes: int = 1 << 20) -> str:
        """What this process wrote to its log (its first `limit_bytes`), without earlier processes' lines."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_start)
                return log.read(limit_bytes).decode(errors="replace")
        except FileNotFoundError:
            return ""
