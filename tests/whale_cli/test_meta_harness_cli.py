"""`whale search` wiring: arguments checked before the server starts, then search + test on a fake backend."""

from __future__ import annotations

import io
import json

import pytest
from cli_helpers import parse
from rich.console import Console

from optimizers.harness.archive import META_FILE, SMOKE_FILE, TRACES_FILE
from whale_cli import search
from whale_dspy.errors import ConfigError
from whale_dspy.evaluation import InProcessEvaluator
from whale_dspy.jsonl import read_jsonl
from whale_dspy.sandbox import SandboxedEvaluator
from whale_dspy.testing.fake_backend import FakeBackend
from whale_dspy.testing.scripted_lm import ScriptedLM


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--domain", "math", "--proposer", "gpt"), "valid forms"),
        (("--domain", "nope"), "valid domains"),
        (("--domain", "math", "--iterations", "0"), "max_iterations"),
        (("--domain", "math", "--harness", "nope_h0"), "valid names"),
        (("--domain", "math", "--max-tokens", "0"), "--max-tokens must be >= 1"),
    ],
)
def test_bad_arguments_fail_before_any_server(argv, message):
    with pytest.raises(ConfigError, match=message):
        search.prepare(parse(*argv))


def test_search_on_a_fake_backend_writes_archive_and_test_report(tmp_path):
    argv = ("--domain", "math", "--tasks", "3", "--test-tasks", "2", "--iterations", "1", "--eval-k", "1")
    args = parse(*argv, "--candidates", "2", "--threads", "2", "--run-dir", str(tmp_path), "--no-sandbox")
    args.selection_tasks = 4
    setup = search.prepare(args)
    assert setup["source"].name == "math_h0" and len(setup["searchset"]) == 3 + 4
    out = io.StringIO()
    backend = FakeBackend(ScriptedLM({"": {"reasoning": "add", "answer": "18"}}))
    assert search.search(setup, backend, args, Console(file=out, width=150)) == 0
    report = json.loads((tmp_path / "search_report.json").read_text())
    iterations = report["search"]["iterations"]
    assert [s["iteration"] for s in iterations] == [0, 1]
    # Every LM call of an iteration's candidates, smoke rollouts too, as their archived traces hold them.
    archived = {i: 0 for i in (0, 1)}
    meta_files = list((tmp_path / "archive").glob(f"c*/{META_FILE}"))
    assert len(meta_files) == 3  # h0 and the two candidates
    for meta_file in meta_files:
        rows = [row for name in (SMOKE_FILE, TRACES_FILE) for row in read_jsonl(meta_file.parent / name)]
        archived[json.loads(meta_file.read_text())["iteration"]] += sum(len(r["lm_calls"]) for r in rows)
    # ... and the race's, which decided iteration 1 on the selection slice beside the archive
    raced = [row for f in (tmp_path / "archive-selection").glob("race-001/*.jsonl") for row in read_jsonl(f)]
    assert len(raced) == iterations[1]["decision"]["race"]["rollouts"] > 0
    archived[1] += sum(len(r["lm_calls"]) for r in raced)
    assert archived[0] > 0 and [s["lm_calls"] for s in iterations] == [archived[0], archived[1]]
    assert iterations[1]["lm_calls"] > iterations[1]["rollouts"]  # the catalogue's votes call more than once
    assert "h0" in report["test"] and report["test"]["h0"]["rollouts"] == 2
    assert (tmp_path / "archive" / "c0000" / "harness.py").exists()
    assert "Meta-Harness iterations" in out.getvalue() and "held-out test" in out.getvalue()
    assert "LM calls" in out.getvalue()


@pytest.mark.parametrize("contained", [True, False], ids=["sandboxed", "in-process"])
def test_a_search_from_a_weight_checkpoint_runs_every_rollout_through_that_adapter(tmp_path, contained):
    folder = tmp_path / "policy-s0007"
    folder.mkdir()
    argv = ("--domain", "math", "--tasks", "2", "--test-tasks", "2", "--iterations", "1", "--eval-k", "1")
    args = parse(
        *argv,
        "--candidates",
        "1",
        "--run-dir",
        str(tmp_path / "run"),
        *(() if contained else ("--no-sandbox",)),
        "--adapter",
        str(folder),
    )
    backend = FakeBackend(ScriptedLM({"": {"answer": "18"}}))
    assert search.search(search.prepare(args), backend, args, Console(file=io.StringIO())) == 0
    [name] = backend.loaded
    assert name.startswith("search-policy-s0007-") and backend.loaded[name].path == str(folder.resolve())
    run = tmp_path / "run"
    traces = [run / "test" / "h0" / "traces.jsonl", *(run / "archive").glob("c*/traces.jsonl")]
    rollouts = [json.loads(line) for path in traces for line in path.read_text().splitlines()]
    assert len(rollouts) >= 4 and {r["adapter"] for r in rollouts} == {name}  # search and test alike
    assert {call["model"] for r in rollouts for call in r["lm_calls"]} == {name}
    report = json.loads((tmp_path / "run" / "search_report.json").read_text())
    assert report["adapter"] == str(folder.resolve())


def test_a_search_samples_at_the_completion_budget_it_is_given(tmp_path):
    """Without --max-tokens a search samples at its server's LM's budget, as the recorded searches
    did; with it, every call of the search and of the held-out test, and the record, say the given
    one."""
    argv = ("--domain", "math", "--tasks", "2", "--test-tasks", "2", "--iterations", "1", "--eval-k", "1")
    served = FakeBackend(ScriptedLM({})).lm().kwargs["max_tokens"]
    assert served != 48
    for given in (None, 48):
        run = tmp_path / f"run-{given}"
        flags = ("--max-tokens", str(given)) if given else ()
        args = parse(*argv, "--candidates", "1", "--run-dir", str(run), "--no-sandbox", *flags)
        backend = FakeBackend(ScriptedLM({"": {"answer": "18"}}))
        assert search.search(search.prepare(args), backend, args, Console(file=io.StringIO())) == 0
        traces = [run / "test" / "h0" / "traces.jsonl", *(run / "archive").glob("c*/traces.jsonl")]
        calls = [
            c
            for path in traces
            for line in path.read_text().splitlines()
            for c in json.loads(line)["lm_calls"]
        ]
        assert calls and {call["sampling"].get("max_tokens") for call in calls} == {given or served}
        assert json.loads((run / "search_report.json").read_text())["sampling"]["max_tokens"] == (
            given or served
        )


def test_the_held_out_reads_of_two_searches_pair_task_by_task(tmp_path):
    """A search from a checkpoint against one from the base weights (the paper's finding 2):
    each search's held-out read is a `whale paired` read of the same tasks."""
    from whale_cli.paired import load_reads
    from whale_dspy.reporting.reads import read_pairs, reads_table

    checkpoint = tmp_path / "policy-s0001"
    checkpoint.mkdir()
    argv = ("--domain", "math", "--tasks", "2", "--test-tasks", "4", "--iterations", "1", "--eval-k", "1")
    for name, weights in (("base", ()), ("tuned", ("--adapter", str(checkpoint)))):
        args = parse(*argv, "--candidates", "1", "--no-sandbox", "--run-dir", str(tmp_path / name), *weights)
        setup = search.prepare(args)
        first = setup["testset"][0]  # the tuned weights solve one held-out task, the base none
        script = {first.question: {"answer": first.answer}} if weights else {}
        backend = FakeBackend(ScriptedLM({**script, "": {"answer": "-1"}}))
        assert search.search(setup, backend, args, Console(file=io.StringIO())) == 0
    folders = [tmp_path / name / "test" / "h0" for name in ("base", "tuned")]
    with pytest.raises(ConfigError, match="named alike"):
        load_reads(folders, None)
    reads = load_reads(folders, "base,tuned")
    assert [read.report["adapter"] for read in reads] == [None, str(checkpoint.resolve())]
    assert {(r.report["harness"], r.report["split"], r.report["contained"]) for r in reads} == {
        ("math_h0", "test", False)
    }
    ids = [{json.loads(line)["rollout_id"] for line in (f / "traces.jsonl").open()} for f in folders]
    assert len(ids[0]) == 4 and ids[0] == ids[1]  # the same tasks under the same rollout ids
    [(_, _, gain)] = read_pairs(reads)
    assert gain.tasks == 4 and gain.gain == 0.25 and "tuned − base | +0.250" in reads_table(reads)


def test_two_loads_of_one_adapter_folder_get_two_names_on_a_shared_server(tmp_path):
    from whale_cli.eval import load_adapter_folder

    backend = FakeBackend(ScriptedLM({"": {"answer": "18"}}))
    names = {load_adapter_folder(backend, str(tmp_path), "base", "search") for _ in range(2)}
    assert len(names) == 2 and set(backend.loaded) == names  # within one second, too


def test_search_is_sandboxed_unless_told_otherwise():
    setup = search.prepare(parse("--domain", "math", "--threads", "3"))
    contained = search.search_evaluator(parse("--domain", "math", "--threads", "3"), setup["config"])
    assert isinstance(contained, SandboxedEvaluator) and contained.limits.threads == 3
    trusted = search.search_evaluator(parse("--domain", "math", "--no-sandbox"), setup["config"])
    assert isinstance(trusted, InProcessEvaluator)
    held_out = search.held_out_evaluator(contained, rollouts=80)  # 27 waves of 3 rollouts
    assert held_out.limits.task_seconds == contained.limits.task_seconds
    assert held_out.limits.candidate_seconds >= 27 * held_out.limits.task_seconds
    assert search.held_out_evaluator(trusted, rollouts=80) is trusted


def test_search_reuses_a_running_server_when_given_its_url(tmp_path, monkeypatch):
    from whale_dspy.backends import RemoteServer

    used = []
    monkeypatch.setattr(search, "search", lambda setup, backend, args, console: used.append(backend) or 0)
    url = "http://127.0.0.1:9"
    args = parse(
        "--domain", "math", "--model", str(tmp_path), "--server-url", url, "--run-dir", str(tmp_path / "run")
    )
    assert search.run(args) == 0
    assert isinstance(used[0], RemoteServer) and used[0].url == url
