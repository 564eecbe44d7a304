"""bench/selection.py --synthetic: the decision rules' false-adoption rate, power and cost, simulated.

Each race is the library's own (optimizers.harness.racing.race) on simulated per-task paired
differences d in {-1, 0, +1} with sd `spread` (0.33, SQuAD F1's measured spread) and mean `gain`
(the binary-task model of ../shared/notes/selection-under-noise.md, section 1.2): three proposals,
of which the first carries the gain and the others none, are screened on `feedback` tasks of their
own draws (the feedback slice, which proposers see) and the best `racers` race on the selection
slice against an incumbent that scores 0 on every task. A rule's realised false-adoption rate is
its adoption rate where every proposal has gain 0; its power, the rate at which it adopts the one
that carries the gain. Rollouts count contenders x tasks scored, incumbent included.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from optimizers.harness import Acceptance, race


@dataclass(frozen=True)
class Rule:
    name: str
    acceptance: Acceptance
    racers: int
    """How many of the proposals race after screening (0: all of them)."""


RULES: dict[str, Rule] = {
    rule.name: rule
    for rule in (
        Rule("paired", Acceptance(), 2),
        Rule("paired, all race", Acceptance(), 0),
        Rule("paired, no futility", Acceptance(futility=0.0), 2),
        Rule("paired-bonferroni", Acceptance("paired-bonferroni", futility=0.0), 0),
    )
}
"""`paired` as the library runs it by default; one piece of it undone at a time; and the rule until
issue 56 (Bonferroni over racers x looks, every proposal racing, no futility stop)."""


def differences(rng: np.random.Generator, n: int, gain: float, spread: float) -> np.ndarray:
    """n per-task differences in {-1, 0, +1} with mean `gain` and sd `spread`."""
    discordant = spread**2 + gain**2
    return rng.choice(
        [-1.0, 0.0, 1.0], p=[(discordant - gain) / 2, 1 - discordant, (discordant + gain) / 2], size=n
    )


def one_race(
    rng: np.random.Generator,
    rule: Rule,
    *,
    tasks: int,
    gain: float,
    proposals: int,
    feedback: int,
    spread: float,
) -> tuple[str | None, int, int]:
    """(the adopted proposal or None, the rollouts the race spent, the contenders that raced)."""
    names = [f"p{i}" for i in range(proposals)]
    gains = [gain] + [0.0] * (proposals - 1)
    screen = {
        name: differences(rng, feedback, g, spread).mean() + rng.random() * 1e-9
        for name, g in zip(names, gains, strict=True)
    }
    keep = proposals if not rule.racers else min(rule.racers, proposals)
    racing = sorted(names, key=screen.__getitem__, reverse=True)[:keep]
    ids = [f"t{i}" for i in range(tasks)]
    scores = {"h0": dict.fromkeys(ids, 0.0)}
    for name, g in zip(names, gains, strict=True):
        scores[name] = dict(zip(ids, differences(rng, tasks, g, spread), strict=True))
    spent = [0]

    def score(name: str, task_ids: Sequence[str]) -> dict[str, float]:
        spent[0] += len(task_ids)
        return {t: scores[name][t] for t in task_ids}

    decision = race("h0", racing, ids, score, rule.acceptance, start=8, spread=spread)
    return decision.adopted, spent[0], len(racing)


def cell(
    rule: Rule, *, tasks: int, gain: float, races: int, seed: int, proposals: int = 3, feedback: int = 8,
    spread: float = 0.33,
) -> dict[str, float]:  # fmt: skip
    """One rule at one slice size and gain, over `races` races."""
    rng = np.random.default_rng([seed, tasks, round(gain * 1000)])
    adopted = good = rollouts = 0
    full = 0.0
    for _ in range(races):
        winner, spent, racing = one_race(
            rng, rule, tasks=tasks, gain=gain, proposals=proposals, feedback=feedback, spread=spread
        )
        adopted += winner is not None
        good += winner == "p0" and gain > 0
        rollouts += spent
        full += spent / ((1 + racing) * tasks)
    rate = (good if gain > 0 else adopted) / races
    low, high = wilson(rate, races)
    return {
        "rule": rule.name,
        "tasks": tasks,
        "gain": gain,
        "races": races,
        "rate": rate,
        "rate_low": low,
        "rate_high": high,
        "rollouts": rollouts / races,
        "share_of_slice": full / races,
    }


def wilson(rate: float, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson 95% interval of a binomial rate."""
    centre = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def table(rows: Sequence[dict[str, float]]) -> str:
    lines = [
        "| rule | selection tasks | gain | races | false adoption (gain 0) or power | rollouts a race "
        "| share of its whole slice |",
        "|" + "---|" * 7,
    ]
    for r in rows:
        what = "false adoption" if r["gain"] == 0 else "power"
        lines.append(
            f"| {r['rule']} | {r['tasks']} | {r['gain']:+.2f} | {r['races']} | {what} {r['rate']:.3f} "
            f"[{r['rate_low']:.3f}, {r['rate_high']:.3f}] | {r['rollouts']:.0f} | {r['share_of_slice']:.2f} |"
        )
    return "\n".join(lines)


def run(
    cells: Sequence[tuple[int, float]], rules: Sequence[str], races: int, seed: int
) -> list[dict[str, float]]:
    return [cell(RULES[name], tasks=t, gain=g, races=races, seed=seed) for name in rules for t, g in cells]


__all__ = ["RULES", "Rule", "cell", "run", "table", "wilson"]
