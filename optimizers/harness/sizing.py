"""What a harness decision can decide, worked out before it spends a rollout.

A race's power rests on the per-task spread of a candidate's difference from the incumbent: the
smallest lead a slice of n tasks adopts is about t * spread / sqrt(n). The spread a race expects is
the stated prior (the spread measured on SQuAD F1 and GSM8K with the 0.5B model, FACTS 2026-12-05:
about 0.33) updated by this run's earlier races (every phase's, pooled): the prior counts as
PRIOR_DEGREES paired differences, so a first race stopped after 8 tasks already moves the second's
sizing, and many races outweigh the prior. An incumbent's own scores bound nothing: a candidate may
vary far more than a weak incumbent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from optimizers.harness.archive import run_archives
from optimizers.harness.selection import DECISIONS_FILE, selection_folder
from whale_dspy.jsonl import read_jsonl

PRIOR_DEGREES = 16
"""The paired differences' degrees of freedom the prior spread counts as, pooled with the run's."""


@dataclass(frozen=True)
class Spread:
    """The per-task sd of a difference a race expects, and where it came from."""

    value: float
    source: str


def expected_spread(archive: Path, prior: float) -> Spread:
    """The spread the next race of the run `archive` belongs to expects: the prior pooled with its
    earlier races' differences (each candidate's last look, weighted by its degrees of freedom; the
    prior by PRIOR_DEGREES). The run's races are those of `run_archives(archive)`."""
    squares, degrees, races = PRIOR_DEGREES * prior**2, 0, 0
    for path in run_archives(archive):
        for row in read_jsonl(selection_folder(path) / DECISIONS_FILE):
            rounds = (row.get("decision") or {}).get("rounds") or []
            last = rounds[-1] if rounds else {}
            spreads, bounds = last.get("spreads") or {}, last.get("bounds") or {}
            for name, spread in spreads.items():
                tasks = (bounds.get(name) or {}).get("tasks") or 0
                if tasks >= 2 and spread is not None and math.isfinite(spread):
                    squares += spread**2 * (tasks - 1)
                    degrees += tasks - 1
            races += bool(spreads)
    if not degrees:
        return Spread(prior, "the prior")
    value = math.sqrt(squares / (PRIOR_DEGREES + degrees))
    said = f"{races} earlier race{'s' * (races != 1)} of this run"
    return Spread(value, f"the prior and {said} ({degrees} paired differences)")


__all__ = ["PRIOR_DEGREES", "Spread", "expected_spread"]
