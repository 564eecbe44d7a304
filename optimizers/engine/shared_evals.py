"""Checkpoint evaluations shared between runs: the untouched starting program is scored once.

Every method and seed of a `whale compare`, and every trial of a `whale
study`, starts from the seed harness on the base weights, and checkpoint
evaluations draw their rollout ids from one namespace (common random numbers),
so those first evaluations are one measurement repeated. On a CPU each costs
minutes (tasks x k rollouts). A `SharedEvaluations` folder keeps the first
one's recorded fields and trace; later runs copy them instead of re-running, and
runs that reach the same evaluation at once (two seeds or study workers side by
side) wait for the one measuring it.
Only base-weight programs are shared: adapters are named per run, and a later
checkpoint of one run is never another run's program.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from whale_dspy.jsonl import atomic_write_json

FIELDS, TRACE = "evaluation.json", "trace.jsonl"
ADDRESS_KEYS = frozenset({"api_base", "api_key", "base_url"})
"""LM settings that say where the server is, not what it samples: a restarted server still matches."""


@dataclass(frozen=True)
class SharedEvaluations:
    """A folder of evaluations keyed by what determines them; `scope` names the model and domain."""

    root: Path
    scope: str

    def key(self, *, harness: str, tasks: dict[str, Any] | None, k: int, namespace: str, lm: Any) -> str:
        """Digest of everything that fixes the measurement: harness, tasks, k, rollout ids, sampling."""
        sampling = {
            name: value
            for name, value in sorted(getattr(lm, "kwargs", {}).items())
            if name not in ADDRESS_KEYS and _plain(value)
        }
        identity = [self.scope, harness, tasks, k, namespace, getattr(lm, "model", None), sampling]
        return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]

    @contextmanager
    def claim(self, key: str) -> Iterator[None]:
        """Held while looking `key` up and, on a miss, measuring it: a concurrent run then waits
        and copies the result instead of measuring the same program a second time."""
        self.root.mkdir(parents=True, exist_ok=True)
        with FileLock(self.root / f"{key}.lock"):
            yield

    def get(self, key: str, trace: Path) -> dict[str, Any] | None:
        """The recorded fields of a stored evaluation, with its trace copied to `trace`; None if absent."""
        folder = self.root / key
        try:
            fields = json.loads((folder / FIELDS).read_text())
            shutil.copyfile(folder / TRACE, trace)
        except (OSError, ValueError):
            return None  # absent, or half-written by a worker that died: measure it again
        return fields

    def put(self, key: str, fields: dict[str, Any], trace: Path) -> None:
        """Store an evaluation; the fields file is written last, so a reader never sees a partial entry."""
        folder = self.root / key
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f"{TRACE}.{os.getpid()}.part"
        shutil.copyfile(trace, partial)
        partial.replace(folder / TRACE)
        atomic_write_json(folder / FIELDS, fields)


def _plain(value: Any) -> bool:
    return isinstance(value, str | int | float | bool) or value is None
