"""Model-written harness code runs only in the sandbox, in every phase and command.

The cheats of `cheat_domain` reach the gold answer (or patch the metric) through the tool object.
In process two of them work; wherever they run by default (a weight step's sampling, a WHALE
run's checkpoints, `whale eval --harness`, a run's test evaluation as `whale transfer` and study
tests do it) they must score 0 and train nothing, with the static check and without it.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import cheat_domain as cd
import dspy
import pytest
from rft_helpers import TWO_CALLS, reply
from sandbox_helpers import ADVERSARIAL_DIR, TEST_LIMITS, StructuredScriptedLM

from optimizers import RejectionSamplingFinetune, RFTConfig
from whale_dspy.evaluation import EvalRequest, InProcessEvaluator, evaluate
from whale_dspy.harness import HarnessProgram, HarnessSource, UntrustedHarness
from whale_dspy.jsonl import read_jsonl
from whale_dspy.rundir import RunDir
from whale_dspy.sandbox import ContainedEvaluator, SandboxedEvaluator, check_imports
from whale_dspy.testing.fake_backend import FakeBackend
from whale_dspy.testing.fake_trainer import FakeTrainer
from whale_dspy.testing.scripted_lm import ScriptedLM

GUESS = {"": {"answer": "guess"}}


def cheat(route: str) -> HarnessProgram:
    """A cheat as the search would hand it over: model-written, so not vouched for."""
    return HarnessProgram(HarnessSource(f"cheat_{route}", cd.CHEATS[route]), cd.QA, cd.tools_for)


def rft(
    tmp_path: Path, evaluator=None, backend: FakeBackend | None = None, **config
) -> tuple[RejectionSamplingFinetune, FakeTrainer]:
    trainer = FakeTrainer()
    settings = {"batch_size": 2, "k": 2, "threads": 2, "run_tag": "01", "steps": 1, **config}
    optimizer = RejectionSamplingFinetune(
        backend=backend or FakeBackend(ScriptedLM(GUESS)),
        trainer=trainer,
        metric=cd.exact_match,
        config=RFTConfig(**settings),
        run_dir=RunDir.open(tmp_path / "run", {"test": True}),
        base="base-model",
        evaluator=evaluator,
    )
    return optimizer, trainer


def traces_text(run_dir: Path) -> str:
    return "\n".join(path.read_text() for path in sorted(run_dir.rglob("*.jsonl")))


@pytest.mark.parametrize("route", sorted(cd.CHEATS))
def test_the_static_check_refuses_every_cheat(route):
    assert any("forbidden call" in violation for violation in check_imports(cd.CHEATS[route]))


@pytest.mark.parametrize("static_check", [True, False], ids=["static-check", "runtime-only"])
@pytest.mark.parametrize("route", sorted(cd.CHEATS))
def test_a_cheat_scores_zero_and_trains_nothing_in_a_weight_step(tmp_path, route, static_check):
    limits = replace(TEST_LIMITS, static_check=static_check)
    optimizer, trainer = rft(tmp_path, evaluator=ContainedEvaluator(limits))
    try:
        optimizer.compile(cheat(route), trainset=cd.tasks(2))
    finally:
        cd.restore_metric()
    [step] = optimizer.report.steps
    assert (step.mean_reward, step.accepted, trainer.calls) == (0.0, 0, [])
    assert "7f3a" not in traces_text(tmp_path / "run")  # no gold in any trace


def test_the_default_weight_phase_samples_a_cheat_contained(tmp_path):
    optimizer, trainer = rft(tmp_path)  # no evaluator given: the default must contain it
    optimizer.compile(cheat("closure"), trainset=cd.tasks(2))
    assert optimizer.report.steps[0].accepted == 0 and trainer.calls == []


@pytest.mark.parametrize("route", sorted(cd.CHEATS))
def test_in_process_the_cheats_that_reach_the_gold_are_accepted(tmp_path, route):
    """The control: what the sandbox stops is real. The recorder's wrapper shows no `__wrapped__`."""
    optimizer, _ = rft(tmp_path, evaluator=InProcessEvaluator(threads=2, run_unvouched_in_process=True))
    try:
        optimizer.compile(cheat(route), trainset=cd.tasks(2))
    finally:
        cd.restore_metric()
    assert optimizer.report.steps[0].accepted == (4 if route in cd.WORKS_IN_PROCESS else 0)


@pytest.mark.parametrize("route", cd.WORKS_IN_PROCESS)
def test_a_whale_run_on_a_model_written_student_scores_and_trains_nothing(tmp_path, route):
    from optimizers import Fixed, WhaleOptimizer

    server = FakeBackend(ScriptedLM(GUESS))
    weight, trainer = rft(tmp_path, backend=server)
    whale = WhaleOptimizer(
        backend=server,
        metric=cd.exact_match,
        schedule=Fixed(1.0, 1),
        budget=8,
        run_dir=tmp_path / "whale",
        eval_every=4,
        eval_k=2,
        eval_threads=2,
        weight_phase=weight,
        method="weight-only",
    )  # the default evaluators: nothing here asks for containment
    try:
        result = whale.compile(cheat(route), trainset=cd.tasks(2), track=cd.tasks(2))
    finally:
        cd.restore_metric()
    curve = result.report.curve
    assert len(curve) == 3 and all(point.mean_at_k == 0.0 for point in curve)
    assert result.report.spend.rollouts == 8 and trainer.calls == []
    assert "7f3a" not in traces_text(tmp_path)


def test_evaluate_refuses_unvouched_code_in_process_and_forward_runs_it_contained():
    program = cheat("closure")
    with pytest.raises(UntrustedHarness, match="not vouched for"):
        evaluate(program, EvalRequest(cd.tasks(1), metric=cd.exact_match, lm=ScriptedLM(GUESS), k=1))
    with pytest.raises(UntrustedHarness):
        program.build_function()
    honest = HarnessSource(
        "honest", "import dspy\ndef build(signature, tools):\n    return dspy.Predict(signature)\n"
    )
    called = HarnessProgram(honest, cd.QA, lm=ScriptedLM(GUESS))(question="what is item 0?")
    assert called.answer == "guess"  # it ran in a sandbox child: this process refuses to load it


def test_a_vouch_is_bound_to_the_exact_code():
    seed = HarnessSource("seed", cd.CHEATS["closure"]).vouched()
    assert seed.trusted and not replace(seed, code=seed.code + "\n# edited").trusted
    assert not seed.unvouched().trusted
    program = HarnessProgram(seed, cd.QA)
    assert program.with_source(HarnessSource("c0000", seed.code)).source.trusted  # read back: same code
    assert not program.with_source(HarnessSource("c0001", seed.code + "\n")).source.trusted


def test_the_harness_search_unvouches_what_a_proposer_returns(tmp_path):
    from meta_harness_helpers import GOOD, ScriptedProposer, tasks

    from optimizers import MetaHarness, MetaHarnessConfig

    seen = []

    class Recording(InProcessEvaluator):
        def evaluate(self, program, request):
            seen.append((program.source.name, program.source.trusted))
            return super().evaluate(program, request)

    proposed = HarnessSource("scripted", GOOD, "c0000").vouched()  # a proposer cannot vouch for its code
    search = MetaHarness(
        proposer=ScriptedProposer([[proposed]]),
        metric=lambda example, pred, trace=None: 0.0,
        archive_dir=tmp_path / "archive",
        config=MetaHarnessConfig.paper(
            tasks=2, smoke_tasks=0, candidates=1, max_iterations=1, min_iterations=1
        ),
        lm=ScriptedLM({"": {"answer": "4"}}),
        evaluator=Recording(threads=1, run_unvouched_in_process=True),
    )
    seed = HarnessProgram(HarnessSource("toy_h0", GOOD + "\n# the seed\n").vouched(), cd.QA)
    list(itertools.islice(search.iterations(seed, tasks()), 2))  # h0, then the proposal
    assert seen == [("c0000", True), ("c0001", False)]


def test_sandboxed_and_in_process_sampling_give_the_same_sft_data(tmp_path):
    """Including which LM calls were parsed: the child reports its adapter's parses over the wire."""
    replies = {
        "Qa?": [reply(draft="d"), "no fields here", '{"answer": "a"}'] * 2,
        "Qb?": [reply(draft="d"), reply(answer="b")] * 2,
    }
    data = []
    for label, evaluator in (
        ("in-process", InProcessEvaluator(threads=1)),
        ("sandboxed", SandboxedEvaluator(replace(TEST_LIMITS, threads=1))),
    ):
        backend = FakeBackend(StructuredScriptedLM(replies))
        optimizer, trainer = rft(tmp_path / label, evaluator=evaluator, backend=backend, threads=1)
        program = HarnessProgram(HarnessSource("two", TWO_CALLS).vouched(), cd.QA)
        tasks = [dspy.Example(task_id=n, question=f"Q{n}?", answer=n).with_inputs("question") for n in "ab"]
        optimizer.compile(program, trainset=tasks)
        [call] = trainer.calls
        data.append([example.to_dict() for example in call.examples])
        rollouts = list(read_jsonl(next((tmp_path / label).rglob("step-0000.jsonl"))))
        assert sorted(c["parsed"] for r in rollouts for c in r["lm_calls"]) == [False] * 2 + [True] * 8
    assert data[0] == data[1] and len(data[0]) == 8  # the two malformed first answers left out


def test_a_spinning_candidate_is_stopped_by_its_cpu_time(tmp_path):
    import time

    spin = (ADVERSARIAL_DIR / "busy_loop.py").read_text()
    limits = replace(
        TEST_LIMITS, task_seconds=120, candidate_seconds=120, startup_cpu_seconds=3, rollout_cpu_seconds=1
    )
    started = time.monotonic()
    report, rollouts = SandboxedEvaluator(limits).evaluate(
        HarnessProgram(HarnessSource("spin", spin), cd.QA, cd.tools_for),
        EvalRequest(cd.tasks(2), metric=cd.exact_match, lm=ScriptedLM(GUESS), k=1, namespace="spin"),
    )
    assert time.monotonic() - started < 30  # the wall clock limits (120 s) never came into it
    assert all("5 s of CPU time" in r.error for r in rollouts) and report.mean_at_k == 0.0


def test_limits_are_sized_to_the_evaluation():
    limits = replace(TEST_LIMITS, cpu_seconds=100, startup_cpu_seconds=10, rollout_cpu_seconds=0.5)
    assert limits.sized_for(16).cpu_seconds == 18 and limits.sized_for(1000).cpu_seconds == 100


def test_whale_eval_runs_a_harness_file_contained_unless_trusted(tmp_path, fake_server_url):
    from whale_cli.main import main

    url, model = fake_server_url
    harness = tmp_path / "cheat.py"
    harness.write_text(cd.CHESS_CHEAT)
    scores = {}
    for trusted in (False, True):
        out = tmp_path / f"eval-{trusted}"
        argv = ["eval", "--domain", "chess", "--harness", str(harness), "--limit", "2", "--k", "1"]
        argv += ["--server-url", url, "--model", "org/asked-model", "--out", str(out)]
        assert main(argv + (["--trust-harness"] if trusted else [])) == 0
        report = json.loads((out / "report.json").read_text())
        scores[trusted] = (report["mean_at_k"], report["contained"])
        assert report["model"] == str(model)  # what the server says it serves, not what --model asked
    assert scores == {False: (0.0, True), True: (1.0, False)}


def test_whale_eval_of_a_run_runs_its_final_harness_contained_under_its_adapter(tmp_path, fake_server_url):
    """`whale eval --run DIR`: the run's final harness file (model-written: sandboxed) and adapter."""
    from whale_helpers import scripted_run

    from whale_cli.main import main
    from whale_dspy.rundir import RunDir

    url, _ = fake_server_url
    run_dir = tmp_path / "run"
    final = scripted_run(run_dir, budget=30)
    config = RunDir(run_dir).config()
    config["cli"]["domain"] = "chess"  # the scripted domain has no loader: recorded as a chess run
    (run_dir / "config.json").write_text(json.dumps(config))
    (run_dir / final["harness"]["path"]).write_text(cd.CHESS_CHEAT)
    copy = tmp_path / "adapter-copy"  # a committed copy of the final adapter; the server is fake
    copy.mkdir()
    (copy / "adapter_config.json").write_text("{}")
    out = tmp_path / "eval"
    argv = ["eval", "--run", str(run_dir), "--adapter", str(copy), "--limit", "2", "--k", "1"]
    assert main([*argv, "--server-url", url, "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert (report["run"], report["adapter"], report["domain"]) == (str(run_dir), str(copy), "chess")
    assert report["contained"] and report["mean_at_k"] == 0.0  # the cheat, caught in the sandbox
    assert report["harness"] == Path(final["harness"]["path"]).stem  # the run's file, not chess_h0


def test_a_runs_test_evaluation_contains_its_harness(tmp_path):
    """What `whale transfer` and a study's test evaluate: the run's harness under some weights."""
    from whale_cli.run_settings import RunSettings
    from whale_cli.wiring import evaluate_on_test, load_data

    settings = RunSettings(domain="chess", test_limit=2, eval_k=1)
    data = load_data(settings)
    backend = FakeBackend(ScriptedLM(GUESS))
    written = HarnessSource("c0007", cd.CHESS_CHEAT)
    assert evaluate_on_test(data, backend, settings, written, adapter=None, k=1).mean_at_k == 0.0
    assert evaluate_on_test(data, backend, settings, written.vouched(), adapter=None, k=1).mean_at_k == 1.0


@pytest.mark.parametrize(
    "code",
    [
        'import operator\nsolution = operator.attrgetter("__wrapped__")(tool)',
        'import operator\nowner = operator.attrgetter("play_move.__self__")(tools)',
        'import operator\noperator.methodcaller("__reduce__")(tool)',
        "from operator import attrgetter as read\nread(name)(tool)",
        "from operator import attrgetter as read\nreaders = [read]",
        "import functools\nfunctools.reduce(getattr, names, tool)",
        'getattr(typing_module, "sys")',
        'text = "{0.__closure__}".format(tool)',
        'text = "{tool.__self__.__dict__}".format(tool=tool)',
        "cells = vars(tool)",
    ],
)
def test_the_static_check_refuses_indirect_attribute_access(code):
    assert any("forbidden call" in violation for violation in check_imports(code)), code


@pytest.mark.parametrize(
    "code",
    [
        'import operator\nfirst = operator.attrgetter("answer")(prediction)',
        "import operator\nby_score = sorted(rows, key=operator.itemgetter(0))",
        'answer = getattr(prediction, "answer", "")',
        'text = "{0} after {1[0]}: {name}".format(move, moves, name=side)',
    ],
)
def test_the_static_check_lets_ordinary_attribute_access_through(code):
    assert check_imports(code) == [], code


def test_every_module_proposers_are_offered_exists():
    import importlib.util

    from whale_dspy.sandbox import ALLOWED_IMPORTS

    assert [name for name in sorted(ALLOWED_IMPORTS) if importlib.util.find_spec(name) is None] == []
