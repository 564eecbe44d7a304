"""The typed report of a WHALE run, derived from its folded state (so `whale report` can rebuild it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from optimizers.engine.budget import Spend
from optimizers.engine.checkpoint import RunState, engine_events, read_state
from optimizers.engine.progress import RunSummary, run_summary
from optimizers.engine.schedules import schedule_from_dict
from whale_dspy.rundir import RunDir


@dataclass(frozen=True)
class CurvePoint:
    """One held-out test evaluation: mean@k (with its bootstrap CI) after `rollouts` rollouts, and
    each task's k scores, so that two methods can be compared task by task."""

    rollouts: int
    mean_at_k: float
    ci_low: float
    ci_high: float
    pass_at_k: float
    k: int
    tasks: int
    harness: str
    adapter: str | None
    per_task: dict[str, list[float]] | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CurvePoint:
        return cls(**{name: data.get(name) for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class PhaseSummary:
    phase: str
    position: int
    cycle: int
    units: int
    start_rollouts: int
    end_rollouts: int
    reason: str


@dataclass(frozen=True)
class WhaleReport:
    """What a run did: phases, spend, the test curve, best and final mean@k, final harness and adapter.

    best: the checkpoint with the highest test mean@k (the paper's "best mean@8");
    final: the last checkpoint, taken after the budget was spent.
    """

    method: str
    schedule: str
    budget: int
    budget_unit: str
    run_dir: str
    finished: str | None
    spend: Spend
    phases: tuple[PhaseSummary, ...]
    curve: tuple[CurvePoint, ...]
    best: CurvePoint | None
    final: CurvePoint | None
    harness: dict[str, str]
    adapter: dict[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> RunSummary:
        """Whether the program got better: the start's and the final checkpoint's test scores with
        their paired interval over tasks, what the phases did, the run folder and the adapter
        (`print(report.summary().text())`)."""
        events = engine_events(RunDir(Path(self.run_dir)))
        adapter = (self.adapter or {}).get("name")
        return run_summary(self.curve, events, self.run_dir, adapter)


def report_from_state(state: RunState, config: dict[str, Any], run_dir: Path) -> WhaleReport:
    curve = tuple(CurvePoint.from_dict(point) for point in state.curve)
    return WhaleReport(
        method=config["method"]["name"],
        schedule=schedule_from_dict(config["schedule"]).spec(),
        budget=config["budget"],
        budget_unit=config.get("budget_unit", "rollouts"),
        run_dir=str(run_dir),
        finished=state.finished,
        spend=state.spend,
        phases=tuple(PhaseSummary(**summary) for summary in state.phases),
        curve=curve,
        best=max(curve, key=lambda p: p.mean_at_k, default=None),
        final=curve[-1] if curve else None,
        harness=state.harness,
        adapter=state.adapter,
    )


def load_report(run_dir: str | Path) -> WhaleReport:
    """Rebuild a run's report from its config, checkpoint and events (finished or not)."""
    run = RunDir(Path(run_dir))
    state = read_state(run)
    return report_from_state(state, run.config(), run.path)
