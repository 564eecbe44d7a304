"""Runs that share an evaluations folder measure the untouched seed program once, and nothing else."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

from whale_helpers import FakeHarnessPhase, FakeWeightPhase, backend, compile_run, optimizer

from optimizers.engine.shared_evals import FIELDS, TRACE, SharedEvaluations
from whale_dspy.evaluation import InProcessEvaluator


def evaluations(run_dir):
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    return [e for e in events if e["kind"] == "evaluation"]


def run(run_dir, method, shared, **options):
    server = backend()
    opt = optimizer(
        run_dir,
        server,
        weight=FakeWeightPhase(server),
        harness=FakeHarnessPhase(),
        method=method,
        budget=40,
        shared_evals=shared,
        **options,
    )
    return compile_run(opt, server)


class SlowEvaluator(InProcessEvaluator):
    """Takes long enough that a second run reaches the same evaluation while the first measures it."""

    def evaluate(self, *args, **kwargs):
        time.sleep(0.5)
        return super().evaluate(*args, **kwargs)


def test_the_seed_program_is_measured_by_the_first_run_and_copied_by_the_next(tmp_path):
    shared = SharedEvaluations(tmp_path / "shared", scope="model|domain")
    run(tmp_path / "weight-only", "weight-only", shared)
    report = run(tmp_path / "harness-only", "harness-only", shared).report
    measured, copied = evaluations(tmp_path / "weight-only"), evaluations(tmp_path / "harness-only")

    assert "shared" not in measured[0] and measured[0]["eval_rollouts"] == 4  # 2 test tasks x k=2
    assert copied[0]["shared"] and copied[0]["eval_rollouts"] == 0 and copied[0]["seconds"] == 0.0
    same = ("mean_at_k", "ci_low", "ci_high", "per_task", "harness", "adapter", "k", "tasks")
    assert {key: copied[0][key] for key in same} == {key: measured[0][key] for key in same}
    trace = "evals/test-00000000.jsonl"
    assert (tmp_path / "harness-only" / trace).read_text() == (tmp_path / "weight-only" / trace).read_text()
    # later checkpoints are other programs (an adapter, a searched harness): each run measures its own
    assert all("shared" not in e for e in measured[1:] + copied[1:]) and len(copied) > 1
    assert report.spend.eval_rollouts == 4 * (len(copied) - 1)  # the copy cost this run nothing


def test_runs_side_by_side_measure_the_seed_program_once(tmp_path):
    shared = SharedEvaluations(tmp_path / "shared", scope="model|domain")
    methods = ("weight-only", "harness-only")
    with ThreadPoolExecutor(2) as pool:
        futures = [
            pool.submit(
                run,
                tmp_path / method,
                method,
                shared,
                evaluator=SlowEvaluator(threads=2, run_unvouched_in_process=True),
            )
            for method in methods
        ]
        [future.result() for future in futures]
    first = [evaluations(tmp_path / method)[0] for method in methods]
    assert sorted("shared" in e for e in first) == [False, True]  # one measured, the other waited
    assert sorted(e["eval_rollouts"] for e in first) == [0, 4]


def test_the_key_follows_what_fixes_the_measurement_and_not_the_server_address(tmp_path):
    shared = SharedEvaluations(tmp_path, scope="model|domain")
    lm = SimpleNamespace(model="whale-vllm/base", kwargs={"temperature": 1.0, "api_base": "http://a:1"})
    tasks = {"tasks": 2, "digest": "abc"}
    key = shared.key(harness="h0", tasks=tasks, k=2, namespace="whale-test", lm=lm)
    moved = SimpleNamespace(model=lm.model, kwargs={**lm.kwargs, "api_base": "http://b:2", "api_key": "x"})
    assert shared.key(harness="h0", tasks=tasks, k=2, namespace="whale-test", lm=moved) == key
    others = [
        shared.key(harness="h1", tasks=tasks, k=2, namespace="whale-test", lm=lm),
        shared.key(harness="h0", tasks={**tasks, "digest": "abd"}, k=2, namespace="whale-test", lm=lm),
        shared.key(harness="h0", tasks=tasks, k=4, namespace="whale-test", lm=lm),
        shared.key(harness="h0", tasks=tasks, k=2, namespace="whale-val", lm=lm),
        shared.key(
            harness="h0",
            tasks=tasks,
            k=2,
            namespace="whale-test",
            lm=SimpleNamespace(model=lm.model, kwargs={**lm.kwargs, "temperature": 0.0}),
        ),  # fmt: skip
        SharedEvaluations(tmp_path, scope="other-model|domain").key(
            harness="h0", tasks=tasks, k=2, namespace="whale-test", lm=lm
        ),
    ]
    assert len({key, *others}) == len(others) + 1


def test_a_half_written_entry_is_measured_again(tmp_path):
    shared = SharedEvaluations(tmp_path / "shared", scope="s")
    (tmp_path / "shared" / "k1").mkdir(parents=True)
    (tmp_path / "shared" / "k1" / TRACE).write_text("{}\n")  # a worker died before writing the fields
    assert shared.get("k1", tmp_path / "copy.jsonl") is None
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"task_id": "t"}\n')
    shared.put("k1", {"mean_at_k": 0.5}, trace)
    assert shared.get("k1", tmp_path / "copy.jsonl") == {"mean_at_k": 0.5}
    assert (tmp_path / "copy.jsonl").read_text() == trace.read_text()
    assert json.loads((tmp_path / "shared" / "k1" / FIELDS).read_text()) == {"mean_at_k": 0.5}
