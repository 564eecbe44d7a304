"""A tiny question-answering domain whose gold answers and tool state must never reach the sandbox."""

from __future__ import annotations

import ast
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import dspy

from whale_dspy.sandbox.limits import SandboxLimits
from whale_dspy.testing.scripted_lm import ScriptedLM

ADVERSARIAL_DIR = Path(__file__).parent / "adversarial"
SECRET = "sk-planted-adversarial"
SECRET_VARIABLE = "WHALE_FAKE_API_KEY"
ARCHIVE_DIR = Path("/tmp/whale-adversarial-archive")
SANDBOX_UIDS = range(200_000, 300_000)

TEST_LIMITS = SandboxLimits(
    task_seconds=20,
    candidate_seconds=60,
    cpu_seconds=30,
    memory_mb=384,
    output_mb=1,
    threads=2,
    startup_seconds=30,
)


class Question(dspy.Signature):
    """Answer the question with one word."""

    question: str = dspy.InputField(desc="a question")
    answer: str = dspy.OutputField(desc="one word")


def examples() -> list[dspy.Example]:
    return [
        dspy.Example(task_id=f"q{i}", question=f"what is item {i}?", answer=f"GOLD-{i}-7f3a").with_inputs(
            "question"
        )
        for i in range(2)
    ]


def tools_for(example: dspy.Example) -> dict[str, Any]:
    """A per-task tool that holds the gold answer in its state (as the chess environment does)."""
    gold = example.answer

    def lookup(query: str) -> str:
        """Look a word up in the notes."""
        return "yes" if query == gold else f"no notes about {query}"

    return {"lookup": lookup}


def exact_match(example: dspy.Example, pred: Any, trace: Any = None) -> float:
    return float(getattr(pred, "answer", None) == example.answer)


class StructuredScriptedLM(ScriptedLM):
    """Claims structured-output support, so a failed ChatAdapter parse retries with a JSON schema."""

    @property
    def supported_params(self) -> set[str]:
        return {"response_format"}

    @property
    def supports_response_schema(self) -> bool:
        return True


def scripted_lm() -> ScriptedLM:
    return ScriptedLM({"": {"answer": "guess"}})


def candidate_facts(path: Path) -> dict[str, Any]:
    """EXPECTED, STATIC, EXTRA_IMPORTS and LIMITS of an adversarial file, read without executing it."""
    facts: dict[str, Any] = {"EXTRA_IMPORTS": (), "LIMITS": {}}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in ("EXPECTED", "STATIC", "EXTRA_IMPORTS", "LIMITS"):
                facts[name] = ast.literal_eval(node.value)
    return facts


def limits_for(facts: dict[str, Any], **changes: Any) -> SandboxLimits:
    allowed = TEST_LIMITS.allowed_imports | set(facts["EXTRA_IMPORTS"])
    return replace(TEST_LIMITS, allowed_imports=allowed, **{**facts["LIMITS"], **changes})


def _status(pid: str) -> dict[str, str]:
    text = (Path("/proc") / pid / "status").read_text()
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def _ours_or_orphaned(status: dict[str, str]) -> bool:
    """Descends from this test process, or escaped to init: other jobs' sandboxes don't count."""
    ppid = int(status["PPid"])
    if ppid == 1:
        return True
    while ppid > 1:
        if ppid == os.getpid():
            return True
        try:
            ppid = int(_status(str(ppid))["PPid"])
        except OSError:
            return False
    return False


def sandbox_processes() -> list[int]:
    """Pids of live sandbox-uid processes of this test run (there must be none between evaluations)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = _status(entry.name)
        except OSError:
            continue
        alive = "zombie" not in status.get("State", "")
        if int(status["Uid"].split()[1]) in SANDBOX_UIDS and alive and _ours_or_orphaned(status):
            pids.append(int(entry.name))
    return pids


def running_as_root() -> bool:
    return os.geteuid() == 0
