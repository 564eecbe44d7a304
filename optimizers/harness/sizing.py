"""What a harness decision can decide, worked out before it spends a rollout.

A race's power rests on the per-task spread of a candidate's difference from the incumbent: the
smallest lead a slice of n tasks adopts is about t * spread / sqrt(n). The spread is the paired
differences' of this run's earlier races (every phase's, pooled), else the stated prior, the spread
measured on SQuAD F1 and GSM8K with the 0.5B model (FACTS, 2026-12-05: about 0.33). An incumbent's
own scores bound nothing: a candidate may vary far more than a weak incumbent.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from optimizers.harness.selection import DECISIONS_FILE
from whale_dspy.jsonl import read_jsonl

MIN_DEGREES = 16
"""Paired differences' degrees of freedom, pooled over earlier races, before they are trusted."""


@dataclass(frozen=True)
class Spread:
    """The per-task sd of a difference a race expects, and where it came from."""

    value: float
    source: str


def expected_spread(archive: Path, prior: float) -> Spread:
    """The spread the next race of the run `archive` belongs to expects: its earlier races' pooled
    spread, else `prior`. The run's archives are `archive`'s siblings of one name and a number (a
    WHALE run's `phase-000`, `phase-001`, ...); an archive without a number is a run of its own."""
    pooled = _pooled_race_spread(archive)
    return pooled if pooled is not None else Spread(prior, "the prior")


def _pooled_race_spread(archive: Path) -> Spread | None:
    """Pooled sd of every recorded race's last-look differences (each candidate's, weighted by its
    degrees of freedom); None below MIN_DEGREES."""
    stem = re.sub(r"\d+$", "", archive.name)
    pattern = f"{stem}*-selection" if stem != archive.name else f"{archive.name}-selection"
    squares, degrees, races = 0.0, 0, 0
    for path in sorted(archive.parent.glob(f"{pattern}/{DECISIONS_FILE}")):
        for row in read_jsonl(path):
            rounds = (row.get("decision") or {}).get("rounds") or []
            last = rounds[-1] if rounds else {}
            spreads, bounds = last.get("spreads") or {}, last.get("bounds") or {}
            for name, spread in spreads.items():
                tasks = (bounds.get(name) or {}).get("tasks") or 0
                if tasks >= 2 and spread is not None and math.isfinite(spread):
                    squares += spread**2 * (tasks - 1)
                    degrees += tasks - 1
            races += bool(spreads)
    if degrees < MIN_DEGREES:
        return None
    return Spread(math.sqrt(squares / degrees), f"{races} earlier race{'s' * (races != 1)} of this run")


__all__ = ["MIN_DEGREES", "Spread", "expected_spread"]
