"""Harness decisions in the MetaHarness loop: made on tasks no proposer saw, raced, recorded, resumable."""

from __future__ import annotations

import itertools
import json

import dspy
import pytest
from meta_harness_helpers import TOY, exact, lm, source, student

from optimizers.harness.archive import LABELS_FILE
from optimizers.harness.meta_harness import MetaHarness, MetaHarnessConfig
from optimizers.harness.selection import SLICES_FILE, selection_folder
from whale_dspy.evaluation import InProcessEvaluator

# Every task has its own answer; the LM always says "4", so h0 (TOY answering what the LM says, on
# even-numbered questions) solves nothing and only a harness's own code can.
SOLVES = TOY.replace(
    'answer if question[-1] in "02468" else "no idea"', '"a" + question.split("t")[-1].rstrip("?")'
)
SOLVES_FIFTHS = SOLVES.replace(
    '"a" + question.split("t")[-1].rstrip("?")',
    '"a" + question.split("t")[-1].rstrip("?") if int(question.split("t")[-1].rstrip("?")) % 5 == 0 else "?"',
)


def distinct_tasks(n: int) -> list[dspy.Example]:
    return [
        dspy.Example(task_id=f"t{i}", question=f"What is t{i}?", answer=f"a{i}").with_inputs("question")
        for i in range(n)
    ]


class LookupProposer:
    """Writes a harness that answers from a table of every gold answer the archive showed it."""

    label = "lookup"

    def usage(self):
        from whale_dspy.records import ProposerUsage

        return ProposerUsage(0, 0)

    def propose(self, archive, k: int):
        table = {f"What is {task}?": gold["answer"] for task, gold in archive.labels().items()}
        code = TOY.replace(
            'answer if question[-1] in "02468" else "no idea"', f"{table!r}.get(question, answer)"
        )
        return [source(code, "memorise the answers shown")]


class Scripted:
    label = "scripted"

    def __init__(self, *codes: str):
        self.codes = list(codes)

    def usage(self):
        from whale_dspy.records import ProposerUsage

        return ProposerUsage(0, 0)

    def propose(self, archive, k: int):
        return [source(self.codes.pop(0))] if self.codes else []


class Crash(BaseException):
    """A kill: nothing of the search catches it."""


class RecordingEvaluator(InProcessEvaluator):
    """In process (toy harnesses), recording each selection-slice evaluation; may crash at the Nth."""

    def __init__(self, crash_at: int | None = None):
        super().__init__(threads=2, run_unvouched_in_process=True)
        self.selection_calls: list[str] = []
        self.crash_at = crash_at

    def evaluate(self, program, request):
        if "-selection" in str(request.trace_path):
            if self.crash_at is not None and len(self.selection_calls) == self.crash_at:
                raise Crash
            self.selection_calls.append(request.trace_path.name)
        return super().evaluate(program, request)


def meta(tmp_path, proposer, evaluator=None, **fields) -> MetaHarness:
    config = dict(candidates=1, tasks=4, selection_tasks=32, smoke_tasks=1, threads=2, timeout_s=30)
    return MetaHarness(
        proposer=proposer,
        metric=exact,
        archive_dir=tmp_path / "archive",
        lm=lm(),
        config=MetaHarnessConfig(**{**config, **fields}),
        evaluator=evaluator or RecordingEvaluator(),
    )


def run(optimizer: MetaHarness, iterations: int, n_tasks: int = 36):
    return list(itertools.islice(optimizer.iterations(student(), distinct_tasks(n_tasks)), iterations))


def test_a_proposer_that_memorises_the_answers_it_was_shown_is_not_adopted(tmp_path):
    (_, _), (signal, program) = run(meta(tmp_path, LookupProposer()), 2)
    candidate = signal.decision["candidates"][0]
    assert signal.decision["adopted"] is None and program.source.code == TOY
    assert json.loads((tmp_path / "archive" / candidate / "meta.json").read_text())["scores"]["mean"] == 1.0


def test_under_the_paper_s_rule_the_memorising_proposer_is_adopted(tmp_path):
    """What the selection slice guards against: argmax on the tasks the proposer was shown."""
    optimizer = meta(tmp_path, LookupProposer(), selection_tasks=0, acceptance="argmax")
    (_, _), (signal, program) = run(optimizer, 2, n_tasks=4)
    assert signal.decision["adopted"] == signal.best_name != "c0000"
    assert "memorise" in program.source.hypothesis or "get(question" in program.source.code


def test_proposers_see_the_feedback_slice_only_and_the_slices_are_recorded(tmp_path):
    run(meta(tmp_path, LookupProposer()), 2)
    slices = json.loads((selection_folder(tmp_path / "archive") / SLICES_FILE).read_text())
    labels = json.loads((tmp_path / "archive" / LABELS_FILE).read_text())
    assert set(labels) == set(slices["feedback"]) and len(slices["feedback"]) == 4
    assert not set(slices["feedback"]) & set(slices["selection"]) and len(slices["selection"]) == 32
    shown = "".join(p.read_text() for p in (tmp_path / "archive").rglob("*") if p.is_file())
    assert not [task for task in slices["selection"] if f'"{task}"' in shown.replace("'", '"')]


def test_a_genuinely_better_candidate_is_adopted_and_its_decision_recorded(tmp_path):
    (_, _), (signal, program) = run(meta(tmp_path, Scripted(SOLVES)), 2)
    decision = signal.decision
    assert decision["adopted"] == signal.best_name == "c0001" and program.source.code == SOLVES
    assert decision["gain"]["low"] > 0 and decision["gain"]["tasks"] == 8  # cleared on the first round
    assert decision["race"]["rollouts"] == 2 * 8  # incumbent and candidate, 8 tasks each
    assert signal.rollouts == 1 + 4 + 16 and signal.adopted  # smoke, feedback, race
    record = json.loads((tmp_path / "archive" / "iterations.jsonl").read_text().splitlines()[1])
    assert record["decision"] == {
        k: decision[k] for k in ("rule", "incumbent", "adopted", "reason", "candidates")
    }
    whole = (selection_folder(tmp_path / "archive") / "decisions.jsonl").read_text().splitlines()
    assert json.loads(whole[0])["decision"] == decision  # the whole decision lives beside the archive


def test_an_incumbent_that_breaks_in_the_race_adopts_nothing(tmp_path):
    """Its zeros would read as a gain for every candidate."""
    breaks = RecordingEvaluator()
    original = breaks.evaluate

    def evaluate(program, request):
        if "-selection" in str(request.trace_path) and program.source.name != "c0001":
            raise RuntimeError("the server went away")
        return original(program, request)

    breaks.evaluate = evaluate
    (_, _), (signal, program) = run(meta(tmp_path, Scripted(SOLVES), breaks), 2)
    assert signal.decision["adopted"] is None and "incumbent failed" in signal.decision["reason"]


def test_each_race_scores_the_incumbent_afresh(tmp_path):
    run(meta(tmp_path, Scripted(TOY.replace("no idea", "none"), TOY.replace("no idea", "nil"))), 3)
    folder = selection_folder(tmp_path / "archive")
    first, second = (sorted((folder / f"race-{i:03d}").glob("c0000-*.jsonl")) for i in (1, 2))
    assert first and second
    ids = [
        {json.loads(line)["rollout_id"] for line in f[0].read_text().splitlines()} for f in (first, second)
    ]
    assert ids[0] and not ids[0] & ids[1]  # new draws, not the draw that made it the incumbent


def test_resume_after_a_crash_mid_race_neither_repeats_nor_loses_a_decision(tmp_path):
    whole = RecordingEvaluator()
    (_, _), (expected, _) = run(meta(tmp_path / "whole", Scripted(SOLVES_FIFTHS), whole), 2)
    assert len(expected.decision["rounds"]) >= 2  # the race went past its first round

    crashing = RecordingEvaluator(crash_at=3)
    with pytest.raises(Crash):
        run(meta(tmp_path / "cut", Scripted(SOLVES_FIFTHS), crashing), 2)
    resumed = RecordingEvaluator()
    (_, _), (signal, _) = run(meta(tmp_path / "cut", Scripted(), resumed), 2)
    assert not set(crashing.selection_calls) & set(resumed.selection_calls)  # nothing measured twice
    assert sorted(crashing.selection_calls + resumed.selection_calls) == sorted(whole.selection_calls)
    assert signal.decision == expected.decision
    assert signal.rollouts == expected.rollouts and signal.lm_calls == expected.lm_calls
    records = (tmp_path / "cut" / "archive" / "iterations.jsonl").read_text().splitlines()
    assert [json.loads(r)["iteration"] for r in records] == [0, 1]


class Counting(Scripted):
    """A scripted proposer that counts what it was asked (its usage: one call an answer)."""

    def __init__(self, *codes: str):
        super().__init__(*codes)
        self.asked = 0

    def usage(self):
        from whale_dspy.records import ProposerUsage

        return ProposerUsage(self.asked, 10 * self.asked)

    def propose(self, archive, k: int):
        self.asked += 1
        return super().propose(archive, k)


def test_a_resumed_iteration_replays_a_short_proposal_and_never_re_asks(tmp_path):
    """The proposer answered one candidate of the two asked for; a crash mid-race must not turn
    the resumed iteration into a second question (and a race with another candidate)."""
    (_, _), (expected, _) = run(meta(tmp_path / "whole", Counting(SOLVES_FIFTHS), candidates=2), 2)
    assert expected.decision["candidates"] == ["c0001"] and expected.proposer_calls == 1

    with pytest.raises(Crash):
        run(meta(tmp_path / "cut", Counting(SOLVES_FIFTHS), RecordingEvaluator(crash_at=3), candidates=2), 2)
    asked_again = Counting(SOLVES)  # would add a second, better candidate if it were asked
    (_, _), (signal, _) = run(meta(tmp_path / "cut", asked_again, candidates=2), 2)
    assert asked_again.asked == 0
    assert signal.decision == expected.decision and signal.candidates == 1
    assert (signal.proposer_calls, signal.proposer_tokens) == (1, 10)  # what answering cost, once


class CutAfterSpending(RecordingEvaluator):
    """Crashes at the Nth selection chunk after its rollouts were spent, before its record is written."""

    def __init__(self, cut_at: int):
        super().__init__()
        self.cut_at, self.cut_rollouts = cut_at, 0

    def evaluate(self, program, request):
        result = super().evaluate(program, request)
        if "-selection" in str(request.trace_path) and len(self.selection_calls) == self.cut_at + 1:
            self.cut_rollouts = len(result[1])
            raise Crash
        return result


def test_the_rollouts_of_a_race_chunk_a_crash_cut_short_are_charged_once(tmp_path):
    """Cut twice in one race: each cut attempt's rollouts are charged with the chunk measured again,
    however often the iteration is resumed."""
    (_, _), (expected, _) = run(meta(tmp_path / "whole", Scripted(SOLVES_FIFTHS)), 2)
    cuts = []
    for cut_at, proposer in ((2, Scripted(SOLVES_FIFTHS)), (1, Scripted())):
        evaluator = CutAfterSpending(cut_at)
        with pytest.raises(Crash):
            run(meta(tmp_path / "cut", proposer, evaluator), 2)
        cuts.append(evaluator.cut_rollouts)
    (_, _), (signal, _) = run(meta(tmp_path / "cut", Scripted()), 2)
    assert cuts[0] > 0 and cuts[1] > 0
    assert signal.decision["adopted"] == expected.decision["adopted"]
    assert signal.decision["race"]["interrupted"] == sum(cuts)
    assert signal.decision["race"]["rollouts"] == expected.decision["race"]["rollouts"] + sum(cuts)
    assert signal.rollouts == expected.rollouts + sum(cuts)
    assert signal.lm_calls == expected.lm_calls + sum(cuts)  # one LM call a toy rollout
