"""What a Python user of the short form sees: a line per weight step, harness decision and checkpoint,
and a closing summary that says whether the program got better.

The CLI owns its terminal (whale_cli.run draws a bar); the short form's lines go to
whale_dspy.progress, which the short form makes visible.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from whale_dspy.progress import TRUNCATIONS, log
from whale_dspy.stats import paired_gain


class ProgressLines:
    """An engine listener (`on_event`): one line per event a user follows a run by."""

    def __init__(self, budget: int, unit: str):
        self.budget, self.unit = budget, unit
        self.rollouts = 0
        """Rollouts spent so far (events carry each unit's own)."""
        self.phase: str | None = None
        """The open phase ("weight phase (cycle 1)"), None before the first and after the last."""
        self.units = 0
        """Units (weight steps, harness iterations) the open phase has made."""
        self.next_step: int | None = 0
        """The number the next weight step's line will carry (unknown on resume until a step)."""

    def __call__(self, event: dict[str, Any]) -> None:
        line = self.line(event)
        if line:
            log.info(line)

    def doing(self) -> str:
        """What the run is busy with between two events, for the heartbeat's "still ..." line."""
        if self.phase is None:
            return "scoring the program on the tracked tasks"
        if self.phase.startswith("weight"):
            step = "a weight step" if self.next_step is None else f"weight step {self.next_step}"
            return f"in {step} of the {self.phase}: sampling rollouts and training"
        if self.units == 0:
            return f"in the {self.phase}: scoring its incoming harness"
        return f"in harness decision {self.units} of the {self.phase}: proposing and racing candidates"

    def line(self, event: dict[str, Any]) -> str | None:
        kind = event["kind"]
        if kind in ("run_started", "run_resumed"):
            self.rollouts = event.get("rollouts", 0)
            self.next_step = 0 if kind == "run_started" else None
        elif kind in ("weight_step", "harness_iteration"):
            self.rollouts += event["signal"]["rollouts"]
            self.units += 1
        spent = f"{self.rollouts} rollouts spent" + (f" of {self.budget}" if self.unit == "rollouts" else "")
        if kind in ("run_started", "run_resumed"):
            return f"{kind.replace('_', ' ')} at {spent}"
        if kind == "phase_started":
            self.phase, self.units = f"{event['phase']} phase (cycle {event['cycle']})", 0
            return f"{self.phase} at {spent}"
        if kind == "phase_ended":
            phase, self.phase = self.phase, None
            if self.units:
                return None
            why = WHY_EMPTY.get(event["reason"], event["reason"])
            return f"{phase} ended without a {UNIT[event['phase']]}: {why}; {spent}"
        if kind == "weight_step":
            step = event["signal"]
            self.next_step = step["step"] + 1
            return (
                f"weight step {step['step']}: kept {step['accepted']} of {step['rollouts']} rollouts "
                f"(mean reward {step['mean_reward']:.3f}); {spent}"
            )
        if kind == "harness_iteration":
            return _harness_line(event["signal"], spent)
        if kind == "evaluation":
            return (
                f"test mean@{event['k']} at {event['rollouts']} rollouts: {event['mean_at_k']:.3f} "
                f"[{event['ci_low']:.3f}, {event['ci_high']:.3f}] on {event['tasks']} tasks"
            )
        return None


UNIT = {"weight": "step", "harness": "decision"}
WHY_EMPTY = {
    "budget": "what is left of the budget does not fit one",
    "stage share": "what is left of this phase's share of the budget does not fit one",
    "no candidates": "the proposer has nothing new to offer",
    "exhausted": "it has nothing to decide",
}
"""Why a phase can end before its first unit, as a user reads it (the run's records keep the key)."""


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _harness_line(signal: dict[str, Any], spent: str) -> str:
    decision = signal.get("decision")
    if decision is None:
        return f"harness phase scored its incoming harness ({signal['rollouts']} rollouts); {spent}"
    done = f"adopted {decision['adopted']}" if decision["adopted"] else f"kept {decision['incumbent']}"
    return f"harness decision {signal['iteration']}: {done} ({decision['reason']}); {spent}"


@dataclass(frozen=True)
class RunSummary:
    """The start's and the final program's test scores, their paired gain with its interval (over
    tasks), and what each phase did."""

    start: float | None
    final: float | None
    gain: dict[str, Any] | None
    weight_steps: int
    decisions: int
    adopted: int
    run_dir: str
    adapter: str | None
    split: str = "test"
    """What the start and the end were scored on (the short form's default: the valset)."""

    def text(self) -> str:
        lines = []
        if self.start is not None and self.final is not None:
            read = (
                "the valset, which the harness search also decided on" if self.split == "val" else self.split
            )
            lines.append(f"score on {read}: {self.start:.3f} at the start -> {self.final:.3f} at the end")
        if self.gain is not None:
            g = self.gain
            verdict = (
                "better beyond noise"
                if g["low"] > 0
                else "worse beyond noise"
                if g["high"] < 0
                else "within noise"
            )
            lines.append(
                f"paired gain {g['gain']:+.3f}, 95% interval over {g['tasks']} tasks "
                f"[{g['low']:+.3f}, {g['high']:+.3f}]: {verdict}"
            )
        elif self.start is None:
            lines.append("no test score: pass track= or valset= to measure the start and the end")
        lines.append(
            f"{plural(self.weight_steps, 'weight step')}; "
            f"{plural(self.decisions, 'harness decision')}, {self.adopted} adopted"
        )
        lines.append(f"run folder {self.run_dir}; adapter {self.adapter or 'none (base weights)'}")
        if TRUNCATIONS.count:
            lines.append(
                f"{TRUNCATIONS.count} LM responses were cut at max_tokens: if answers look cut off, "
                "bind the program an LM with a larger max_tokens"
            )
        return "\n".join(lines)


def run_summary(
    curve: Sequence[Any], events: Sequence[dict[str, Any]], run_dir: str, adapter: str | None
) -> RunSummary:
    """The summary of a run from its test curve (CurvePoints) and its events."""
    first, last = (curve[0], curve[-1]) if curve else (None, None)
    gain = None
    if first is not None and last is not first and first.per_task and last.per_task:
        gain = paired_gain(first.per_task, last.per_task).to_dict()
    signals = [e["signal"] for e in events if e["kind"] == "harness_iteration"]
    decisions = [s["decision"] for s in signals if s.get("decision")]
    return RunSummary(
        start=first.mean_at_k if first else None,
        final=last.mean_at_k if last else None,
        gain=gain,
        weight_steps=sum(1 for e in events if e["kind"] == "weight_step"),
        decisions=len(decisions),
        adopted=sum(1 for d in decisions if d.get("adopted")),
        run_dir=run_dir,
        adapter=adapter,
        split=next((e.get("split", "test") for e in events if e["kind"] == "evaluation"), "test"),
    )


__all__ = ["ProgressLines", "RunSummary", "run_summary"]
