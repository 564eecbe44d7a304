"""The harness archive on disk: atomic candidates, reload, summary repair, ranking and frontier."""

from __future__ import annotations

import json

from optimizers.harness.archive import (
    CandidateCost,
    CandidateMeta,
    CandidateScores,
    HarnessArchive,
    pareto_frontier,
)
from optimizers.harness.validation import is_harness_bug
from whale_dspy.harness import HarnessSource


def meta(name: str, mean: float, turns: float = 1.0, tokens: int = 100, status: str = "valid", parent=None):
    return CandidateMeta(
        name=name,
        iteration=0,
        parent=parent,
        hypothesis=f"h{name}",
        proposer="test",
        digest=name,
        status=status,
        scores=CandidateScores(mean=mean),
        cost=CandidateCost(rollouts=1, prompt_tokens=tokens, mean_turns=turns),
    )


def add(archive: HarnessArchive, candidate: CandidateMeta, code: str = "def build(s, t): pass\n") -> None:
    archive.commit(HarnessSource(candidate.name, code, candidate.parent), candidate)


def test_commit_writes_a_complete_folder_and_reload_sees_it(tmp_path):
    archive = HarnessArchive(tmp_path)
    add(archive, meta("c0000", 0.5))
    add(archive, meta("c0001", 0.7, parent="c0000"), code="def build(s, t): return 1\n")
    assert sorted(p.name for p in (tmp_path / "c0001").iterdir()) == ["diff.patch", "harness.py", "meta.json"]
    assert "+def build(s, t): return 1" in (tmp_path / "c0001" / "diff.patch").read_text()
    assert not list(tmp_path.glob(".staging-*"))
    again = HarnessArchive(tmp_path)
    assert [m.to_dict() for m in again.candidates] == [m.to_dict() for m in archive.candidates]
    assert again.next_name() == "c0002" and again.source("c0001").parent == "c0000"


def test_reopen_drops_half_candidates_and_repairs_the_summary(tmp_path):
    archive = HarnessArchive(tmp_path)
    add(archive, meta("c0000", 0.5))
    add(archive, meta("c0001", 0.6))
    (archive.staging("c0002") / "traces.jsonl").write_text("{}\n")  # killed mid-evaluation
    lines = (tmp_path / "archive.jsonl").read_text().splitlines()
    (tmp_path / "archive.jsonl").write_text(lines[0] + "\n")  # killed before the summary line
    again = HarnessArchive(tmp_path)
    assert len(again) == 2 and not (tmp_path / ".staging-c0002").exists()
    names = [json.loads(line)["name"] for line in (tmp_path / "archive.jsonl").read_text().splitlines()]
    assert sorted(names) == ["c0000", "c0001"]


def test_a_torn_summary_line_is_repaired_before_the_next_append(tmp_path):
    """Killed mid-append, a summary ends in half a line; reopened and added to, it must stay
    readable, since a run's later phases read every earlier phase's candidates."""
    archive = HarnessArchive(tmp_path / "phase-000")
    add(archive, meta("c0000", 0.5))
    add(archive, meta("c0001", 0.6))
    summary = tmp_path / "phase-000" / "archive.jsonl"
    summary.write_text(summary.read_text()[:-20])  # c0001's line torn
    again = HarnessArchive(tmp_path / "phase-000")
    add(again, meta("c0002", 0.7))
    names = [json.loads(line)["name"] for line in summary.read_text().splitlines()]
    assert sorted(names) == ["c0000", "c0001", "c0002"]
    later = HarnessArchive(tmp_path / "phase-001")
    assert [m.name for m in later.run_candidates()] == ["c0000", "c0001", "c0002"]
    assert [m.name for m in HarnessArchive(tmp_path / "phase-000").run_candidates()] == [
        "c0000",
        "c0001",
        "c0002",
    ]  # its own, no earlier phase


def test_best_ranks_by_score_then_turns_then_tokens(tmp_path):
    archive = HarnessArchive(tmp_path)
    for candidate in [
        meta("c0000", 0.5),
        meta("c0001", 0.9, turns=3),
        meta("c0002", 0.9, turns=2, tokens=500),
        meta("c0003", 0.9, turns=2, tokens=200),
        meta("c0004", 1.0, status="invalid"),
    ]:
        add(archive, candidate)
    assert [m.name for m in archive.best(4)] == ["c0003", "c0002", "c0001", "c0000"]


def test_pareto_frontier_trades_accuracy_for_tokens(tmp_path):
    candidates = [meta("a", 0.5, tokens=100), meta("b", 0.4, tokens=200), meta("c", 0.8, tokens=300)]
    assert [m.name for m in pareto_frontier(candidates)] == ["a", "c"]
    archive = HarnessArchive(tmp_path)
    for candidate in candidates:
        add(archive, candidate)
    frontier = json.loads((tmp_path / "frontier.json").read_text())
    assert [row["name"] for row in frontier] == ["a", "c"] and frontier[0]["tokens_per_rollout"] == 100


def test_harness_bugs_are_told_apart_from_model_failures():
    assert is_harness_bug("NameError: name 'x' is not defined")
    assert is_harness_bug("HarnessError: harness c1: build() failed: KeyError: 'search'")
    assert not is_harness_bug("AdapterParseError: LM response cannot be serialized")
    assert not is_harness_bug(None)
