"""One harness iteration's decision: its valid candidates raced against the incumbent, and the record.

The race (optimizers.harness.racing) runs on the selection slice (optimizers.harness.selection) with the
race's own rollout ids: every contender of a race shares the draws, and each race draws afresh, so
the incumbent is re-scored rather than trusted from the draw that made it the incumbent. Deciding
on the feedback slice (selection_tasks=0, the paper's setting) reuses the scores its evaluation
recorded. The whole decision is kept beside the archive (`decisions.jsonl`); the archive, which
proposers read, keeps it without the selection tasks' ids.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dspy

from optimizers.harness.archive import HarnessArchive
from optimizers.harness.config import MetaHarnessConfig
from optimizers.harness.racing import Decision, race, size_race
from optimizers.harness.selection import (
    DECISIONS_FILE,
    CachedScorer,
    ChunkCost,
    Slices,
    chunk_record,
    selection_folder,
)
from optimizers.harness.sizing import expected_spread
from optimizers.harness.validation import CandidateRejected
from optimizers.signals import HarnessIteration
from whale_dspy.jsonl import append_jsonl, read_jsonl
from whale_dspy.records import Rollout
from whale_dspy.rollouts import task_id_of
from whale_dspy.seeding import derive_seed

log = logging.getLogger(__name__)

Measure = Callable[[str, list[dspy.Example], Path, str], list[Rollout]]
"""Runs one contender (by archive name) on some tasks under a rollout-id namespace, writing traces
to the path; raises CandidateRejected when the contender breaks."""


def decide(
    archive: HarnessArchive,
    iteration: int,
    incumbent: str,
    slices: Slices,
    config: MetaHarnessConfig,
    measure: Measure,
) -> tuple[Decision | None, ChunkCost | None]:
    """The race of the iteration's best valid candidates against the incumbent (none at iteration
    0), and what the race's own scoring cost (None when it reused the feedback scores)."""
    if iteration == 0:
        return None, None
    racers, screened = screen(archive, iteration, config, selection=bool(slices.selection))
    ranks = {m.name: m.rank_key[1:] for m in archive.candidates}
    scorer = None
    if slices.selection:
        namespace = f"meta-harness/{derive_seed(config.seed)}/race-{iteration}"
        chunk = functools.partial(_measure_chunk, measure, namespace)
        scorer = CachedScorer(
            selection_folder(archive.path) / f"race-{iteration:03d}", slices.selection, chunk
        )
        score, task_ids = scorer, slices.ids()
    else:
        task_ids = [task_id_of(t) for t in slices.feedback]
        score = functools.partial(_recorded_scores, archive)
    rule = config.decision_rule()
    spread = expected_spread(archive.path, config.spread_prior, iteration=iteration)
    if scorer is not None:
        score = functools.partial(_incumbent_must_answer, scorer, incumbent)
    sized = {"start": config.race_start, "spread": spread.value}
    size = size_race(rule, len(task_ids), len(racers), **sized, source=spread.source)
    log.info("iteration %d: %s", iteration, size.said())
    options = {**sized, "spread_source": spread.source, "tie_breaks": ranks, "screened": screened}
    try:
        decision = race(incumbent, racers, task_ids, score, rule, **options)
    except _IncumbentFailed as failed:  # its zeros would read as every candidate's gain
        reason = f"the incumbent failed in the race: {failed}"
        decision = Decision(rule.rule, incumbent, None, reason, tuple(racers), ())
    kept = f"adopted {decision.adopted}" if decision.adopted else f"kept {incumbent}"
    log.info("iteration %d: %s (%s)", iteration, kept, decision.reason)
    return decision, scorer.cost if scorer is not None else None


def screen(
    archive: HarnessArchive, iteration: int, config: MetaHarnessConfig, *, selection: bool
) -> tuple[list[str], dict[str, str]]:
    """The iteration's valid candidates that race (the best on the feedback slice, which proposers
    saw: fine for screening, never for deciding) and those screened out, with why."""
    valid = [m for m in archive.candidates if m.iteration == iteration and m.valid]
    ranked = sorted(valid, key=lambda m: m.rank_key, reverse=True)
    keep = config.racing(len(ranked), selection=selection)
    racing, out = ranked[:keep], ranked[keep:]
    cut = racing[-1].scores.mean if racing else 0.0
    screened = {m.name: f"screened out: feedback mean {m.scores.mean:.3f} <= {cut:.3f}" for m in out}
    order = {m.name: i for i, m in enumerate(valid)}
    return sorted((m.name for m in racing), key=order.__getitem__), screened


def decision_record(decision: Decision, cost: ChunkCost | None) -> dict[str, Any]:
    """The decision as signals and events carry it, with what its race spent."""
    keys = ("rollouts", "lm_calls", "completion_tokens", "interrupted")
    spent = None if cost is None else {k: getattr(cost, k) for k in keys}
    return {**decision.to_dict(), "race": spent}


def record_iteration(archive: HarnessArchive, signal: HarnessIteration, errors: list[str]) -> None:
    """The iteration's record: its decision whole beside the archive, and in the archive only what
    was decided and why (no selection task ids, means or bounds a proposer could tune against)."""
    decision = signal.decision
    if decision is not None:
        append_jsonl(_decisions_file(archive), {"iteration": signal.iteration, "decision": decision})
    kept = ("rule", "incumbent", "adopted", "reason", "candidates")  # no selection scores: proposers read it
    shown = None if decision is None else {key: decision[key] for key in kept}
    archive.record_iteration({**signal.to_dict(), "decision": shown, "proposer_errors": errors})


def recorded_iterations(archive: HarnessArchive) -> list[HarnessIteration]:
    """The archive's iterations as they were signalled, each with its whole decision."""
    decisions = {row["iteration"]: row["decision"] for row in read_jsonl(_decisions_file(archive))}
    return [
        HarnessIteration.from_dict({**record, "decision": decisions.get(record["iteration"])})
        for record in archive.iteration_records()
    ]


class _IncumbentFailed(Exception):
    """The incumbent broke on a race chunk (a timeout, a dead server): no gain can be measured."""


def _incumbent_must_answer(scorer: CachedScorer, incumbent: str, name: str, task_ids: list[str]):
    scores = scorer(name, task_ids)
    if name == incumbent and incumbent in scorer.errors:
        raise _IncumbentFailed(scorer.errors[incumbent])
    return scores


def _decisions_file(archive: HarnessArchive) -> Path:
    return selection_folder(archive.path) / DECISIONS_FILE


def _recorded_scores(archive: HarnessArchive, name: str, task_ids: list[str]) -> dict[str, float]:
    return {t: archive.get(name).scores.per_task.get(t, 0.0) for t in task_ids}


def _measure_chunk(
    measure: Measure, namespace: str, name: str, examples: list[dspy.Example], trace: Path
) -> dict[str, Any]:
    """One contender's chunk record; one that breaks on tasks it had not met scores 0 on them."""
    try:
        rollouts = measure(name, examples, trace, namespace)
    except CandidateRejected as rejected:
        log.warning("%s failed in the race: %s", name, rejected)
        rollouts = [Rollout.from_dict(row) for row in read_jsonl(trace)]
        per_task = {task_id_of(t): [0.0] for t in examples}
        return {**chunk_record(per_task, rollouts), "error": str(rejected)}
    per_task: dict[str, list[float]] = {}
    for rollout in rollouts:
        per_task.setdefault(rollout.task_id, []).append(rollout.score)
    return chunk_record(per_task, rollouts)


__all__ = [
    "Measure",
    "decide",
    "decision_record",
    "record_iteration",
    "recorded_iterations",
    "screen",
]
