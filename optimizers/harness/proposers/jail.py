"""The jail an external coding agent runs in: bubblewrap, showing it its archive copy and little else.

A command proposer reads candidates' traces and writes new harness code; it
must not read what the search must not see (the bundled test split under
`domains/data/`, the run folder, other runs) nor the parent's secrets. Inside
the jail it sees: the system's programs and libraries (`/usr`, read-only), its
working folder (the archive copy, writable), an empty writable `/tmp` and
HOME, and only the extra paths and environment variables it is given (its own
binary and configuration, its API key). It has no network unless allowed
(then also the resolver and CA files it needs), and it dies with the parent.
The same idea as GEPA's meta-harness engine, which runs its proposer in a
bubblewrap sandbox.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from whale_dspy.errors import ConfigError

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64")
"""Programs and libraries the agent's tools need; on merged-/usr systems most are symlinks."""
NETWORK_FILES = (
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/ssl",
    "/etc/ca-certificates",
)
"""What name resolution and TLS read, bound only when the network is allowed."""
PATH = "/usr/local/bin:/usr/bin:/bin"
HOME = "/tmp/home"


@dataclass(frozen=True)
class Jail:
    """read_only: extra paths the agent needs, bound read-only at the same place (its binary, its
    configuration); env: names of parent environment variables it gets (its API key), nothing else
    passes; network: share the host's network (for an agent that calls a remote API)."""

    read_only: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    network: bool = False

    def launch(self, workdir: Path, command: str, environ: Mapping[str, str] | None = None) -> Launch:
        """`bwrap ... -- /bin/sh -c COMMAND` with `workdir` bound writable at its own path, and the
        environment to start bwrap itself in: bwrap's own process stays visible in the jail's /proc,
        so it must not carry this process's environment either."""
        environ = os.environ if environ is None else environ
        passed = {name: environ[name] for name in self.env if name in environ}
        args = [bubblewrap(), "--die-with-parent", "--new-session", "--unshare-all", "--cap-drop", "ALL"]
        if self.network:
            args.append("--share-net")
        args += _system_binds()
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", HOME]
        extra = [*self.read_only, *(NETWORK_FILES if self.network else ())]
        for path in extra:
            if os.path.exists(path):
                args += ["--ro-bind", path, path]
        args += ["--bind", str(workdir), str(workdir), "--chdir", str(workdir)]
        args += ["--clearenv", "--setenv", "PATH", PATH, "--setenv", "HOME", HOME]
        for name, value in passed.items():
            args += ["--setenv", name, value]
        return Launch([*args, "--", "/bin/sh", "-c", command], {"PATH": PATH, **passed})


@dataclass(frozen=True)
class Launch:
    """What to start: the argv, and the whole environment to start it in."""

    argv: list[str]
    env: dict[str, str]


def _system_binds() -> list[str]:
    """Read-only binds of the system folders, and their symlinks where /usr is merged."""
    args: list[str] = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def bubblewrap() -> str:
    """The bwrap binary, or ConfigError saying how to get it (or how to opt out)."""
    found = shutil.which("bwrap")
    if found is None:
        raise ConfigError(
            "the command proposer runs its agent under bubblewrap, which is not installed: "
            "apt-get install bubblewrap (or pass jail=None to CommandProposer to run it unjailed)"
        )
    return found


DEFAULT_JAIL = Jail()
"""No extra paths, no environment, no network: enough for a command that only edits files."""
