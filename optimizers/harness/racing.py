"""A harness decision as a race: the incumbent and the iteration's candidates on growing task sets.

Every round scores the incumbent and the candidates still in the race on the next tasks of the
selection slice (same tasks, same rollout ids), so the incumbent is measured on exactly the draws
its challengers are, never trusted from the earlier draw that made it the incumbent. After each
round a candidate that clears the acceptance rule ends the race adopted; one that is clearly worse
than the round's leader, or can no longer clear the rule, is dropped; a race with nobody left ends
refused. `argmax` and `strict` score everyone on every task in one round, as they always did.

The race knows nothing of harnesses: `score(name, task_ids)` measures one contender on some tasks,
so the rule can be tested on numbers and the harness phase decides how scores are produced, cached
and paid for.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from optimizers.harness.acceptance import Acceptance, PairedBound, mean_of, paired_bound, race_sizes

Score = Callable[[str, Sequence[str]], Mapping[str, float]]
"""Per-task scores of one contender (by name) on the given task ids."""


@dataclass(frozen=True)
class RaceRound:
    """One round: the tasks scored so far, each candidate's paired bound over the incumbent on them,
    and who left the race after it (with why)."""

    tasks: int
    bounds: dict[str, PairedBound]
    means: dict[str, float]
    dropped: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tasks": self.tasks,
            "bounds": {name: bound.to_dict() for name, bound in self.bounds.items()},
            "means": self.means,
            "dropped": self.dropped,
        }


@dataclass(frozen=True)
class Decision:
    """What a harness iteration decided, and on what evidence."""

    rule: str
    incumbent: str
    adopted: str | None
    reason: str
    candidates: tuple[str, ...]
    tasks: tuple[str, ...]
    """The selection tasks scored (the largest round's), in race order."""
    rounds: tuple[RaceRound, ...] = ()
    alpha: float = 0.0
    """The error rate of each comparison (the confidence split over the race's comparisons)."""

    @property
    def gain(self) -> PairedBound | None:
        """The adopted candidate's paired gain over the incumbent where it cleared the rule."""
        if self.adopted is None or not self.rounds:
            return None
        return self.rounds[-1].bounds.get(self.adopted)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "incumbent": self.incumbent,
            "adopted": self.adopted,
            "reason": self.reason,
            "candidates": list(self.candidates),
            "tasks": list(self.tasks),
            "alpha": self.alpha,
            "gain": self.gain.to_dict() if self.gain else None,
            "rounds": [r.to_dict() for r in self.rounds],
        }


def race(
    incumbent: str,
    candidates: Sequence[str],
    tasks: Sequence[str],
    score: Score,
    acceptance: Acceptance,
    *,
    start: int,
    tie_breaks: Mapping[str, tuple[float, ...]] | None = None,
) -> Decision:
    """Decide between `incumbent` and `candidates` on the selection `tasks` (in race order).

    `start` is the first round's task count (rounds double up to all tasks; one round for the rules
    that do not race). `tie_breaks` adds cheaper-is-better keys after the mean for `argmax`.
    """
    sizes = race_sizes(start, len(tasks)) if acceptance.races else race_sizes(len(tasks), len(tasks))
    alpha = acceptance.alpha(len(candidates) * len(sizes))
    decided = _Decided(acceptance.rule, incumbent, tuple(candidates), alpha)
    if not candidates:
        return decided.done(None, "no valid candidate", (), ())
    if not tasks:
        return decided.done(None, "no selection tasks", (), ())
    scores: dict[str, dict[str, float]] = {name: {} for name in [incumbent, *candidates]}
    alive, rounds, done = list(candidates), [], 0
    for size in sizes:
        for name in [incumbent, *alive]:
            scores[name].update(score(name, tasks[done:size]))
        done, seen = size, tasks[:size]
        means = {name: mean_of(scores[name], seen) for name in [incumbent, *alive]}
        bounds = {c: paired_bound(scores[c], scores[incumbent], alpha=alpha) for c in alive}
        rank = _ranker(means, tie_breaks or {})
        cleared = [c for c in alive if acceptance.clears(bounds[c], (rank(c), rank(incumbent)))]
        dropped = {} if cleared else _dropped(alive, bounds, scores, acceptance, alpha)
        rounds.append(RaceRound(size, bounds, means, dropped))
        if cleared:
            winner = max(cleared, key=rank)
            return decided.done(winner, f"cleared {acceptance.rule} on {size} tasks", seen, rounds)
        alive = [c for c in alive if c not in dropped]
        if not alive:
            return decided.done(None, f"every candidate dropped after {size} tasks", seen, rounds)
    reason = f"no candidate cleared {acceptance.rule} on {done} tasks"
    return decided.done(None, reason + _short_of(acceptance, rounds[-1].bounds, alive), tasks, rounds)


def _short_of(acceptance: Acceptance, bounds: Mapping[str, PairedBound], alive: Sequence[str]) -> str:
    """How far the candidate nearest to clearing (the highest lower bound) fell short: the lead that
    would have cleared at its spread, which says whether a larger or less noisy selection slice
    could decide such gains."""
    if not acceptance.races or not alive:
        return ""
    leader = max(alive, key=lambda c: bounds[c].low)
    bound = bounds[leader]
    if not (math.isfinite(bound.low) and math.isfinite(bound.gain)):
        return ""
    needed = acceptance.margin + bound.gain - bound.low
    return f" (nearest {leader} {bound.gain:+.3f}; at its spread a lead above {needed:+.3f} clears)"


def _ranker(
    means: Mapping[str, float], tie_breaks: Mapping[str, tuple[float, ...]]
) -> Callable[[str], tuple[float, ...]]:
    return lambda name: (means[name], *tie_breaks.get(name, ()))


def _dropped(
    alive: Sequence[str],
    bounds: Mapping[str, PairedBound],
    scores: Mapping[str, Mapping[str, float]],
    acceptance: Acceptance,
    alpha: float,
) -> dict[str, str]:
    """Racing candidates that leave now: hopeless against the incumbent, or clearly below the leader."""
    if not acceptance.races:
        return {}
    leader = max(alive, key=lambda c: bounds[c].gain)
    dropped = {}
    for candidate in alive:
        if acceptance.hopeless(bounds[candidate]):
            dropped[candidate] = f"gain's upper bound {bounds[candidate].high:+.3f} cannot clear the margin"
        elif candidate != leader:
            against = paired_bound(scores[candidate], scores[leader], alpha=alpha)
            if against.high < 0:
                dropped[candidate] = f"below {leader}: upper bound {against.high:+.3f}"
    return dropped


@dataclass(frozen=True)
class _Decided:
    rule: str
    incumbent: str
    candidates: tuple[str, ...]
    alpha: float

    def done(
        self, adopted: str | None, reason: str, tasks: Sequence[str], rounds: Sequence[RaceRound]
    ) -> Decision:
        rounds, tasks = tuple(rounds), tuple(tasks)
        candidates, rule = self.candidates, self.rule
        return Decision(rule, self.incumbent, adopted, reason, candidates, tasks, rounds, self.alpha)


__all__ = ["Decision", "RaceRound", "Score", "race"]
