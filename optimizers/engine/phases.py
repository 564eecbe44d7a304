"""What the WHALE engine needs from a phase, and the two drivers it drives them through, one unit at a time.

A weight phase yields one RFT step per item and a harness phase one Meta-Harness
iteration per item; both declare the worst-case rollouts of their next unit so
the budget is checked before the unit starts (optimizers.engine.budget). A harness
phase reopened on its archive replays the iterations it recorded, and the
engine skips those it has already counted.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

import dspy

from optimizers.engine.checkpoint import HARNESS_ITERATION, WEIGHT_STEP, RunState, load_harness, store_harness
from optimizers.engine.methods import HARNESS, WEIGHT, Method
from optimizers.engine.schedules import Schedule
from optimizers.harness.archive import phase_archive
from optimizers.signals import HarnessIteration, WeightStep, search_stalled
from whale_dspy.harness import HarnessProgram
from whale_dspy.records import AdapterRef
from whale_dspy.rollouts import Metric
from whale_dspy.rundir import RunDir


class WeightPhase(Protocol):
    metric: Metric | None
    """None until the engine gives it the optimizer's (a metric passed once)."""

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
    metric: Metric | None

    def rollouts_per_iteration(self, searchset: Sequence[dspy.Example], iteration: int) -> int: ...

    def iterations(
        self, program: HarnessProgram, searchset: Sequence[dspy.Example], *, archive_dir: Path
    ) -> Iterator[tuple[HarnessIteration, HarnessProgram]]: ...


class PhaseDriver(Protocol):
    """One phase kind as the engine drives it: its units, the next unit's worst case, the
    schedule's decision, and which units a resumed phase has already counted."""

    kind: str
    event: str
    """The event each unit is recorded as."""

    def units(self, program: HarnessProgram, state: RunState) -> Iterator[tuple[Any, HarnessProgram]]: ...

    def stalled(self, state: RunState) -> bool:
        """The phase's units have stopped producing anything (a harness search without candidates)."""
        ...

    def unit_cost(self, state: RunState) -> int:
        """The next unit's worst-case rollouts, which the unit declares when recorded."""
        ...

    def admission(self, state: RunState) -> int:
        """The rollouts the budget must still hold for the next unit to start."""
        ...

    def done(self, state: RunState) -> bool: ...

    def counted(self, signal: Any, state: RunState) -> bool:
        """Whether a unit the stream yields was replayed from the phase's own record on resume."""
        ...

    def recorded_with(self, run: RunDir, program: HarnessProgram) -> dict[str, Any]:
        """Fields the unit's event carries besides its signal."""
        ...


@dataclass(frozen=True)
class WeightDriver:
    """RFT steps, numbered across all weight phases so each phase continues the epoch walk."""

    phase: WeightPhase
    trainset: Sequence[dspy.Example]
    schedule: Schedule
    method: Method
    kind: str = WEIGHT
    event: str = WEIGHT_STEP

    def units(self, program: HarnessProgram, state: RunState) -> Iterator[tuple[WeightStep, HarnessProgram]]:
        return self.phase.steps(
            program, self.trainset, start_step=state.spend.weight_steps, parent=state.adapter_ref
        )

    def stalled(self, state: RunState) -> bool:
        return False  # every step spends its rollouts

    def unit_cost(self, state: RunState) -> int:
        return self.phase.rollouts_per_step(self.trainset)

    def admission(self, state: RunState) -> int:
        return self.unit_cost(state)

    @cached_property
    def steps_per_epoch(self) -> int:
        return self.phase.epoch(self.trainset).steps_per_epoch

    def done(self, state: RunState) -> bool:
        cycle = self.method.cycle_of(state.position)
        return self.schedule.weight_done(
            state.weight_units(), cycle=cycle, steps_per_epoch=self.steps_per_epoch
        )

    def counted(self, signal: WeightStep, state: RunState) -> bool:
        return signal.step < state.spend.weight_steps

    def recorded_with(self, run: RunDir, program: HarnessProgram) -> dict[str, Any]:
        return {}


@dataclass(frozen=True)
class HarnessDriver:
    """Meta-Harness iterations: each harness phase searches from its incoming harness (the one
    recorded when the phase opened) in its own archive under the run folder."""

    phase: HarnessPhase
    searchset: Sequence[dspy.Example]
    schedule: Schedule
    run: RunDir
    kind: str = HARNESS
    event: str = HARNESS_ITERATION

    def units(
        self, program: HarnessProgram, state: RunState
    ) -> Iterator[tuple[HarnessIteration, HarnessProgram]]:
        incoming = program.with_source(load_harness(self.run, state.incoming))
        archive = phase_archive(self.run.path / "harness", state.position)
        return self.phase.iterations(incoming, self.searchset, archive_dir=archive)

    def stalled(self, state: RunState) -> bool:
        return search_stalled(state.harness_units())

    def unit_cost(self, state: RunState) -> int:
        return self.phase.rollouts_per_iteration(self.searchset, len(state.phase_units))

    def admission(self, state: RunState) -> int:
        """The next iteration's worst case; iteration 0 (the incoming harness's scoring, part of the
        first decision) also needs the first decision's, so a phase never re-scores what it cannot
        decide on."""
        counted = len(state.phase_units)
        first_decision = self.phase.rollouts_per_iteration(self.searchset, 1) if counted == 0 else 0
        return self.unit_cost(state) + first_decision

    def done(self, state: RunState) -> bool:
        return self.schedule.harness_done(state.harness_units())

    def counted(self, signal: HarnessIteration, state: RunState) -> bool:
        return signal.iteration < len(state.phase_units)

    def recorded_with(self, run: RunDir, program: HarnessProgram) -> dict[str, Any]:
        return {"harness": store_harness(run, program.source)}
