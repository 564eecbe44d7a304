"""The run's state as a fold over its events, checkpointed after every event.

Every change of state is an event appended to events.jsonl first and then
applied by `apply`; `checkpoint.json` (atomic) caches the folded state and how
many events it has seen. Resuming loads the checkpoint and applies the events
recorded after it (a crash between the two writes loses nothing and counts
nothing twice), so an interrupted run and an uninterrupted one reach the same
state through the same function. Only the engine's own event kinds are
folded; the phases may log their own detail events into the same file.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from optimizers.engine.budget import Declared, Spend
from optimizers.signals import HarnessIteration, WeightStep
from whale_dspy.errors import ConfigError
from whale_dspy.harness import HarnessSource
from whale_dspy.jsonl import atomic_write_json, atomic_write_text
from whale_dspy.records import AdapterRef
from whale_dspy.rundir import RunDir

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "checkpoint.json"
HARNESS_DIR = "harnesses"
PHASE_STARTED, PHASE_ENDED = "phase_started", "phase_ended"
WEIGHT_STEP, HARNESS_ITERATION = "weight_step", "harness_iteration"
EVALUATION, RUN_STARTED, RUN_RESUMED, RUN_FINISHED = (
    "evaluation",
    "run_started",
    "run_resumed",
    "run_finished",
)
ENGINE_EVENTS = frozenset(
    {
        PHASE_STARTED,
        PHASE_ENDED,
        WEIGHT_STEP,
        HARNESS_ITERATION,
        EVALUATION,
        RUN_STARTED,
        RUN_RESUMED,
        RUN_FINISHED,
    }
)


@dataclass(frozen=True)
class RunState:
    """Where a run stands: position in the method's phase sequence, spend, harness, adapter, curve.

    harness / incoming: {"name", "digest", "path"} of the current harness and of
    the harness the open phase started from (a resumed harness phase restarts
    its stream from it). phase_units: the open phase's signals, the schedules'
    only state.
    """

    harness: dict[str, str]
    incoming: dict[str, str]
    adapter: dict[str, Any] | None = None
    position: int = 0
    phase_open: bool = False
    phase_started_at: int = 0
    phase_units: tuple[dict[str, Any], ...] = ()
    phases: tuple[dict[str, Any], ...] = ()
    spend: Spend = field(default_factory=Spend)
    curve: tuple[dict[str, Any], ...] = ()
    next_eval: int = 0
    events: int = 0
    finished: str | None = None

    @property
    def adapter_ref(self) -> AdapterRef | None:
        return None if self.adapter is None else AdapterRef(**self.adapter)

    def weight_units(self) -> list[WeightStep]:
        return [WeightStep.from_dict(u) for u in self.phase_units]

    def harness_units(self) -> list[HarnessIteration]:
        return [HarnessIteration.from_dict(u) for u in self.phase_units]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunState:
        tuples = ("phase_units", "phases", "curve")
        # A spend recorded before LM calls were counted has no rollout_calls: unknown, not 0.
        unknown = {
            key: None
            for key in ("rollout_calls", "completion_tokens", "eval_calls", "eval_completion_tokens")
        }
        spend = Spend(**{**unknown, **data["spend"]})
        return cls(**{**data, **{k: tuple(data[k]) for k in tuples}, "spend": spend})


def _phase_ended(state: RunState, event: dict[str, Any]) -> RunState:
    summary = {
        "phase": event["phase"],
        "position": state.position,
        "cycle": event.get("cycle", 0),
        "units": len(state.phase_units),
        "start_rollouts": state.phase_started_at,
        "end_rollouts": state.spend.rollouts,
        "reason": event["reason"],
    }
    return replace(
        state, position=state.position + 1, phase_open=False, phase_units=(), phases=(*state.phases, summary)
    )


def _apply_unit(state: RunState, event: dict[str, Any]) -> RunState:
    signal = event["signal"]
    if event["kind"] == WEIGHT_STEP:
        step = WeightStep.from_dict(signal)
        adapter = signal["adapter"] or state.adapter
        return replace(
            state,
            spend=state.spend.add_weight(step, event["declared"], Declared.from_event(event)),
            adapter=adapter,
            phase_units=(*state.phase_units, signal),
        )
    iteration = HarnessIteration.from_dict(signal)
    return replace(
        state,
        spend=state.spend.add_harness(iteration, event["declared"], Declared.from_event(event)),
        harness=event["harness"],
        phase_units=(*state.phase_units, signal),
    )


def apply(state: RunState, event: dict[str, Any]) -> RunState:
    """The state after one engine event (other kinds leave it as it is)."""
    kind = event.get("kind")
    if kind not in ENGINE_EVENTS:
        return state
    state = replace(state, events=state.events + 1, spend=state.spend.add_wall(event.get("elapsed", 0.0)))
    if kind == PHASE_STARTED:
        return replace(
            state,
            phase_open=True,
            phase_units=(),
            incoming=event["harness"],
            phase_started_at=state.spend.rollouts,
        )
    if kind in (WEIGHT_STEP, HARNESS_ITERATION):
        return _apply_unit(state, event)
    if kind == PHASE_ENDED:
        return _phase_ended(state, event)
    if kind == EVALUATION:
        point = {
            k: v for k, v in event.items() if k not in ("kind", "time", "elapsed", "next_eval", "seconds")
        }
        return replace(
            state,
            curve=(*state.curve, point),
            next_eval=event["next_eval"],
            spend=state.spend.add_evaluation(
                event["eval_rollouts"], event["seconds"], event.get("eval_calls"), event.get("eval_tokens")
            ),
        )
    if kind == RUN_FINISHED:
        return replace(state, finished=event["reason"])
    return state


def fold(initial: RunState, events: list[dict[str, Any]]) -> RunState:
    for event in events:
        initial = apply(initial, event)
    return initial


def harness_ref(name: str, digest: str) -> dict[str, str]:
    """How events name a harness: its name, code digest and file inside the run directory."""
    return {"name": name, "digest": digest, "path": f"{HARNESS_DIR}/{name}-{digest}.py"}


def store_harness(run: RunDir, source: HarnessSource) -> dict[str, str]:
    """Keep a harness's code in the run directory (content-addressed) and return its reference."""
    ref = harness_ref(source.name, source.digest)
    if not (run.path / ref["path"]).exists():
        atomic_write_text(run.path / ref["path"], source.code)
    return ref


def load_harness(run: RunDir, ref: dict[str, str]) -> HarnessSource:
    return HarnessSource(name=ref["name"], code=(run.path / ref["path"]).read_text())


def engine_events(run: RunDir) -> list[dict[str, Any]]:
    return [e for e in run.events() if e.get("kind") in ENGINE_EVENTS]


def load_state(run: RunDir, initial: RunState) -> RunState:
    """The checkpointed state rolled forward over the events recorded after it."""
    events = engine_events(run)
    path = run.path / CHECKPOINT_FILE
    state = RunState.from_dict(json.loads(path.read_text())) if path.exists() else initial
    if state.events > len(events):
        log.warning("%s: checkpoint is ahead of the event log; refolding the log", run.path)
        state = initial
    return fold(state, events[state.events :])


def read_state(run: RunDir) -> RunState:
    """A recorded run's state, read only (for reports of finished or interrupted runs)."""
    student = (run.config() or {}).get("student")
    if student is None:
        raise ConfigError(f"{run.path} is not a WHALE run directory (no config.json with a student harness)")
    ref = harness_ref(student["name"], student["digest"])
    return load_state(run, RunState(harness=ref, incoming=ref))


class Recorder:
    """Appends engine events, folds them into the state and checkpoints it, in that order.

    `listener` sees every recorded event (the CLI drives its progress bars with it).
    """

    def __init__(
        self, run: RunDir, state: RunState, listener: Callable[[dict[str, Any]], None] | None = None
    ):
        self.run = run
        self.state = state
        self.listener = listener
        self._last = time.perf_counter()

    def record(self, kind: str, **fields: Any) -> RunState:
        now = time.perf_counter()
        event = self.run.log_event(kind, elapsed=now - self._last, **fields)
        self._last = now
        self.state = apply(self.state, event)
        atomic_write_json(self.run.path / CHECKPOINT_FILE, self.state.to_dict())
        if self.listener is not None:
            self.listener(event)
        return self.state


def initial_state(run: RunDir, student: HarnessSource) -> RunState:
    ref = store_harness(run, student)
    return RunState(harness=ref, incoming=ref)
