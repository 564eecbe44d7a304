"""The run directory, the unit of record: config, event log, traces, archives, adapters.

Events are appended as JSONL and flushed one by one, so a crash loses nothing
that was recorded. Reopening a run with a different configuration is refused
with the differences listed.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from whale_dspy.errors import ConfigError
from whale_dspy.jsonl import append_jsonl, atomic_write_json, read_jsonl
from whale_dspy.records import AdapterRef

CONFIG_FILE = "config.json"
EVENTS_FILE = "events.jsonl"
WRITER_LOCK = "writer.lock"


def as_recorded(config: dict[str, Any]) -> dict[str, Any]:
    """A configuration as its JSON file holds it (tuples become lists, other values strings)."""
    return json.loads(json.dumps(config, default=str))


def config_differences(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """Human-readable differences between two nested configurations."""
    differences = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            differences += config_differences(a, b, f"{prefix}{key}.")
        elif a != b:
            differences.append(f"{prefix}{key}: {a!r} -> {b!r}")
    return differences


@dataclass(frozen=True)
class RunDir:
    path: Path

    @classmethod
    def open(cls, path: str | Path, config: dict[str, Any]) -> RunDir:
        """Create a run directory, or reopen one whose recorded configuration is the same."""
        run = cls(Path(path))
        recorded = run.config()
        normalized = as_recorded(config)
        if recorded is None:
            run.path.mkdir(parents=True, exist_ok=True)
            atomic_write_json(run.path / CONFIG_FILE, normalized)
        elif recorded != normalized:
            differences = "; ".join(config_differences(recorded, normalized))
            raise ConfigError(f"run {run.path} was started with another configuration: {differences}")
        return run

    def config(self) -> dict[str, Any] | None:
        path = self.path / CONFIG_FILE
        return json.loads(path.read_text()) if path.exists() else None

    def subdir(self, *parts: str) -> Path:
        path = self.path.joinpath(*parts)
        path.mkdir(parents=True, exist_ok=True)
        return path

    @property
    def events_path(self) -> Path:
        return self.path / EVENTS_FILE

    def log_event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"kind": kind, "time": time.time(), **fields}
        append_jsonl(self.events_path, event)
        return event

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [e for e in read_jsonl(self.events_path) if kind is None or e.get("kind") == kind]

    def adapter_here(self, ref: AdapterRef, base: str | None) -> AdapterRef:
        """`ref` as it stands on this machine. A run folder restored elsewhere (a record archive
        unpacked on another machine) holds the adapter at the tail of its recorded absolute path,
        and the model cache may lie elsewhere (`base`: what this run serves now; its recorded
        settings already named the same model). A ref whose files are not found here is returned
        as recorded: a shared server may still hold it, and loading it says so if none does."""
        path = ref.path
        if not Path(path).resolve().is_relative_to(self.path.resolve()):  # another run's folder may hold it
            parts = Path(path).parts
            tails = (self.path.joinpath(*parts[i:]) for i in range(1, len(parts)))
            found = next((tail for tail in tails if (tail / "adapter_config.json").is_file()), None)
            path = str(found.resolve()) if found else path
        old_base = Path(ref.base)
        moved_base = (  # the same model folder in another cache, never another model
            base and old_base.is_absolute() and not old_base.exists() and old_base.name == Path(base).name
        )
        return replace(ref, path=path, base=base if moved_base else ref.base)


@contextlib.contextmanager
def sole_writer(path: str | Path) -> Iterator[None]:
    """Hold a run directory for one process: a second writer would interleave its events.

    Refused at once rather than waited for, since the other process may run for hours
    (running the same command twice by mistake is the usual cause). The OS drops the
    lock when its holder dies, so a crashed run never blocks its resume.
    """
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    lock = FileLock(folder / WRITER_LOCK)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise ConfigError(
            f"run {folder} is being written by another process; wait for it or stop it"
        ) from None
    try:
        yield
    finally:
        lock.release()
