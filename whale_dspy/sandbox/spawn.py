"""Starting the child process and reading why it ended.

The child gets a fresh empty working directory it cannot write to, an
environment with no secrets, one end of a socket pair for the protocol, and a
capture file for its stdout and stderr whose size RLIMIT_FSIZE caps.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import whale_dspy
from whale_dspy.sandbox.limits import (
    SandboxCrash,
    SandboxLimits,
    SandboxMemoryError,
    SandboxTimeout,
    child_environment,
)
from whale_dspy.sandbox.wire import Channel
from whale_dspy.untrusted_files import UntrustedFileError, read_untrusted

SANDBOX_UID_BASE = 200_000
"""Children run as a random uid in [BASE, BASE + 100000): no files, no processes of their own."""
LOG_TAIL_BYTES = 2000


@dataclass(frozen=True)
class Child:
    """A started child: its process (leader of its own process group), channel and files."""

    proc: subprocess.Popen
    channel: Channel
    log_path: Path
    dirs: tuple[str, ...]


def import_roots() -> list[str]:
    """Directories the child needs on sys.path to import whale_dspy and harness_programs."""
    roots = [str(Path(whale_dspy.__file__).resolve().parents[1])]
    spec = importlib.util.find_spec("harness_programs")
    if spec is not None and spec.origin:
        roots.append(str(Path(spec.origin).resolve().parents[1]))
    return list(dict.fromkeys(roots))


def spawn_child(limits: SandboxLimits) -> Child:
    """Start `python -m whale_dspy.sandbox.child` in a new session; it confines itself first thing."""
    workdir = tempfile.mkdtemp(prefix="whale-sandbox-work-")
    logdir = tempfile.mkdtemp(prefix="whale-sandbox-log-")
    os.chmod(workdir, 0o555)  # the child's cwd and HOME: empty and not writable by it
    log_path = Path(logdir, "output.log")
    parent_end, child_end = socket.socketpair()
    config = {
        "fd": child_end.fileno(),
        "uid": SANDBOX_UID_BASE + random.randrange(100_000),
        "parent_pid": os.getpid(),
        "cpu_seconds": limits.cpu_seconds,
        "memory_mb": limits.memory_mb,
        "output_mb": limits.output_mb,
        "open_files": limits.open_files,
        "isolate_network": limits.isolate_network,
        "drop_privileges": limits.drop_privileges,
    }
    env = child_environment(workdir) | {"PYTHONPATH": os.pathsep.join(import_roots())}
    try:
        with open(log_path, "wb") as output:
            proc = subprocess.Popen(
                [sys.executable, "-m", "whale_dspy.sandbox.child", json.dumps(config)],
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                pass_fds=(child_end.fileno(),),
                start_new_session=True,
            )
    finally:
        child_end.close()
    return Child(proc, Channel(parent_end), log_path, (workdir, logdir))


def log_tail(path: Path) -> str:
    """The end of the child's captured output (for crash reports), read as an untrusted file."""
    try:
        tail = read_untrusted(path.parent, path.name, max_bytes=LOG_TAIL_BYTES, tail=True)
    except UntrustedFileError as error:
        return f"(its output was refused: {error})"
    except OSError:
        return ""
    return tail.decode(errors="replace").strip()


def exit_failure(code: int, tail: str, limits: SandboxLimits) -> Exception:
    """Why the child went away, from its exit status and the tail of its output."""
    if code == -signal.SIGXCPU:
        return SandboxTimeout(f"the child used its {limits.cpu_seconds} s of CPU time")
    if "MemoryError" in tail or "Cannot allocate memory" in tail:
        return SandboxMemoryError(f"the child ran out of its {limits.memory_mb} MB: {tail[-300:]}")
    how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
    return SandboxCrash(f"the child died ({how}): {tail[-300:]}")
