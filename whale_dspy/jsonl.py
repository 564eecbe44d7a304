"""Crash-safe files: append-only JSONL that is flushed per record, and atomic JSON writes.

A run killed at any moment (kill -9) leaves at most one torn last line, which
`read_jsonl` drops, so nothing that was fully recorded is lost.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

log = logging.getLogger(__name__)
_append_lock = threading.Lock()
_UMASK = os.umask(0)
os.umask(_UMASK)


def to_jsonable(value: Any) -> Any:
    """Round-trip through json with `str` as the fallback, so any prediction field can be recorded."""
    return json.loads(json.dumps(value, default=str))


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one record as one line and push it to disk before returning."""
    line = json.dumps(record, default=str) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    with _append_lock, open(path, "a", encoding="utf-8") as handle:
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Yield every complete record; a torn final line (a crash mid-write) is skipped with a warning."""
    if not path.exists():
        return
    with open(path, encoding="utf-8") as handle:
        lines = handle.readlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):
                log.warning("%s: dropping a torn last line (an interrupted write)", path)
                continue
            raise


def repair_jsonl(path: Path) -> None:
    """Drop a torn last line (kill -9 mid-write), so the next append does not follow garbage."""
    if not path.exists():
        return
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    if not lines:
        return
    try:
        json.loads(lines[-1])
        complete = lines[-1].endswith("\n")
    except json.JSONDecodeError:
        complete = False
    if not complete:
        log.warning("%s: dropping a torn last line left by an interrupted write", path)
        atomic_write_text(path, "".join(lines[:-1]))


def atomic_write(path: Path, write: Callable[[BinaryIO], object], *, mode: int = 0o666 & ~_UMASK) -> None:
    """`write` into a temporary file beside `path`, then rename, so readers see the old or the new
    file, never half; a failure leaves the old file and no temporary one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.fchmod(fd, mode)  # mkstemp's 0600 would hide the records from other users
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """`text` written whole or not at all (`atomic_write`), its folder made first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda handle: handle.write(text.encode("utf-8")))


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, default=str) + "\n")
