"""A harness decision as a race: the incumbent and the iteration's candidates on growing task sets.

Every round scores the incumbent and the candidates still in the race on the next tasks of the
selection slice (same tasks, same rollout ids), so the incumbent is measured on exactly the draws
its challengers are, never trusted from the earlier draw that made it the incumbent. After each
round a candidate that clears the acceptance rule ends the race adopted; one that is clearly worse
than the round's leader, can no longer clear the rule, or can no longer plausibly reach the last
look's bar (futility) is dropped; a race with nobody left ends refused, having spent only its early
rounds. Before the first rollout the race is sized: the smallest lead its whole slice could adopt
at the spread expected, said aloud and recorded. `argmax` and `strict` score everyone on every task
in one round, as they always did.

The race knows nothing of harnesses: `score(name, task_ids)` measures one contender on some tasks,
so the rule can be tested on numbers and the harness phase decides how scores are produced, cached
and paid for.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from optimizers.harness.acceptance import (
    Acceptance,
    PairedBound,
    mean_of,
    paired_bound,
    race_sizes,
    spread_of,
)

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
    level: float | None = None
    """The one-sided error rate this look's bounds were read at."""
    spreads: dict[str, float] = field(default_factory=dict)
    """Each candidate's per-task sd of its difference from the incumbent on the tasks so far."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "tasks": self.tasks,
            "bounds": {name: bound.to_dict() for name, bound in self.bounds.items()},
            "means": self.means,
            "dropped": self.dropped,
            "level": self.level,
            "spreads": self.spreads,
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
    """The error rate of the last look's comparison (the confidence split over the racers, and
    for `paired-bonferroni` over the looks)."""
    size: RaceSize | None = None
    """What the race could decide, worked out before it ran."""
    screened: dict[str, str] = field(default_factory=dict)
    """Valid candidates left out of the race by screening, with why."""

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
            "size": self.size.to_dict() if self.size else None,
            "screened": self.screened,
        }


@dataclass(frozen=True)
class RaceSize:
    """A race worked out before its first rollout: its looks, each look's error rate, and the
    smallest lead its whole slice can adopt at the spread expected (`spread`, from `source`)."""

    tasks: int
    racers: int
    looks: tuple[int, ...]
    levels: tuple[float, ...]
    spread: float | None
    source: str
    adoptable: float
    """The smallest observed lead the last look adopts (infinite: this slice adopts nothing)."""

    def to_dict(self) -> dict[str, Any]:
        data = {**asdict(self), "looks": list(self.looks), "levels": list(self.levels)}
        return {**data, "adoptable": self.adoptable if math.isfinite(self.adoptable) else None}

    def said(self) -> str:
        if not self.racers:
            return "no race: no valid candidate"
        if not math.isfinite(self.adoptable):
            return f"this race cannot adopt anything on {self.tasks} selection tasks"
        return (
            f"this race can adopt leads above {self.adoptable:+.3f} on {self.tasks} tasks "
            f"({self.racers} racing, per-task spread {self.spread:.2f} from {self.source})"
        )


def size_race(
    acceptance: Acceptance, tasks: int, racers: int, *, start: int, spread: float | None, source: str
) -> RaceSize:
    """The race's looks and levels, and the smallest lead its last look can adopt at `spread`."""
    looks = race_sizes(start, tasks) if acceptance.races else race_sizes(tasks, tasks)
    levels = acceptance.levels(looks, racers)
    adoptable = math.inf
    if looks and acceptance.races and spread is not None:
        adoptable = acceptance.smallest_lead(tasks, levels[-1], spread)
    elif looks and not acceptance.races:
        adoptable = 0.0  # argmax and strict adopt any lead
    return RaceSize(tasks, racers, tuple(looks), tuple(levels), spread, source, adoptable)


def race(
    incumbent: str,
    candidates: Sequence[str],
    tasks: Sequence[str],
    score: Score,
    acceptance: Acceptance,
    *,
    start: int,
    tie_breaks: Mapping[str, tuple[float, ...]] | None = None,
    spread: float | None = None,
    spread_source: str = "none",
    screened: Mapping[str, str] | None = None,
) -> Decision:
    """Decide between `incumbent` and `candidates` on the selection `tasks` (in race order).

    `start` is the first round's task count (rounds double up to all tasks; one round for the rules
    that do not race). `tie_breaks` adds cheaper-is-better keys after the mean for `argmax`.
    `spread` is the per-task sd of a difference expected before the race (its sizing and the
    futility stop read it; None: the race sizes itself on what it measures). `screened`: candidates
    left out before the race, recorded with it.
    """
    size = size_race(
        acceptance, len(tasks), len(candidates), start=start, spread=spread, source=spread_source
    )
    alpha = size.levels[-1] if size.levels else 0.0
    decided = _Decided(acceptance.rule, incumbent, tuple(candidates), alpha, size, dict(screened or {}))
    if not candidates:
        return decided.done(None, "no valid candidate", (), ())
    if not tasks:
        return decided.done(None, "no selection tasks", (), ())
    scores: dict[str, dict[str, float]] = {name: {} for name in [incumbent, *candidates]}
    alive, rounds, done = list(candidates), [], 0
    for look, size_k in enumerate(size.looks):
        for name in [incumbent, *alive]:
            scores[name].update(score(name, tasks[done:size_k]))
        done, seen = size_k, tasks[:size_k]
        level = size.levels[look]
        means = {name: mean_of(scores[name], seen) for name in [incumbent, *alive]}
        bounds = {c: paired_bound(scores[c], scores[incumbent], alpha=level) for c in alive}
        spreads = {c: spread_of(scores[c], scores[incumbent]) for c in alive}
        rank = _ranker(means, tie_breaks or {})
        cleared = [c for c in alive if acceptance.clears(bounds[c], (rank(c), rank(incumbent)))]
        dropped = {} if cleared else _dropped(alive, bounds, spreads, scores, acceptance, size, level)
        rounds.append(RaceRound(size_k, bounds, means, dropped, level, _finite_only(spreads)))
        if cleared:
            winner = max(cleared, key=rank)
            return decided.done(winner, f"cleared {acceptance.rule} on {size_k} tasks", seen, rounds)
        alive = [c for c in alive if c not in dropped]
        if not alive:
            return decided.done(None, f"every candidate dropped after {size_k} tasks", seen, rounds)
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
    spreads: Mapping[str, float],
    scores: Mapping[str, Mapping[str, float]],
    acceptance: Acceptance,
    size: RaceSize,
    level: float,
) -> dict[str, str]:
    """Racing candidates that leave now: hopeless against the incumbent, clearly below the leader,
    or (before the last look) unable to plausibly reach the last look's bar."""
    if not acceptance.races:
        return {}
    leader = max(alive, key=lambda c: bounds[c].gain)
    last = bounds[leader].tasks >= size.tasks
    dropped = {}
    for candidate in alive:
        bound = bounds[candidate]
        if acceptance.hopeless(bound):
            dropped[candidate] = f"gain's upper bound {bound.high:+.3f} cannot clear the margin"
        elif candidate != leader and paired_bound(scores[candidate], scores[leader], alpha=level).high < 0:
            dropped[candidate] = f"below {leader}"
        elif not last and acceptance.futility > 0 and math.isfinite(spreads.get(candidate, math.nan)):
            spread = size.spread or spreads[candidate]  # 8 tasks' own spread is too noisy to trust
            lead = acceptance.smallest_lead(size.tasks, size.levels[-1], spread)  # the least it must gain
            power = acceptance.conditional_power(
                bound, spread, total=size.tasks, lead=lead, level=size.levels[-1]
            )
            if power < acceptance.futility:
                dropped[candidate] = f"futile: {power:.2f} chance to clear on {size.tasks} tasks"
    return dropped


def _finite_only(values: Mapping[str, float]) -> dict[str, float]:
    return {key: value for key, value in values.items() if math.isfinite(value)}


@dataclass(frozen=True)
class _Decided:
    rule: str
    incumbent: str
    candidates: tuple[str, ...]
    alpha: float
    size: RaceSize
    screened: dict[str, str]

    def done(
        self, adopted: str | None, reason: str, tasks: Sequence[str], rounds: Sequence[RaceRound]
    ) -> Decision:
        return Decision(
            self.rule, self.incumbent, adopted, reason, self.candidates, tuple(tasks), tuple(rounds),
            self.alpha, self.size, self.screened,
        )  # fmt: skip


__all__ = ["Decision", "RaceRound", "RaceSize", "Score", "race", "size_race"]
