"""What a short-form user reads while a run works: a line per event, a "still ..." line when an
evaluation or a raced decision runs long, a reason when a phase ends without a unit."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest

from optimizers.engine.progress import ProgressLines, RunSummary
from whale_dspy.progress import heartbeat, log


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.said: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.said.append(record.getMessage())


@pytest.fixture
def said() -> Iterator[list[str]]:
    """The progress logger's lines, whether or not an earlier test routed it away from the root."""
    lines, level = Lines(), log.level
    log.addHandler(lines)
    log.setLevel(logging.INFO)
    yield lines.said
    log.removeHandler(lines)
    log.setLevel(level)


def test_a_silent_run_says_what_it_is_still_doing_until_the_block_ends(said):
    with heartbeat(lambda: "racing candidates", every=0.2):
        time.sleep(0.5)
    beats = [line for line in said if line.startswith("still racing candidates")]
    assert 1 <= len(beats) <= 3
    time.sleep(0.4)  # the block has ended: no more beats
    assert len([line for line in said if line.startswith("still")]) == len(beats)


def test_a_progress_line_holds_the_heartbeat_back(said):
    with heartbeat(lambda: "training", every=0.3):
        for _ in range(6):
            log.info("weight step")
            time.sleep(0.1)
    assert said.count("weight step") == 6 and not [line for line in said if line.startswith("still")]


def events() -> list[dict]:
    step = {"step": 0, "accepted": 4, "rollouts": 16, "mean_reward": 0.25}
    incoming = {"iteration": 0, "rollouts": 4, "decision": None}
    return [
        {"kind": "run_started", "rollouts": 0},
        {"kind": "phase_started", "phase": "weight", "cycle": 0},
        {"kind": "weight_step", "signal": step},
        {"kind": "phase_ended", "phase": "weight", "cycle": 0, "reason": "schedule"},
        {"kind": "phase_started", "phase": "harness", "cycle": 0},
        {"kind": "harness_iteration", "signal": incoming},
        {"kind": "phase_ended", "phase": "harness", "cycle": 0, "reason": "schedule"},
        {"kind": "phase_started", "phase": "harness", "cycle": 1},
        {"kind": "phase_ended", "phase": "harness", "cycle": 1, "reason": "budget"},
    ]


def test_the_heartbeat_names_the_unit_under_way_and_an_empty_phase_says_why():
    progress, doing, said = ProgressLines(96, "rollouts"), [], []
    for event in events():
        said.append(progress.line(event))
        doing.append(progress.doing())
    assert doing[0] == "scoring the program on the tracked tasks"
    # numbered as the step's own line will be ("weight step 0: kept ...")
    assert doing[1].startswith("in weight step 0 of the weight phase (cycle 0)")
    assert doing[2].startswith("in weight step 1 of")
    assert doing[4] == "in the harness phase (cycle 0): scoring its incoming harness"
    assert doing[5].startswith("in harness decision 1 of the harness phase (cycle 0)")
    assert said[3] is None and said[6] is None  # phases that made a unit end silently
    assert said[8] == (
        "harness phase (cycle 1) ended without a decision: what is left of the budget does not fit "
        "one; 20 rollouts spent of 96"
    )
    assert doing[8] == "scoring the program on the tracked tasks"  # the final evaluation


def test_the_summary_counts_in_words_a_user_reads():
    summary = RunSummary(
        start=None, final=None, gain=None, weight_steps=1, decisions=1, adopted=0, run_dir="r", adapter=None
    )
    assert "1 weight step; 1 harness decision, 0 adopted" in summary.text()
    more = RunSummary(
        start=None, final=None, gain=None, weight_steps=3, decisions=2, adopted=1, run_dir="r", adapter=None
    )
    assert "3 weight steps; 2 harness decisions, 1 adopted" in more.text()
