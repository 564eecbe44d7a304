"""A harness phase that pays for its rollouts: boundaries spent once, races sized and screened, and a
search set too small to decide on handed back before a proposal is made."""

from __future__ import annotations

import itertools
import json

import pytest
from meta_harness_helpers import source, student
from test_harness_decisions import (
    SOLVES,
    SOLVES_FIFTHS,
    TOY,
    RecordingEvaluator,
    Scripted,
    distinct_tasks,
    meta,
)

from optimizers.harness.selection import slice_sizes
from optimizers.harness.sizing import PRIOR_DEGREES, Spread, expected_spread
from optimizers.harness.spending import obf_boundaries
from whale_dspy.jsonl import append_jsonl


def test_the_boundaries_are_the_published_obrien_fleming_values():
    """Four equal looks at a one-sided 0.05 (gsDesign's sfLDOF; SeqBounds.jl): 3.750 2.540 2.016 1.720."""
    assert obf_boundaries([0.25, 0.5, 0.75, 1.0], 0.05) == pytest.approx(
        [3.750, 2.540, 2.016, 1.720], abs=2e-3
    )
    assert obf_boundaries([1.0], 0.05) == pytest.approx([1.6449], abs=1e-4)  # one look: the plain bar
    looks = obf_boundaries([8 / 64, 16 / 64, 32 / 64, 1.0], 0.05 / 3)
    assert looks == pytest.approx([6.67, 4.65, 3.19, 2.13], abs=0.01)


class Several(Scripted):
    """Proposes all its codes at once (one iteration, several candidates)."""

    def propose(self, archive, k: int):
        codes, self.codes = self.codes[:k], self.codes[k:]
        return [source(code) for code in codes]


def test_only_the_best_on_the_feedback_slice_race_and_the_rest_are_recorded_as_screened(tmp_path):
    twin = TOY.replace("Answer the question.", "Answer the question, please.")  # h0's behaviour, new code
    evaluator = RecordingEvaluator()
    optimizer = meta(tmp_path, Several(twin, SOLVES_FIFTHS, SOLVES), evaluator, candidates=3, racers=2)
    (_, _), (signal, _) = itertools.islice(optimizer.iterations(student(), distinct_tasks(36)), 2)
    decision = signal.decision
    assert decision["candidates"] == ["c0002", "c0003"] and list(decision["screened"]) == ["c0001"]
    assert not [name for name in evaluator.selection_calls if name.startswith("c0001")]  # never raced
    assert decision["adopted"] == "c0003"


def test_a_search_set_too_small_to_decide_on_ends_the_phase_before_it_proposes(tmp_path, caplog):
    """3 tasks leave 2 to decide on: no lead within [0, 1] clears the rule there, so the phase spends
    nothing (not even the incoming harness's scoring) and says why; compile returns the student."""
    proposer = Scripted(SOLVES)
    optimizer = meta(tmp_path, proposer)
    signals = list(itertools.islice(optimizer.iterations(student(), distinct_tasks(3)), 3))
    assert signals == [] and proposer.codes == [SOLVES]
    assert "the harness phase ends: this race can adopt leads above +1.4" in caplog.text
    best = optimizer.compile(student(), trainset=distinct_tasks(3))
    assert best.source.code == TOY and best.report.iterations == () and best.report.rollouts == 0


def test_ten_examples_are_split_and_decided_on_tasks_the_proposer_never_saw(tmp_path):
    """A DSPy user's first try: 10 search tasks are shared between the slices, never refused."""
    assert slice_sizes(10, feedback=4, selection=32, least=1) == (1, 9)
    (_, _), (signal, program) = itertools.islice(
        meta(tmp_path, Scripted(SOLVES)).iterations(student(), distinct_tasks(10)), 2
    )
    slices = json.loads((tmp_path / "archive-selection" / "slices.json").read_text())
    assert len(slices["feedback"]) == 1 and len(slices["selection"]) == 9
    assert signal.decision["adopted"] == "c0001" and program.source.code == SOLVES


def test_the_expected_spread_pools_the_prior_with_this_runs_earlier_races(tmp_path):
    """A first race stopped after 8 tasks already informs the next race's sizing, weighed against
    the prior's PRIOR_DEGREES: each candidate at the last round it raced in, an iteration recorded
    twice (a crash between its rows) once, a resumed iteration's own row, another run's races and a
    later phase's not at all; a search of its own pools its earlier iterations."""
    two_rounds = [
        {"spreads": {"c1": 0.1, "c2": 0.3}, "bounds": {"c1": {"tasks": 8}, "c2": {"tasks": 8}}},
        {"spreads": {"c2": 0.2}, "bounds": {"c2": {"tasks": 16}}},  # c1 stopped after 8 tasks
    ]
    one_round = [{"spreads": {"c1": 0.5}, "bounds": {"c1": {"tasks": 8}}}]

    def record(archive, iteration, rounds):
        archive.mkdir(parents=True, exist_ok=True)
        row = {"iteration": iteration, "decision": {"rounds": rounds}}
        append_jsonl(archive.with_name(archive.name + "-selection") / "decisions.jsonl", row)

    archive = tmp_path / "harness" / "phase-002"
    assert expected_spread(archive, 0.33, iteration=1) == Spread(0.33, "the prior")
    record(tmp_path / "harness" / "phase-000", 1, one_round)
    record(tmp_path / "harness" / "phase-000", 1, two_rounds)  # the same iteration again: the last counts
    for elsewhere in (tmp_path / "other" / "phase-000", tmp_path / "harness" / "phase-003"):
        record(elsewhere, 1, one_round)
    record(archive, 1, one_round)
    record(archive, 2, one_round)  # the race of iteration 2, resumed: not its own evidence
    pooled = expected_spread(archive, 0.33, iteration=2)
    variance = (PRIOR_DEGREES * 0.33**2 + 7 * 0.1**2 + 15 * 0.2**2 + 7 * 0.5**2) / (PRIOR_DEGREES + 29)
    assert pooled.value == pytest.approx(variance**0.5)
    assert pooled.source == "the prior and 2 earlier races of this run (29 paired differences)"
    search = tmp_path / "search"
    record(search, 1, two_rounds)
    assert expected_spread(search, 0.33, iteration=1).source == "the prior"
    assert "1 earlier race" in expected_spread(search, 0.33, iteration=2).source  # a run of its own
