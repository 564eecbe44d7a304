"""SandboxedEvaluator: same results and traces as in process, failures classified, nothing left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest
from sandbox_helpers import (
    TEST_LIMITS,
    Question,
    StructuredScriptedLM,
    exact_match,
    examples,
    running_as_root,
    sandbox_processes,
    scripted_lm,
    tools_for,
)

from whale_dspy.errors import ConfigError
from whale_dspy.evaluation import EvalRequest, InProcessEvaluator
from whale_dspy.harness import HarnessProgram, HarnessSource
from whale_dspy.jsonl import read_jsonl
from whale_dspy.sandbox import (
    ALLOWED_IMPORTS,
    FAILURE_REASONS,
    CandidateProgram,
    SandboxedEvaluator,
    SandboxLimits,
    check_imports,
    classify_failure,
)
from whale_dspy.sandbox.limits import child_environment
from whale_dspy.sandbox.session import CandidateSession
from whale_dspy.testing.scripted_lm import ScriptedLM

SEEDS = sorted(Path(__file__).parents[3].joinpath("harness_programs").glob("*_h0.py"))

TOOL_USER = """
import dspy


class UsesTools(dspy.Module):
    def __init__(self, signature, tools):
        super().__init__()
        self.solve = dspy.Predict(signature)
        self.lookup = tools["lookup"]

    def forward(self, question):
        notes = self.lookup(query=question)
        try:
            self.lookup(query=None, extra=1)
        except TypeError as error:  # the tool's own error type reaches the harness
            notes += f" ({type(error).__name__})"
        return self.solve(question=f"{question} {notes}")


def build(signature, tools):
    return UsesTools(signature, tools)
"""


def program(code: str, name: str = "candidate") -> CandidateProgram:
    return CandidateProgram(HarnessSource(name=name, code=code), Question, tools_for)


def run(evaluator, prog, **kwargs):
    options = {"metric": exact_match, "lm": scripted_lm(), "k": 2, "namespace": "sandbox-test"} | kwargs
    return evaluator.evaluate(prog, EvalRequest(examples(), **options))


def comparable(rollouts) -> list[dict]:
    return sorted(
        ({**r.to_dict(), "seconds": 0} for r in rollouts), key=lambda r: (r["task_id"], r["sample"])
    )


def test_sandboxed_rollouts_equal_in_process_rollouts(tmp_path: Path) -> None:
    in_process = InProcessEvaluator(threads=2)
    sandboxed = SandboxedEvaluator(TEST_LIMITS)
    source = HarnessSource(name="tools", code=TOOL_USER).vouched()
    report_a, rollouts_a = run(
        in_process, HarnessProgram(source, Question, tools_for), trace_path=tmp_path / "a"
    )
    report_b, rollouts_b = run(sandboxed, program(TOOL_USER, "tools"), trace_path=tmp_path / "b")
    assert comparable(rollouts_a) == comparable(rollouts_b)
    assert rollouts_b[0].lm_calls and rollouts_b[0].tool_calls[1].error.startswith("TypeError")
    assert "(TypeError)" in rollouts_b[0].lm_calls[0].messages[-1]["content"]
    assert replace(report_a, seconds=0) == replace(report_b, seconds=0)
    assert comparable(map(_rollout, read_jsonl(tmp_path / "b"))) == comparable(rollouts_b)


def test_json_adapter_fallback_runs_in_the_child_as_in_process() -> None:
    source = HarnessSource(name="tools", code=TOOL_USER).vouched()
    outcomes = []
    for evaluator, prog in (
        (InProcessEvaluator(threads=2), HarnessProgram(source, Question, tools_for)),
        (SandboxedEvaluator(TEST_LIMITS), program(TOOL_USER, "tools")),
    ):
        _, rollouts = run(evaluator, prog, k=1, lm=StructuredScriptedLM({"": "no fields here"}))
        outcomes.append([(r.error.split(":")[0], len(r.lm_calls)) for r in rollouts])
        schema = rollouts[0].lm_calls[1].sampling["response_format"]
    assert outcomes[0] == outcomes[1] == [("AdapterParseError", 2)] * 2
    assert schema["json_schema"]["schema"]["required"] == ["answer"]  # sent as JSON schema, not a class


def _rollout(data):
    from whale_dspy.records import Rollout

    return Rollout.from_dict(data)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (
            "import dspy\ndef build(signature, tools):\n    raise ValueError('no')\n",
            "HarnessError: harness c: build() failed: ValueError: no",
        ),
        (
            "import dspy\nraise RuntimeError('top')\ndef build(signature, tools):\n    pass\n",
            "HarnessError: harness c failed to load: RuntimeError: top",
        ),
        ("def build(signature, tools):\n    return lambda **kw: {}['missing']\n", "KeyError: 'missing'"),
        (
            "def build(signature, tools:\n",
            "HarnessError: harness c does not parse: line 1: syntax error: '(' was never closed",
        ),
    ],
    ids=["build", "load", "forward", "syntax"],
)
def test_harness_errors_read_as_in_process(code: str, expected: str) -> None:
    report, rollouts = run(SandboxedEvaluator(TEST_LIMITS), program(code, "c"), k=1)
    assert [r.error for r in rollouts] == [expected] * 2
    assert {classify_failure(r.error) for r in rollouts} == {"crash"}
    assert report.mean_at_k == 0.0 and report.parse_rate == 0.0


def test_rollouts_run_concurrently_in_one_child() -> None:
    def slow_tools(example):
        def lookup(query: str) -> str:
            time.sleep(0.6)
            return "notes"

        return {"lookup": lookup}

    limits = replace(TEST_LIMITS, threads=4)
    prog = CandidateProgram(HarnessSource(name="tools", code=TOOL_USER), Question, slow_tools)
    report, rollouts = run(SandboxedEvaluator(limits), prog, k=2)
    assert [r.error for r in rollouts] == [None] * 4
    assert report.seconds < 4 * 2 * 0.6  # four rollouts, two slow calls each, not one after another


THRICE = """
import dspy


def build(signature, tools):
    solve = dspy.Predict(signature)

    def run(question):
        for attempt in range(2):
            solve(question=f"{question} draft {attempt}")
        return solve(question=question)

    return run
"""


class SlowLM(ScriptedLM):
    """A loaded server: every call takes a second."""

    def __call__(self, *args, **kwargs):
        time.sleep(1.0)
        return super().__call__(*args, **kwargs)


def test_time_waiting_on_the_server_does_not_count_against_the_task_limit() -> None:
    limits = replace(TEST_LIMITS, task_seconds=2)  # each rollout waits 3 s on its three LM calls
    lm = SlowLM({"": {"answer": "guess"}})
    _, rollouts = run(SandboxedEvaluator(limits), program(THRICE, "thrice"), k=1, lm=lm)
    assert [r.error for r in rollouts] == [None, None]
    assert all(len(r.lm_calls) == 3 and r.seconds > limits.task_seconds for r in rollouts)


def test_a_harness_program_is_accepted_and_no_process_or_folder_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # apart from other tests' sandboxes
    source = HarnessSource(name="tools", code=TOOL_USER)
    _, rollouts = run(SandboxedEvaluator(TEST_LIMITS), HarnessProgram(source, Question, tools_for), k=1)
    assert [r.error for r in rollouts] == [None, None]
    assert sandbox_processes() == []
    assert list(tmp_path.glob("whale-sandbox-*")) == []


@pytest.mark.skipif(not running_as_root(), reason="the OS-level measures need root")
def test_the_child_reports_its_os_level_containment() -> None:
    with CandidateSession(HarnessSource(name="tools", code=TOOL_USER), Question, TEST_LIMITS) as session:
        notes = "; ".join(session.notes)
    assert "network: private namespace" in notes
    assert "user: uid" in notes
    assert "processes: no fork, no new threads" in notes


@pytest.mark.skipif(not running_as_root(), reason="the OS-level measures need root")
def test_os_layer_holds_without_the_python_guard(tmp_path: Path) -> None:
    """With only `confine` applied (no guard), fork, network, writes and secrets all fail at the OS."""
    target = tmp_path / "archive"
    target.mkdir(mode=0o755)
    script = f"""
import encodings.idna, json, os, socket  # imported while the interpreter's home is readable
from whale_dspy.sandbox.confine import become_unprivileged, confine, forbid_new_tasks
config = dict(cpu_seconds=10, memory_mb=512, output_mb=1, open_files=64, isolate_network=True,
              drop_privileges=True, uid=234567, parent_pid=os.getppid())
confine(config); become_unprivileged(config); forbid_new_tasks()
outcome = {{}}
for name, attempt in {{
    "fork": lambda: os.fork(),
    "connect": lambda: socket.create_connection(("127.0.0.1", 22), timeout=1),
    "write": lambda: open({str(target / "pwned")!r}, "w"),
    "setuid": lambda: os.setuid(0),
}}.items():
    try:
        attempt()
        outcome[name] = "succeeded"
    except OSError as error:
        outcome[name] = type(error).__name__
outcome["secret"] = os.environ.get("WHALE_FAKE_API_KEY")
print(json.dumps(outcome))
"""
    env = child_environment(str(tmp_path), {**os.environ, "WHALE_FAKE_API_KEY": "sk-planted"})
    env["PYTHONPATH"] = str(Path(__file__).parents[3])
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome == {
        "fork": "BlockingIOError",
        "connect": "OSError",
        "write": "PermissionError",
        "setuid": "PermissionError",
        "secret": None,
    }, done.stderr
    assert not (target / "pwned").exists()


def test_seed_harnesses_pass_the_static_check() -> None:
    assert SEEDS
    for path in SEEDS:
        assert check_imports(path.read_text()) == [], path.name


@pytest.mark.parametrize(
    ("code", "allowed"),
    [
        ("import re, json\nfrom collections import Counter\nimport dspy.predict", True),
        ("from dspy import predict\nimport dspy.predict", True),
        ("from harness_programs import blocks", False),  # blocks are copied as source, not imported
        ("from harness_programs import chess_h0", False),
        ("import chess\nimport chess.pgn", True),
        ("import chess.engine", False),
        ("from . import sibling", False),
        ("import os.path", False),
        ("import time", False),
    ],
)
def test_import_allowlist(code: str, allowed: bool) -> None:
    assert (check_imports(code) == []) is allowed


@pytest.mark.parametrize(
    "code",
    ["eval('1')", "x.__globals__", "getattr(x, '__class__')", "getattr(x, name)", "typing.sys", "open('f')"],
)
def test_dangerous_names_are_flagged(code: str) -> None:
    assert any("forbidden call" in v for v in check_imports(code))


def test_classify_failure_maps_error_text_to_reasons() -> None:
    assert classify_failure(None) is None
    assert classify_failure("SandboxTimeout: a task ran past its 2 s limit") == "timeout"
    assert classify_failure("ForbiddenImport: module 'os'") == "forbidden import"
    assert classify_failure("OutputLimitExceeded: too much") == "output limit"
    assert classify_failure("MemoryError: ") == "memory"
    assert classify_failure("AdapterParseError: no fields") == "crash"
    assert set(FAILURE_REASONS) == {
        "timeout",
        "memory",
        "forbidden import",
        "forbidden call",
        "crash",
        "output limit",
    }


def test_child_environment_keeps_no_secrets() -> None:
    parent = {
        "PATH": "/bin",
        "OPENAI_API_KEY": "k",
        "GITHUB_TOKEN": "t",
        "AWS_SECRET_ACCESS_KEY": "a",
        "LANG": "C",
    }
    env = child_environment("/work", parent)
    assert env["PATH"] == "/bin" and env["LANG"] == "C" and env["HOME"] == "/work"
    assert not {"OPENAI_API_KEY", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY"} & set(env)


@pytest.mark.parametrize("change", [{"task_seconds": 0}, {"threads": -1}, {"memory_mb": 100}])
def test_limits_are_validated(change: dict) -> None:
    with pytest.raises(ConfigError):
        SandboxLimits(**change)


def test_allowlist_is_configurable() -> None:
    assert check_imports("import time", ALLOWED_IMPORTS | {"time"}) == []
    assert SandboxLimits(allowed_imports={"dspy"}).allowed_imports == frozenset({"dspy"})
