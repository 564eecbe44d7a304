"""Which search tasks a harness phase learns from and which decide: the two slices and their records.

Proposers see the feedback slice's traces and gold answers (labels.json, demos, the guided
proposer's reading of wrong answers). If the same tasks decided adoption, a candidate that
memorised what it was shown would win on them. So the selection slice is scored only: its
traces, scores and task list live in a folder beside the archive (`<archive>-selection`), which
no proposer is given, and every harness decision is made on it.

A race's scores are cached per contender and chunk of tasks (traces and a small JSON with the
scores and what they cost), so a run that crashed mid-race resumes it without running any finished
chunk twice and reaches the same decision. A chunk a crash cut short is measured again whole; the
rollouts its cut attempt had already spent stay on disk as that attempt's trace and are charged
too, once: no rollout is free and none is counted twice.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dspy
import numpy as np

from whale_dspy.errors import ConfigError
from whale_dspy.jsonl import atomic_write_json, read_jsonl
from whale_dspy.records import Rollout
from whale_dspy.rollouts import task_id_of

SLICES_FILE, DECISIONS_FILE = "slices.json", "decisions.jsonl"


@dataclass(frozen=True)
class Slices:
    """A phase's search tasks split: what proposers may see, and what decides."""

    feedback: list[dspy.Example]
    selection: list[dspy.Example]
    """In race order: a race's rounds are growing prefixes of it."""

    def record(self, folder: Path) -> None:
        atomic_write_json(
            folder / SLICES_FILE,
            {"feedback": [task_id_of(t) for t in self.feedback], "selection": self.ids()},
        )

    def ids(self) -> list[str]:
        return [task_id_of(t) for t in self.selection]

    def as_recorded(self, folder: Path, searchset: Sequence[dspy.Example]) -> Slices:
        """The split an archive was started with, where it recorded one (a resumed phase keeps its
        slices even where today's rule would split its search set otherwise)."""
        path = folder / SLICES_FILE
        if not path.exists():
            return self
        recorded = json.loads(path.read_text())
        by_id = {task_id_of(t): t for t in searchset}
        missing = [t for t in (*recorded["feedback"], *recorded["selection"]) if t not in by_id]
        if missing:
            raise ConfigError(
                f"{path} names {len(missing)} task(s) the search set lacks (e.g. {missing[0]!r}): "
                "use a new archive directory for another search set"
            )
        return Slices([by_id[t] for t in recorded["feedback"]], [by_id[t] for t in recorded["selection"]])


def split_search_tasks(
    searchset: Sequence[dspy.Example], *, feedback: int, selection: int, seed: int, least: int = 1
) -> Slices:
    """`feedback` tasks (the same draw the phase always made) and up to `selection` others.

    A search set smaller than both slices is shared between them in their proportion (the
    feedback slice keeps at least `least` tasks, a candidate's smoke test): a user's small data is
    never refused, and the harness phase says what its races can decide on what is left.
    `selection` 0 means decisions are made on the feedback tasks (the paper's setting, kept to
    reproduce it); a search set no larger than `feedback` is then used whole.
    """
    tasks = list(searchset)
    ids = [task_id_of(t) for t in tasks]
    if len(set(ids)) != len(ids):
        raise ConfigError("search tasks must have distinct task ids: decisions pair scores by task")
    feedback, selection = slice_sizes(len(tasks), feedback=feedback, selection=selection, least=least)
    shuffled = len(tasks) > feedback
    order = np.random.default_rng(seed).permutation(len(tasks)) if shuffled else np.arange(len(tasks))
    shown = [tasks[i] for i in sorted(order[:feedback])]
    decide = [tasks[i] for i in order[feedback : feedback + selection]]
    return Slices(shown, decide)


def slice_sizes(tasks: int, *, feedback: int, selection: int, least: int = 1) -> tuple[int, int]:
    """The feedback and selection slices' sizes on a search set of `tasks` (split_search_tasks)."""
    if selection and tasks < feedback + selection:
        feedback = min(tasks, max(least, 1, round(tasks * feedback / (feedback + selection))))
    feedback = min(feedback, tasks)
    return feedback, min(selection, tasks - feedback)


def selection_folder(archive_path: Path) -> Path:
    """The folder beside an archive that holds its selection slice's records (never a proposer's)."""
    return archive_path.with_name(archive_path.name + "-selection")


@dataclass
class ChunkCost:
    """What the race's scoring spent, summed over the chunks it used (cached or measured)."""

    rollouts: int = 0
    lm_calls: int = 0
    completion_tokens: int = 0
    chunks: list[str] = field(default_factory=list)
    interrupted: int = 0
    """The rollouts of chunk attempts a crash cut short (included in `rollouts`)."""

    def add(self, data: Mapping[str, Any], key: str) -> None:
        self.rollouts += data["rollouts"]
        self.lm_calls += data["lm_calls"]
        self.completion_tokens += data.get("completion_tokens", 0)
        self.chunks.append(key)

    def add_interrupted(self, rollouts: Sequence[Rollout]) -> None:
        spent = chunk_record({}, rollouts)
        self.rollouts += spent["rollouts"]
        self.lm_calls += spent["lm_calls"]
        self.completion_tokens += spent["completion_tokens"]
        self.interrupted += spent["rollouts"]


Measure = Callable[[str, list[dspy.Example], Path], dict[str, Any]]
"""Evaluates one contender on some tasks, writing traces to the path; returns the chunk record:
`scores` (per task), `rollouts`, `lm_calls`, `completion_tokens`."""


class CachedScorer:
    """`racing.Score` over one race's folder: each (contender, chunk) is measured once."""

    def __init__(self, folder: Path, tasks: Sequence[dspy.Example], measure: Measure):
        self.folder = folder
        self.by_id = {task_id_of(t): t for t in tasks}
        self.measure = measure
        self.cost = ChunkCost()
        self.errors: dict[str, str] = {}
        """Contenders that broke on a chunk (scored 0 on its tasks), with why."""

    def __call__(self, name: str, task_ids: Sequence[str]) -> dict[str, float]:
        if not task_ids:
            return {}
        digest = hashlib.sha256("\x1f".join(task_ids).encode()).hexdigest()[:12]
        key = f"{name}-{len(task_ids):04d}-{digest}"
        path = self.folder / f"{key}.json"
        if path.exists():
            data = json.loads(path.read_text())
        else:
            self.folder.mkdir(parents=True, exist_ok=True)
            trace = self.folder / f"{key}.jsonl"
            self._keep_cut_attempt(key, trace)  # a chunk interrupted by a crash starts over
            data = self.measure(name, [self.by_id[t] for t in task_ids], trace)
            atomic_write_json(path, data)
        self.cost.add(data, key)
        for cut in sorted(self.folder.glob(f"{key}.cut-*.jsonl")):
            self.cost.add_interrupted([Rollout.from_dict(row) for row in read_jsonl(cut)])
        if "error" in data:
            self.errors[name] = data["error"]
        return {task: float(score) for task, score in data["scores"].items()}

    def _keep_cut_attempt(self, key: str, trace: Path) -> None:
        """Move the trace of an attempt a crash cut short out of the way, under a name of its own:
        its rollouts were spent and are charged with the chunk (a rename, so never twice)."""
        if trace.exists():
            attempt = len(list(self.folder.glob(f"{key}.cut-*.jsonl")))
            trace.rename(self.folder / f"{key}.cut-{attempt}.jsonl")


def chunk_record(per_task: Mapping[str, Sequence[float]], rollouts: Sequence[Any]) -> dict[str, Any]:
    """A chunk's record from an evaluation: per-task mean scores and what its rollouts spent."""
    return {
        "scores": {task: float(np.mean(scores)) for task, scores in per_task.items()},
        "rollouts": len(rollouts),
        "lm_calls": sum(r.turns for r in rollouts),
        "completion_tokens": sum(r.completion_tokens for r in rollouts),
    }


__all__ = [
    "DECISIONS_FILE",
    "SLICES_FILE",
    "CachedScorer",
    "ChunkCost",
    "Slices",
    "chunk_record",
    "selection_folder",
    "slice_sizes",
    "split_search_tasks",
]
