"""MetaHarness loop: validation, archive contents, best selection, stopping rule, resume, prompt-only."""

from __future__ import annotations

import itertools
import json
from types import SimpleNamespace

import pytest
from meta_harness_helpers import (
    BROKEN,
    GOOD,
    GOOD_TWO_CALLS,
    HANGING,
    RELEASE,
    TOY,
    ScriptedProposer,
    exact,
    lm,
    source,
    student,
    tasks,
)

from optimizers.harness.archive import HarnessArchive
from optimizers.harness.meta_harness import MetaHarness, MetaHarnessConfig, stop_reason
from optimizers.harness.validation import (
    CandidateRejected,
    check_evaluation,
    check_smoke,
    check_static,
    contained_failure,
    failure_reason,
)
from optimizers.signals import HarnessIteration
from whale_dspy.errors import ConfigError
from whale_dspy.evaluation import InProcessEvaluator


@pytest.fixture(autouse=True)
def release_hanging_threads():
    RELEASE.clear()
    yield
    RELEASE.set()


def config(**overrides) -> MetaHarnessConfig:
    base = dict(candidates=8, tasks=4, min_iterations=1, patience=1, max_iterations=3)
    base.update(timeout_s=30, threads=2)
    return MetaHarnessConfig.paper(**{**base, **overrides})


def search(tmp_path, batches, **overrides) -> tuple[MetaHarness, ScriptedProposer]:
    proposer = ScriptedProposer(batches)
    optimizer = MetaHarness(
        proposer=proposer,
        metric=exact,
        archive_dir=tmp_path / "archive",
        lm=lm(),
        config=config(**overrides),
        evaluator=InProcessEvaluator(
            threads=2, run_unvouched_in_process=True
        ),  # fast; tests/optimizers/harness/test_meta_harness_sandbox.py runs contained
    )
    return optimizer, proposer


def take(optimizer: MetaHarness, n: int) -> list[HarnessIteration]:
    return [signal for signal, _ in itertools.islice(optimizer.iterations(student(), tasks()), n)]


class CountingEvaluator(InProcessEvaluator):
    def __init__(self):
        super().__init__(threads=2, run_unvouched_in_process=True)
        self.programs: list[str] = []

    def evaluate(self, program, request):
        self.programs.append(program.source.name)
        return super().evaluate(program, request)


def test_iteration_zero_scores_the_incoming_harness_and_student_is_unchanged(tmp_path):
    optimizer, _ = search(tmp_path, [[source(GOOD)]])
    program = student()
    before = (program.source, program.bound_lm, program.adapter_name)
    signal, best = next(optimizer.iterations(program, tasks()))
    assert (signal.iteration, signal.best_name, signal.candidates) == (0, "c0000", 1)
    assert signal.best_score == pytest.approx(0.5)  # even-numbered questions only
    assert best is not program and best.source.code == TOY
    assert (program.source, program.bound_lm, program.adapter_name) == before


def test_broken_and_hanging_candidates_are_archived_with_their_stage(tmp_path):
    batch = [source(code) for code in BROKEN.values()] + [source(HANGING), source(GOOD)]
    optimizer, _ = search(tmp_path, [batch], timeout_s=10)  # room for the good one on a loaded machine
    signals = take(optimizer, 2)
    archive = HarnessArchive(tmp_path / "archive")
    stages = {m.name: m.stage for m in archive.candidates if not m.valid}
    expected = ["parse", "parse", "imports", "build", "smoke", "parse", "timeout"]
    assert list(stages.values()) == expected
    assert all(m.scores.mean == 0 for m in archive.candidates if not m.valid)
    assert signals[1].candidates == 8 and signals[1].valid == 1
    assert signals[1].best_score == 1.0 and signals[1].best_name == "c0008"
    assert "undefined_name" in archive.get("c0005").error
    reasons = [m.reason for m in archive.candidates if not m.valid]
    assert reasons == [None, None, "forbidden import", "crash", "crash", None, "timeout"]


def test_static_checks_use_the_sandbox_allowlist_without_executing():
    with pytest.raises(CandidateRejected) as rejected:
        check_static(source(TOY.replace("import dspy\n", "import dspy\nimport os\n", 1)))
    assert (rejected.value.stage, rejected.value.reason) == ("imports", "forbidden import")
    with pytest.raises(CandidateRejected) as rejected:
        check_static(source(TOY.replace('INSTRUCTIONS = "', 'INSTRUCTIONS = eval("1") or "')))
    assert (rejected.value.stage, rejected.value.reason) == ("calls", "forbidden call")
    with pytest.raises(CandidateRejected, match="forbidden import"):
        check_static(source(TOY), allowed={"__future__"})
    check_static(source(GOOD))


@pytest.mark.parametrize(
    ("error", "reason", "contained"),
    [
        ("SandboxTimeout: a task ran past its 4 s limit", "timeout", True),
        ("SandboxMemoryError: ...", "memory", True),
        ("MemoryError: ", "memory", True),
        ("ForbiddenImport: module 'os'", "forbidden import", True),
        ("ForbiddenCall: open", "forbidden call", True),
        ("OutputLimitExceeded: too much", "output limit", True),
        ("SandboxCrash: the sandbox exited with code -9", "crash", True),
        ("RuntimeError: boom", "crash", False),
        ("HarnessError: harness c1: build() failed: KeyError: 'x'", "crash", False),
        ("AdapterParseError: the LM's reply has no answer field", None, False),  # the model's, not a bug
        (None, None, False),
    ],
)
def test_rollout_errors_map_to_archive_reasons(error, reason, contained):
    assert failure_reason(error) == reason
    assert (contained_failure(error) is not None) == contained
    rollouts = [SimpleNamespace(task_id="t0", error=error)]
    if reason:
        with pytest.raises(CandidateRejected) as rejected:
            check_smoke(rollouts)
        assert rejected.value.reason == reason
        assert rejected.value.stage == ("build" if "build() failed" in error else "smoke")
    else:
        check_smoke(rollouts)
    if contained:
        with pytest.raises(CandidateRejected) as rejected:
            check_evaluation(rollouts)
        assert (rejected.value.stage, rejected.value.reason) == ("evaluation", reason)
    else:
        check_evaluation(rollouts)  # a harness bug on some tasks only costs those tasks


def test_candidate_folder_has_source_meta_traces_and_diff(tmp_path):
    optimizer, _ = search(tmp_path, [[source(GOOD, hypothesis="answer every question")]])
    take(optimizer, 2)
    folder = tmp_path / "archive" / "c0001"
    assert (folder / "harness.py").read_text() == GOOD
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["parent"] == "c0000" and meta["hypothesis"] == "answer every question"
    assert meta["status"] == "valid" and meta["scores"]["mean"] == 1.0
    assert meta["scores"]["per_task"] == {f"t{i}": 1.0 for i in range(4)}
    assert meta["cost"]["lm_calls"] == meta["cost"]["rollouts"] == 6 and meta["cost"]["prompt_tokens"] > 0
    traces = (folder / "traces.jsonl").read_text().splitlines()
    assert len(traces) == 4 and json.loads(traces[0])["lm_calls"][0]["messages"]
    assert '-        return dspy.Prediction(answer=answer if question[-1] in "02468" else "no idea")' in (
        (folder / "diff.patch").read_text()
    )
    summary = (tmp_path / "archive" / "archive.jsonl").read_text().splitlines()
    assert [json.loads(line)["name"] for line in summary] == ["c0000", "c0001"]
    frontier = json.loads((tmp_path / "archive" / "frontier.json").read_text())
    assert frontier[-1]["name"] == "c0001"


def test_ties_go_to_fewer_turns_and_duplicates_are_not_reevaluated(tmp_path):
    evaluator = CountingEvaluator()
    optimizer, _ = search(tmp_path, [[source(GOOD_TWO_CALLS), source(GOOD), source(GOOD)]])
    optimizer.evaluator = evaluator
    signals = take(optimizer, 2)
    archive = HarnessArchive(tmp_path / "archive")
    assert archive.get("c0001").cost.mean_turns == 2 and archive.get("c0002").cost.mean_turns == 1
    two, one = (archive.get(name).cost for name in ("c0001", "c0002"))
    assert (two.lm_calls, one.lm_calls) == (2 * two.rollouts, one.rollouts)  # smoke rollouts too
    assert signals[1].lm_calls == two.lm_calls + one.lm_calls  # the duplicate cost none
    assert signals[1].best_name == "c0002"
    assert archive.get("c0003").status == "duplicate" and "c0002" in archive.get("c0003").error
    assert "c0003" not in evaluator.programs


def test_compile_stops_by_patience_and_reports(tmp_path):
    batches = [[source(GOOD)], [source(GOOD_TWO_CALLS)], [source(BROKEN["syntax"])], [source(TOY + "\n")]]
    optimizer, proposer = search(tmp_path, batches, min_iterations=2, patience=1, max_iterations=10)
    program = student()
    best = optimizer.compile(program, trainset=tasks())
    report = best.report
    assert report is optimizer.report
    assert [s.iteration for s in report.iterations] == [0, 1, 2]
    assert report.stopped == "patience" and proposer.calls == 2
    assert report.best.name == "c0001" and best.source.code == GOOD
    assert report.h0_score == pytest.approx(0.5)
    assert report.rollouts == sum(s.rollouts for s in report.iterations) > 0
    assert report.proposer_calls == 2 and report.proposer_tokens == 20
    assert program.source.code == TOY


def test_stop_reason_rule():
    def history(*best_scores):
        return [
            HarnessIteration(i, "c", score, score, 1, 1, 1, 0, 0, 0.0) for i, score in enumerate(best_scores)
        ]

    cfg = MetaHarnessConfig(min_iterations=5, patience=2, max_iterations=15)
    assert stop_reason(history(0.1, 0.1, 0.1, 0.1), cfg) is None  # before min_iterations
    assert stop_reason(history(0.1, 0.2, 0.3, 0.3, 0.3, 0.3), cfg) == "patience"
    assert stop_reason(history(0.1, 0.2, 0.3, 0.3, 0.3, 0.4), cfg) is None
    assert stop_reason(history(*[i / 20 for i in range(16)]), cfg) == "max_iterations"


def test_a_failing_proposer_gives_an_empty_iteration(tmp_path):
    optimizer, _ = search(tmp_path, [RuntimeError("model timed out"), [source(GOOD)]])
    signals = take(optimizer, 3)
    assert (signals[1].candidates, signals[1].rollouts) == (0, 0)
    assert signals[2].best_score == 1.0
    records = HarnessArchive(tmp_path / "archive").iteration_records()
    assert "model timed out" in records[1]["proposer_errors"][0]


def test_resume_replays_iterations_without_reevaluating(tmp_path):
    first, _ = search(tmp_path, [[source(GOOD_TWO_CALLS)], [source(GOOD)]], max_iterations=2, patience=5)
    done = first.compile(student(), trainset=tasks()).report.iterations
    (tmp_path / "archive" / ".staging-c0003").mkdir()  # a crash mid-candidate
    evaluator = CountingEvaluator()
    new = GOOD.replace("Answer the", "Reply to the")
    second, proposer = search(tmp_path, [[source(new)]], max_iterations=3, patience=5)
    second.evaluator = evaluator
    report = second.compile(student(), trainset=tasks()).report
    assert [s.to_dict() for s in report.iterations[:3]] == [s.to_dict() for s in done]
    assert evaluator.programs == ["c0003", "c0003"]  # smoke + evaluation of the new one only
    assert proposer.calls == 1 and not (tmp_path / "archive" / ".staging-c0003").exists()
    assert len(HarnessArchive(tmp_path / "archive")) == 4


def test_resume_refuses_another_incoming_harness(tmp_path):
    first, _ = search(tmp_path, [])
    next(first.iterations(student(), tasks()))
    second, _ = search(tmp_path, [])
    with pytest.raises(ConfigError, match="another harness"):
        next(second.iterations(student(GOOD), tasks()))


def test_resume_refuses_other_sampling(tmp_path):
    """Scores drawn at one completion budget must not be ranked or raced against another's."""
    first, _ = search(tmp_path, [])
    next(first.iterations(student(), tasks()))
    assert HarnessArchive(tmp_path / "archive").sampling() == {"temperature": 0.0, "max_tokens": 1000}
    second, _ = search(tmp_path, [])
    second.lm = lm().copy(max_tokens=64)
    with pytest.raises(ConfigError, match="sampled at .*'max_tokens': 1000.*this search samples at .*64"):
        next(second.iterations(student(), tasks()))
    third, _ = search(tmp_path, [])
    next(third.iterations(student(), tasks()))  # the same sampling resumes


def test_a_first_start_without_a_candidate_may_resume_at_other_sampling(tmp_path):
    """A search that failed before scoring anything (a server down, say) holds no score to mix."""
    (tmp_path / "archive").mkdir()
    HarnessArchive(tmp_path / "archive").record_sampling({"max_tokens": 64})
    first, _ = search(tmp_path, [])
    next(first.iterations(student(), tasks()))
    assert HarnessArchive(tmp_path / "archive").sampling()["max_tokens"] == 1000


def test_a_torn_last_row_of_an_archives_logs_is_dropped_on_resume(tmp_path):
    """Killed mid-append, an iteration or decision log ends in half a row; the resumed iteration's
    row must not follow it, or every later read of the log raises."""
    first, _ = search(tmp_path, [[source(GOOD)]], max_iterations=1, patience=5)
    take(first, 2)
    logs = [tmp_path / "archive" / "iterations.jsonl", tmp_path / "archive-selection" / "decisions.jsonl"]
    for log in logs:
        *kept, last = log.read_text().splitlines(keepends=True)
        log.write_text("".join(kept) + last[:30])
    second, _ = search(tmp_path, [[source(GOOD)]], max_iterations=1, patience=5)
    take(second, 2)
    for log in logs:
        assert [json.loads(line)["iteration"] for line in log.read_text().splitlines()][-1] == 1


def test_prompt_only_rejects_code_changes(tmp_path):
    prompt_edit = TOY.replace('"Answer the question."', '"Answer with one number."').replace(
        "Toy harness", "Terse harness"
    )
    optimizer, _ = search(tmp_path, [[source(GOOD), source(prompt_edit)]], prompt_only=True)
    take(optimizer, 2)
    archive = HarnessArchive(tmp_path / "archive")
    assert archive.get("c0001").stage == "prompt_only" and "prompt text" in archive.get("c0001").error
    assert archive.get("c0002").valid


@pytest.mark.parametrize(
    "overrides",
    [
        dict(candidates=0),
        dict(min_iterations=9, max_iterations=3),
        dict(smoke_tasks=5, tasks=4),
        dict(patience=-1),
    ],
)
def test_config_is_validated(overrides):
    with pytest.raises(ConfigError):
        MetaHarnessConfig(**overrides)


def test_inputs_are_validated(tmp_path):
    optimizer, _ = search(tmp_path, [])
    with pytest.raises(ConfigError, match="a student is a dspy.Module"):
        next(optimizer.iterations(object(), tasks()))
    with pytest.raises(ConfigError, match="smoke_tasks"):
        next(optimizer.iterations(student(), tasks(1)))


def test_a_rejected_candidate_is_charged_the_lm_calls_it_made_before_failing(tmp_path):
    calls_then_crashes = GOOD.replace(
        "answer = self.predict(question=question).answer",
        "self.predict(question=question)\n        raise RuntimeError('after one call')",
    )
    optimizer, _ = search(tmp_path, [[source(calls_then_crashes)]], smoke_tasks=2)
    signals = take(optimizer, 2)
    rejected = HarnessArchive(tmp_path / "archive").get("c0001")
    assert (rejected.status, rejected.stage) == ("invalid", "smoke")
    assert (rejected.cost.rollouts, rejected.cost.lm_calls) == (2, 2)  # one call in each smoke rollout
    assert signals[1].lm_calls == 2 and signals[1].rollouts == 2
