"""OS-enforced containment the child applies to itself before it imports anything heavy.

The child (trusted code; no candidate code exists in the process yet) calls
`confine` first: a private network namespace (no interfaces), resource limits
and no-new-privileges. Once it has imported what it needs it calls
`become_unprivileged` (an unprivileged uid with no groups, a parent-death
signal) and, once its worker threads run, `forbid_new_tasks`. Everything
here holds even if the candidate escapes the Python-level guard; what could not
be applied (not root, no user namespaces) is reported back to the parent.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
from typing import Any

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
MiB = 1 << 20

_libc = ctypes.CDLL(None, use_errno=True)


def _libc_call(name: str, *args: int) -> None:
    if getattr(_libc, name)(*args) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{name}: {os.strerror(errno)}")


def isolate_network() -> str:
    """Move into a new, empty network namespace (as root), else into a user+network namespace."""
    flags = CLONE_NEWNET if os.geteuid() == 0 else CLONE_NEWUSER | CLONE_NEWNET
    try:
        _libc_call("unshare", flags)
    except OSError as error:
        return f"network: NOT isolated ({error}); only the Python-level socket guard applies"
    return "network: private namespace without interfaces"


def set_limits(config: dict[str, Any]) -> str:
    """RLIMIT_AS, CPU, FSIZE (the output cap), NOFILE and CORE; threads/processes are capped later."""
    cpu = int(config["cpu_seconds"])
    limits = {
        resource.RLIMIT_AS: int(config["memory_mb"]) * MiB,
        resource.RLIMIT_CPU: cpu,
        resource.RLIMIT_FSIZE: int(config["output_mb"]) * MiB,
        resource.RLIMIT_NOFILE: int(config["open_files"]),
        resource.RLIMIT_CORE: 0,
    }
    for which, value in limits.items():
        hard = value + 1 if which == resource.RLIMIT_CPU else value  # SIGXCPU first, SIGKILL a second later
        resource.setrlimit(which, (value, hard))
    return f"limits: memory {config['memory_mb']} MB, cpu {cpu} s, output {config['output_mb']} MB"


def drop_privileges(uid: int) -> str:
    """Become `uid` (its own group, no supplementary groups); root-owned files become read-only."""
    if os.geteuid() != 0:
        return f"user: NOT changed (not root; runs as uid {os.geteuid()})"
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    return f"user: uid {uid} without groups"


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when the parent dies (set after setuid, which clears it)."""
    _libc_call("prctl", PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)


def confine(config: dict[str, Any]) -> list[str]:
    """Network, resource limits and no-new-privileges; return one line per measure saying what took effect."""
    os.umask(0o077)
    notes = [isolate_network()] if config["isolate_network"] else ["network: isolation disabled"]
    notes.append(set_limits(config))
    _libc_call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    return notes


def become_unprivileged(config: dict[str, Any]) -> str:
    """Drop root (once every module is imported: the interpreter may live in root's home) and die
    with the parent."""
    note = drop_privileges(int(config["uid"])) if config["drop_privileges"] else "user: unchanged (disabled)"
    die_with_parent(int(config["parent_pid"]))
    return note


def forbid_new_tasks() -> str:
    """RLIMIT_NPROC = 0 once the child's worker threads exist: no fork, no new thread.

    Linux does not enforce it for root, so it only binds after `drop_privileges`.
    """
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    return "processes: no fork, no new threads" if os.geteuid() else "processes: NOT limited (root)"
