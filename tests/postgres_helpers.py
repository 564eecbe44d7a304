"""A throwaway PostgreSQL server for the study-storage tests: its own cluster in a temp dir, 127.0.0.1 only.

initdb and postgres refuse to run as root, so as root they run as the `postgres`
system user (Debian's package creates it) on a folder handed to that user; any
other user runs them directly. Authentication is `trust`: only local processes
can reach the port, and the cluster is deleted at the end.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from whale_dspy.backends.process import LOOPBACK, free_port

HOST = LOOPBACK
SUPERUSER = "postgres"
SERVER_USER = "postgres"
"""The system user the server runs as when the tests run as root."""
TOOLS = ("initdb", "pg_ctl", "createdb")
SETTINGS = {
    "listen_addresses": f"'{HOST}'",
    "unix_socket_directories": "''",
    # A cluster that lives for one test session needs no crash safety.
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}


def find_bindir() -> Path | None:
    """The folder holding initdb and pg_ctl: pg_config's answer, Debian's newest version, or PATH."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        answer = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
        if answer.returncode == 0:
            candidates.append(Path(answer.stdout.strip()))
    debian = glob.glob("/usr/lib/postgresql/*/bin")
    candidates += sorted(map(Path, debian), key=lambda p: _version(p.parent.name), reverse=True)
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).resolve().parent)
    return next((c for c in candidates if all((c / tool).is_file() for tool in TOOLS)), None)


def _version(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in name.split(".") if part.isdigit())


@dataclass
class PostgresServer:
    """A running server; each `new_database()` is an empty database for one test."""

    bindir: Path
    port: int
    _numbers: Iterator[int] = field(default_factory=itertools.count, init=False, repr=False)

    def new_database(self) -> str:
        """Create an empty database and return its SQLAlchemy URL."""
        name = f"whale_test_{next(self._numbers)}"
        command = [str(self.bindir / "createdb"), "-h", HOST, "-p", str(self.port), "-U", SUPERUSER, name]
        _check(command, "createdb")
        return f"postgresql://{SUPERUSER}@{HOST}:{self.port}/{name}"


@contextlib.contextmanager
def running_server(bindir: Path) -> Iterator[PostgresServer]:
    """initdb, start on a free port, yield, then stop (`-m immediate`) and delete, whatever happened."""
    root = Path(tempfile.mkdtemp(prefix="whale-postgres-"))
    data, log = root / "data", root / "server.log"
    try:
        as_server = _as_server_user(root)
        pg_ctl = [*as_server, str(bindir / "pg_ctl"), "-D", str(data)]
        initdb = [str(bindir / "initdb"), "-D", str(data), "-U", SUPERUSER, "--auth=trust", "--no-sync"]
        _check([*as_server, *initdb, "-E", "UTF8", "--no-locale"], "initdb", cwd=root)
        port = free_port()
        with open(data / "postgresql.conf", "a") as conf:
            conf.writelines(f"{key} = {value}\n" for key, value in {**SETTINGS, "port": port}.items())
        try:
            _check([*pg_ctl, "-l", str(log), "-w", "-t", "60", "start"], "pg_ctl start", cwd=root, log=log)
            yield PostgresServer(bindir, port)
        finally:
            subprocess.run([*pg_ctl, "-m", "immediate", "stop"], cwd=root, capture_output=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _as_server_user(root: Path) -> list[str]:
    """The command prefix that runs the server's tools as a non-root user (and hands `root` to it)."""
    if os.geteuid() != 0:
        return []
    try:
        user = pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise RuntimeError(
            f"running as root, and PostgreSQL refuses root: no {SERVER_USER!r} system user to run it as "
            "(Debian's postgresql package creates one: bash scripts/setup.sh --dev)"
        ) from None
    os.chown(root, user.pw_uid, user.pw_gid)
    return ["runuser", "-u", SERVER_USER, "--"]


def _check(command: list[str], what: str, *, cwd: Path | None = None, log: Path | None = None) -> None:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        server_log = log.read_text() if log is not None and log.exists() else ""
        raise RuntimeError(f"{what} failed ({done.returncode}): {done.stdout}{done.stderr}{server_log}")
