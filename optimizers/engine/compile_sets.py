"""Which tasks a WhaleOptimizer run trains, searches and tracks, from DSPy's `compile` keywords.

DSPy's shape is `compile(student, *, trainset, valset=None)`: `trainset` feeds the weight phase,
`valset` the harness search (split from `trainset` when missing, as GEPA falls back to its
trainset), and the curve over held-out tasks is an opt-in (`track=`). The older keywords
(`searchset=`, `testset=`, and `valset=` as the tracked set beside `searchset=`) keep working for
one release with a DeprecationWarning.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dspy

from whale_dspy.rollouts import task_id_of
from whale_dspy.seeding import derive_seed


@dataclass(frozen=True)
class RunSets:
    trainset: list[dspy.Example]
    searchset: list[dspy.Example]
    evalset: list[dspy.Example] | None
    eval_split: str
    """What the tracked split is called in records: its trace files and rollout-id namespace."""

    def fingerprints(self) -> dict[str, Any]:
        """A digest per split, so a resume on other data is refused."""
        return {
            "trainset": fingerprint(self.trainset),
            "searchset": fingerprint(self.searchset),
            self.eval_split + "set": fingerprint(self.evalset),
        }


def run_sets(
    trainset: Sequence[dspy.Example] | None,
    valset: Sequence[dspy.Example] | None,
    track: Sequence[dspy.Example] | None,
    track_name: str,
    *,
    searchset: Sequence[dspy.Example] | None,
    testset: Sequence[dspy.Example] | None,
    searches: bool,
) -> RunSets:
    """The run's splits; `searches`: the method has a harness phase (so a missing valset is split off)."""
    if searchset is not None or testset is not None:
        warnings.warn(
            "compile(searchset=, testset=) is deprecated and goes in the next release: pass the "
            "harness-search tasks as valset= and the held-out tasks to track as track=",
            DeprecationWarning,
            stacklevel=3,
        )
        if searchset is not None:  # the old shape: valset was the tracked set
            tracked, name = (valset, "val") if valset else (testset, "test")
            return RunSets(list(trainset or ()), list(searchset), _listed(tracked), name)
        track, track_name = track or testset, "test"
    train = list(trainset or ())
    if valset is None and searches and train:
        train, valset = split_off(train)
    return RunSets(train, list(valset or ()), _listed(track), track_name)


def split_off(examples: list[dspy.Example]) -> tuple[list[dspy.Example], list[dspy.Example]]:
    """(train, search): half the tasks each, chosen by their ids, so the split is the same in every run."""
    ranked = sorted(examples, key=lambda e: derive_seed("valset", task_id_of(e)))
    chosen = {id(e) for e in ranked[: max(1, len(examples) // 2)]}
    return [e for e in examples if id(e) not in chosen], [e for e in examples if id(e) in chosen]


def _listed(split: Sequence[dspy.Example] | None) -> list[dspy.Example] | None:
    return list(split) if split else None


def fingerprint(split: Sequence[dspy.Example] | None) -> dict[str, Any] | None:
    """A split's size and a digest of its task ids (or inputs), so a resume on other data is refused."""
    if split is None:
        return None
    keys = [str(e.get("task_id") or sorted(e.toDict().items())) for e in split]
    return {"tasks": len(keys), "digest": hashlib.sha256("\x1f".join(keys).encode()).hexdigest()[:12]}
