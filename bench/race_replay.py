"""bench/selection.py --replay: recorded harness races re-decided under every rule, no new rollouts.

A recorded race folder (`<archive>-selection/race-NNN/`) keeps each contender's per-task scores on
the selection slice, chunk by chunk; its archive keeps each candidate's code digest and feedback
mean (what screening ranks by). A replay runs the library's race (optimizers.harness.racing) under
each rule on those scores. The same race recorded under several rules of one selection bench
(`argmax-large/seed-0`, `paired/seed-0`: same seed, same proposals, same rollout ids) is replayed
once, its scores pooled, so a rule may read tasks the recorded rule never scored. A rule that asks
for a score no record holds leaves that race unreplayed (counted apart), never guessed.

Judged, where the bench read the harnesses on held-out tasks (`held-out/<digest>.json`): an adopted
harness whose held-out paired gain over the incumbent has a 95% bootstrap interval (over tasks) not
above zero did not carry over; a refused race whose leader's interval is above zero was a false
refusal. Harnesses the bench never read are counted as unjudged.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from race_synthetic import RULES, Rule

from optimizers.harness import Acceptance, MetaHarnessConfig, Spread, race
from whale_dspy.jsonl import read_jsonl
from whale_dspy.stats import paired_gain

BENCH_RULE_FOLDERS = {"argmax8", "argmax-large", "paired"}
"""bench/selection.py's own rule folders: races under them share seeds and proposals."""


SPREAD_PRIOR = MetaHarnessConfig.spread_prior

REPLAY_RULES: dict[str, Rule] = {**RULES, "argmax": Rule("argmax", Acceptance("argmax"), 0)}
"""The simulated rules, and argmax on the whole selection slice (bench/selection.py's argmax-large)."""


class Unrecorded(Exception):
    """A rule asked for a score no record holds."""


@dataclass
class RecordedRace:
    """One decision's context: who raced, on which tasks, with every recorded score pooled."""

    key: str
    incumbent: str
    candidates: list[str]
    tasks: list[str]
    digests: dict[str, str]
    feedback_means: dict[str, float]
    held_out: Path
    scores: dict[str, dict[str, float]] = field(default_factory=dict)

    def score(self, name: str, task_ids: Sequence[str]) -> dict[str, float]:
        have = self.scores.get(name, {})
        if any(t not in have for t in task_ids):
            raise Unrecorded(name)
        return {t: have[t] for t in task_ids}


def recorded_races(root: Path) -> list[RecordedRace]:
    """Every distinct recorded race under `root`, scores pooled over the rules that share it."""
    found: dict[tuple, RecordedRace] = {}
    for race_dir in sorted(
        p for p in root.rglob("race-*") if p.is_dir() and p.parent.name.endswith("-selection")
    ):
        race_ = _read_race(root, race_dir)
        if race_ is None:
            continue
        context = (
            race_.key,
            race_.digests[race_.incumbent],
            tuple(sorted(race_.digests[c] for c in race_.candidates)),
        )
        kept = found.setdefault(context, race_)
        for name, scores in _chunk_scores(race_dir).items():
            kept.scores.setdefault(race_.digests.get(name, name), {}).update(scores)
    for race_ in found.values():  # by name, as the race asks
        race_.scores = {name: race_.scores.get(digest, {}) for name, digest in race_.digests.items()}
    return list(found.values())


def _read_race(root: Path, race_dir: Path) -> RecordedRace | None:
    selection = race_dir.parent
    archive = selection.with_name(selection.name.removesuffix("-selection"))
    iteration = int(race_dir.name.removeprefix("race-"))
    rows = [r for r in read_jsonl(selection / "decisions.jsonl") if r["iteration"] == iteration]
    if not rows:
        return None
    decision = rows[-1]["decision"]
    names = [decision["incumbent"], *decision["candidates"]]
    metas = {
        n: json.loads((archive / n / "meta.json").read_text())
        for n in names
        if (archive / n / "meta.json").exists()
    }
    if set(metas) != set(names):
        return None
    parts = list(archive.relative_to(root).parts)
    if parts and parts[0] in BENCH_RULE_FOLDERS:
        parts[0] = "*"
    return RecordedRace(
        key=f"{'/'.join(parts)}#{iteration}",
        incumbent=decision["incumbent"],
        candidates=list(decision["candidates"]),
        tasks=json.loads((selection / "slices.json").read_text())["selection"],
        digests={n: m["digest"] for n, m in metas.items()},
        feedback_means={n: m["scores"]["mean"] for n, m in metas.items()},
        held_out=root / "held-out",
    )


def _chunk_scores(race_dir: Path) -> dict[str, dict[str, float]]:
    scores: dict[str, dict[str, float]] = {}
    for chunk in sorted(race_dir.glob("*.json")):
        name = chunk.name.split("-")[0]
        scores.setdefault(name, {}).update(json.loads(chunk.read_text())["scores"])
    return scores


def replay(recorded: RecordedRace, rule: Rule) -> dict[str, Any]:
    """The race re-decided under `rule`, judged on held-out reads where they exist."""
    ranked = sorted(recorded.candidates, key=recorded.feedback_means.__getitem__, reverse=True)
    racing = ranked if not rule.racers else ranked[: rule.racers]
    spread = Spread(SPREAD_PRIOR, "the prior")  # pooling would read this race's own and later records
    spent = [0]

    def score(name: str, task_ids: Sequence[str]) -> dict[str, float]:
        spent[0] += len(task_ids)
        return recorded.score(name, task_ids)

    try:
        decision = race(
            recorded.incumbent, racing, recorded.tasks, score, rule.acceptance, start=8,
            spread=spread.value, spread_source=spread.source,
        )  # fmt: skip
    except Unrecorded as missing:
        return {"race": recorded.key, "rule": rule.name, "replayed": False, "missing": str(missing)}
    last = decision.rounds[-1] if decision.rounds else None
    leader = decision.adopted or (
        max(last.bounds, key=lambda c: last.bounds[c].gain) if last and last.bounds else None
    )
    return {
        "race": recorded.key,
        "rule": rule.name,
        "replayed": True,
        "adopted": decision.adopted,
        "leader": leader,
        "rollouts": spent[0],
        "held_out": _held_out_gain(recorded, leader),
        "reason": decision.reason,
    }


def _held_out_gain(recorded: RecordedRace, leader: str | None) -> dict[str, Any] | None:
    if leader is None:
        return None
    paths = [recorded.held_out / f"{recorded.digests[n]}.json" for n in (recorded.incumbent, leader)]
    if not all(p.exists() for p in paths):
        return None
    before, after = (json.loads(p.read_text()) for p in paths)
    return paired_gain(before, after).to_dict()


def summary(rule: str, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    done = [r for r in rows if r["replayed"]]
    adopted = [r for r in done if r["adopted"]]
    judged = [r for r in adopted if r["held_out"]]
    refused = [r for r in done if not r["adopted"] and r["held_out"]]
    return {
        "rule": rule,
        "races": len(rows),
        "replayed": len(done),
        "adopted": len(adopted),
        "did_not_carry_over": sum(1 for r in judged if r["held_out"]["low"] <= 0),
        "unjudged_adoptions": len(adopted) - len(judged),
        "false_refusals": sum(1 for r in refused if r["held_out"]["low"] > 0),
        "rollouts_per_decision": sum(r["rollouts"] for r in done) / max(1, len(done)),
    }


def table(summaries: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| rule | races (replayed) | adopted | did not carry over | adoptions not read held out "
        "| false refusals | race rollouts a decision |",
        "|" + "---|" * 7,
    ]
    for s in summaries:
        lines.append(
            f"| {s['rule']} | {s['races']} ({s['replayed']}) | {s['adopted']} | {s['did_not_carry_over']} "
            f"| {s['unjudged_adoptions']} | {s['false_refusals']} | {s['rollouts_per_decision']:.0f} |"
        )
    return "\n".join(lines)


def run(roots: Sequence[Path], rules: Sequence[str]) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Per rule: its summary over every race under `roots`, and its rows."""
    races = [r for root in roots for r in recorded_races(root)]
    for name in rules:
        rows = [replay(r, REPLAY_RULES[name]) for r in races]
        yield summary(name, rows), rows


__all__ = ["REPLAY_RULES", "RecordedRace", "recorded_races", "replay", "run", "summary", "table"]
