"""MetaHarness with the real SandboxedEvaluator: misbehaving candidates are archived with their reason.

One small search (ScriptedLM parent, iteration 0 plus one iteration of five
scripted candidates) runs every candidate contained: a good one, one that
imports os, one that busy-loops, one that reads the environment for a planted
API key, one that raises. Each is archived with its reason and score 0, the
good one wins, the parent stays healthy, no child is left, and the planted
key is nowhere in the archive. Nothing of a candidate executes in the parent.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import threading
from pathlib import Path

import pytest
from meta_harness_helpers import GOOD, QA, TOY, ScriptedProposer, exact, lm, source, tasks
from sandbox_helpers import SECRET, SECRET_VARIABLE, sandbox_processes

import whale_dspy.harness
from optimizers.harness.archive import HarnessArchive
from optimizers.harness.meta_harness import TASK_SECONDS, MetaHarness, MetaHarnessConfig, sandboxed_evaluator
from whale_dspy.harness import HarnessProgram, HarnessSource
from whale_dspy.sandbox import SandboxedEvaluator

IMPORTS_OS = TOY.replace("import dspy\n", "import dspy\nimport os\n", 1)
BUSY_LOOP = TOY.replace(
    "answer = self.predict", "while True:\n            pass\n        answer = self.predict"
)
READS_ENV = TOY.replace("import dspy\n", "import typing\n\nimport dspy\n", 1).replace(
    "answer = self.predict(question=question).answer",
    'answer = str(dict(typing.sys.modules["os"].environ))',
)
RAISES = TOY.replace("answer = self.predict", "raise RuntimeError('boom')\n        answer = self.predict")

EXPECTED = {  # candidate: (status, stage, reason)
    "c0000": ("valid", None, None),
    "c0001": ("valid", None, None),
    "c0002": ("invalid", "imports", "forbidden import"),
    "c0003": ("invalid", "smoke", "timeout"),
    "c0004": ("invalid", "calls", "forbidden call"),
    "c0005": ("invalid", "smoke", "crash"),
}


def children() -> list[int]:
    """Live (non-zombie) child processes of this process."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = dict(
                line.split(":\t", 1) for line in (entry / "status").read_text().splitlines() if ":\t" in line
            )
        except OSError:
            continue
        if int(status.get("PPid", "0")) == os.getpid() and not status.get("State", "").startswith("Z"):
            found.append(int(entry.name))
    return found


def student() -> HarnessProgram:
    return HarnessProgram(HarnessSource(name="toy_h0", code=TOY), QA, tools_factory=lambda example: {})


def test_the_default_evaluator_is_the_sandbox(tmp_path):
    optimizer = MetaHarness(
        proposer=ScriptedProposer([]),
        metric=exact,
        archive_dir=tmp_path,
        config=MetaHarnessConfig.paper(threads=3),
    )
    assert isinstance(optimizer.evaluator, SandboxedEvaluator)
    assert optimizer.evaluator.limits.task_seconds == TASK_SECONDS >= 300
    assert optimizer.evaluator.limits.threads == 3


def test_contained_search_archives_each_failure_and_keeps_the_parent_healthy(tmp_path, monkeypatch):
    monkeypatch.setenv(SECRET_VARIABLE, SECRET)
    loaded_here: list[str] = []
    real_load = whale_dspy.harness.load_build
    monkeypatch.setattr(
        whale_dspy.harness, "load_build", lambda src: loaded_here.append(src.name) or real_load(src)
    )
    threads_before = threading.active_count()
    children_before = set(children())  # e.g. the session's shared vLLM server
    modules_before = {name for name in sys.modules if name.startswith("whale_harness_")}

    config = MetaHarnessConfig.paper(
        candidates=5, tasks=2, smoke_tasks=1, min_iterations=1, max_iterations=1, threads=2, timeout_s=60
    )
    batch = [source(code) for code in (GOOD, IMPORTS_OS, BUSY_LOOP, READS_ENV, RAISES)]
    optimizer = MetaHarness(
        proposer=ScriptedProposer([batch]),
        metric=exact,
        archive_dir=tmp_path / "archive",
        lm=lm(),
        config=config,
        evaluator=sandboxed_evaluator(config, task_seconds=4, startup_seconds=60, memory_mb=1024),
    )
    signals = [signal for signal, _ in itertools.islice(optimizer.iterations(student(), tasks(2)), 2)]

    archive = HarnessArchive(tmp_path / "archive")
    found = {m.name: (m.status, m.stage, m.reason) for m in archive.candidates}
    assert found == EXPECTED
    for name, (status, _, _) in EXPECTED.items():
        meta = json.loads((tmp_path / "archive" / name / "meta.json").read_text())
        assert meta["status"] == status and meta["reason"] == EXPECTED[name][2]
        if status == "invalid":
            assert meta["scores"]["mean"] == 0 and meta["error"]
    assert "RuntimeError: boom" in archive.get("c0005").error
    assert "os" in archive.get("c0002").error and "environ" in archive.get("c0004").error
    assert signals[1].best_name == "c0001" and signals[1].best_score == 1.0
    assert archive.get("c0000").scores.mean == pytest.approx(0.5)

    # Nothing of a candidate ran here, nothing is left running, the parent is intact.
    assert loaded_here == []
    assert {name for name in sys.modules if name.startswith("whale_harness_")} == modules_before
    assert set(children()) <= children_before and sandbox_processes() == []
    assert threading.active_count() <= threads_before
    assert os.environ[SECRET_VARIABLE] == SECRET
    for path in (tmp_path / "archive").rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
