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


def expected_spread(archive: Path, prior: float, *, iteration: int) -> Spread:
    """The spread the race of `iteration` in `archive` expects: the prior pooled with its run's
    earlier races (`run_archives`; in `archive` itself, those of earlier iterations, a resumed
    iteration's own row left out), each candidate at its last look weighted by its degrees of
    freedom, the prior by PRIOR_DEGREES."""
    squares, degrees, races = PRIOR_DEGREES * prior**2, 0, 0
    for path in run_archives(archive):
        rows = {row.get("iteration"): row for row in read_jsonl(selection_folder(path) / DECISIONS_FILE)}
        for number, row in rows.items():  # the last row of an iteration a crash made write twice
            if path == archive and not (isinstance(number, int) and number < iteration):
                continue
            looks = _last_looks((row.get("decision") or {}).get("rounds") or [])
            for spread, tasks in looks.values():
                squares += spread**2 * (tasks - 1)
                degrees += tasks - 1
            races += bool(looks)
    if not degrees:
        return Spread(prior, "the prior")
    value = math.sqrt(squares / (PRIOR_DEGREES + degrees))
    said = f"{races} earlier race{'s' * (races != 1)} of this run"
    return Spread(value, f"the prior and {said} ({degrees} paired differences)")


def _last_looks(rounds: list[dict]) -> dict[str, tuple[float, int]]:
    """Each candidate's spread and task count at the last round it raced in (a round holds only the
    candidates still racing), where a spread over at least 2 tasks was measured."""
    looks: dict[str, tuple[float, int]] = {}
    for round_ in rounds:
        bounds = round_.get("bounds") or {}
        for name, spread in (round_.get("spreads") or {}).items():
            tasks = (bounds.get(name) or {}).get("tasks") or 0
            if tasks >= 2 and spread is not None and math.isfinite(spread):
                looks[name] = (spread, tasks)
    return looks


__all__ = ["PRIOR_DEGREES", "Spread", "expected_spread"]
