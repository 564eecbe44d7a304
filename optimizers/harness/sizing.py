"""What a harness decision can decide, worked out before it spends a rollout.

A race's power rests on the per-task spread of a candidate's difference from the incumbent: the
smallest lead a slice of n tasks adopts is about t * spread / sqrt(n). The spread is taken from
what this run has measured, most specific first: the paired differences of its earlier races
(every phase's, pooled), else an upper bound from the incumbent's own feedback scores (the
difference of two programs that agree no more than chance spreads at most sqrt(2) times one
program's sd), never above the stated prior; else the prior, the spread measured on SQuAD F1 and
GSM8K with the 0.5B model (FACTS, 2026-12-05: about 0.33).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from optimizers.harness.selection import DECISIONS_FILE
from whale_dspy.jsonl import read_jsonl

MIN_DEGREES = 16
"""Paired differences' degrees of freedom, pooled over earlier races, before they are trusted."""


@dataclass(frozen=True)
class Spread:
    """The per-task sd of a difference a race expects, and where it came from."""

    value: float
    source: str


def expected_spread(run_folder: Path, incumbent_scores: list[float], prior: float) -> Spread:
    """The spread the next race of a run expects: its earlier races' pooled spread, else the
    incumbent's bound (at most `prior`), else `prior`. `run_folder` holds the run's harness archives
    and their `-selection` folders."""
    pooled = _pooled_race_spread(run_folder)
    if pooled is not None:
        return pooled
    if len(incumbent_scores) >= 2:
        bound = math.sqrt(2.0) * float(np.std(incumbent_scores, ddof=1))
        if bound > 0:
            return Spread(
                min(prior, bound), "the incumbent's feedback scores" if bound < prior else "the prior"
            )
    return Spread(prior, "the prior")


def _pooled_race_spread(run_folder: Path) -> Spread | None:
    """Pooled sd of every recorded race's last-look differences (each candidate's, weighted by its
    degrees of freedom); None below MIN_DEGREES."""
    squares, degrees, races = 0.0, 0, 0
    for path in sorted(run_folder.glob(f"*-selection/{DECISIONS_FILE}")):
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
