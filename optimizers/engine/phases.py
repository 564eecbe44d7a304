"""What the WHALE engine needs from a phase, and how it drives each kind one unit at a time.

A weight phase yields one RFT step per item and a harness phase one Meta-Harness
iteration per item; both declare the worst-case rollouts of their next unit so
the budget is checked before the unit starts (optimizers.engine.budget). A harness
phase reopened on its archive replays the iterations it recorded, and the
engine skips those it has already counted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import dspy

from optimizers.engine.checkpoint import HARNESS_ITERATION, WEIGHT_STEP, RunState
from optimizers.engine.methods import Method
from optimizers.engine.schedules import Schedule
from optimizers.signals import HarnessIteration, WeightStep, search_stalled
from whale_dspy.harness import HarnessProgram
from whale_dspy.records import AdapterRef
from whale_dspy.rundir import RunDir


class WeightPhase(Protocol):
    def sampling(self) -> dict[str, Any]: ...  # the LM settings its checkpoints are bound under
    # for one run: write adapters, traces and step records into the run's folder unless given one
    def writing_into(self, run_dir: RunDir) -> AbstractContextManager[None]: ...
    def epoch(self, trainset: Sequence[dspy.Example]) -> Any: ...  # has `.steps_per_epoch`

    def rollouts_per_step(self, trainset: Sequence[dspy.Example]) -> int: ...

    def steps(
        self,
        program: HarnessProgram,
        trainset: Sequence[dspy.Example],
        *,
        start_step: int = 0,
        parent: AdapterRef | None = None,
    ) -> Iterator[tuple[WeightStep, HarnessProgram]]: ...


class HarnessPhase(Protocol):
    def rollouts_per_iteration(self, searchset: Sequence[dspy.Example], iteration: int) -> int: ...

    def iterations(
        self, program: HarnessProgram, searchset: Sequence[dspy.Example], *, archive_dir: Path
    ) -> Iterator[tuple[HarnessIteration, HarnessProgram]]: ...


@dataclass(frozen=True)
class PhaseDriver:
    """One phase kind as the engine sees it: its stream, the next unit's cost, the schedule's
    decision, the event it records, and which units the state has already counted."""

    event: str
    stream: Callable[[HarnessProgram, RunState], Iterator[tuple[Any, HarnessProgram]]]
    stalled: Callable[[RunState], bool]
    """The phase's units have stopped producing anything (a harness search without candidates)."""
    cost: Callable[[RunState], int]
    admit: Callable[[RunState], int]
    """The rollouts the budget must still hold for the next unit to start: its own worst case,
    and for a harness phase's iteration 0 (the incoming harness's scoring, part of the first
    decision) the first decision's too, so a phase never re-scores what it cannot decide on."""
    done: Callable[[RunState], bool]
    index: Callable[[Any], int]
    counted: Callable[[RunState], int]


def weight_driver(
    phase: WeightPhase, trainset: Sequence[dspy.Example], schedule: Schedule, method: Method
) -> PhaseDriver:
    """Steps are numbered across all weight phases, so each phase continues the epoch walk."""
    steps_per_epoch = phase.epoch(trainset).steps_per_epoch
    return PhaseDriver(
        event=WEIGHT_STEP,
        stalled=lambda state: False,  # every step spends its rollouts
        stream=lambda program, state: phase.steps(
            program, trainset, start_step=state.spend.weight_steps, parent=state.adapter_ref
        ),
        cost=lambda state: phase.rollouts_per_step(trainset),
        admit=lambda state: phase.rollouts_per_step(trainset),
        done=lambda state: schedule.weight_done(
            state.weight_units(), cycle=method.cycle_of(state.position), steps_per_epoch=steps_per_epoch
        ),
        index=lambda signal: signal.step,
        counted=lambda state: state.spend.weight_steps,
    )


def harness_driver(
    phase: HarnessPhase,
    searchset: Sequence[dspy.Example],
    schedule: Schedule,
    *,
    incoming: Callable[[HarnessProgram, RunState], HarnessProgram],
    archive_dir: Callable[[RunState], Path],
) -> PhaseDriver:
    """Each harness phase searches from its incoming harness in its own archive."""
    return PhaseDriver(
        event=HARNESS_ITERATION,
        stream=lambda program, state: phase.iterations(
            incoming(program, state), searchset, archive_dir=archive_dir(state)
        ),
        stalled=lambda state: search_stalled(state.harness_units()),
        cost=lambda state: phase.rollouts_per_iteration(searchset, len(state.phase_units)),
        admit=lambda state: _harness_admission(phase, searchset, len(state.phase_units)),
        done=lambda state: schedule.harness_done(state.harness_units()),
        index=lambda signal: signal.iteration,
        counted=lambda state: len(state.phase_units),
    )


def _harness_admission(phase: HarnessPhase, searchset: Sequence[dspy.Example], counted: int) -> int:
    first_decision = phase.rollouts_per_iteration(searchset, 1) if counted == 0 else 0
    return phase.rollouts_per_iteration(searchset, counted) + first_decision
