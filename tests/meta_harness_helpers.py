"""Toy harnesses, tasks and a scripted proposer for the MetaHarness tests.

The LM always answers "4"; harnesses differ in what they do with it, so each
candidate's score follows from its code: TOY answers only even-numbered
questions, GOOD answers all, GOOD_TWO_CALLS answers all with two LM calls.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence

import dspy

from optimizers.harness.archive import HarnessArchive
from optimizers.harness.meta_harness import MetaHarness, MetaHarnessConfig
from whale_dspy.evaluation import InProcessEvaluator
from whale_dspy.harness import HarnessProgram, HarnessSource
from whale_dspy.records import ProposerUsage
from whale_dspy.testing.scripted_lm import ScriptedLM

TOY = '''"""Toy harness: answer only the even-numbered questions."""

from __future__ import annotations

import dspy

INSTRUCTIONS = "Answer the question."
MAX_TURNS = 3


class Toy(dspy.Module):
    def __init__(self, signature, tools):
        super().__init__()
        self.tools = tools
        self.predict = dspy.Predict(signature.with_instructions(INSTRUCTIONS))

    def forward(self, question):
        answer = self.predict(question=question).answer
        return dspy.Prediction(answer=answer if question[-1] in "02468" else "no idea")


def build(signature, tools):
    return Toy(signature, tools)
'''

GOOD = TOY.replace('answer if question[-1] in "02468" else "no idea"', "answer")
GOOD_TWO_CALLS = GOOD.replace(
    "answer = self.predict(question=question).answer",
    "self.predict(question=question)\n        answer = self.predict(question=question + '?').answer",
)
BROKEN = {
    "syntax": TOY.replace("def build(signature, tools):", "def build(signature, tools)"),
    "no_build": TOY.replace("def build(", "def make("),
    "bad_import": TOY.replace("import dspy\n", "import dspy\nimport subprocess\n", 1),
    "raising_build": TOY.replace("return Toy(signature, tools)", "raise RuntimeError('no')"),
    "raising_forward": TOY.replace("answer = self.predict", "answer = undefined_name + self.predict"),
    "empty": "",
}
HANGING = TOY.replace("answer = self.predict", "self.tools['wait']()\n        answer = self.predict")


class QA(dspy.Signature):
    """Answer the question."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField()


def tasks(n: int = 4) -> list[dspy.Example]:
    return [
        dspy.Example(task_id=f"t{i}", question=f"What is 2+2? #{i}", answer="4").with_inputs("question")
        for i in range(n)
    ]


def exact(example: dspy.Example, pred, trace=None) -> float:
    return float(str(pred.answer).strip() == example.answer)


def lm() -> ScriptedLM:
    return ScriptedLM({"": {"answer": "4"}})


RELEASE = threading.Event()
"""Set by the tests' teardown so a hanging candidate's abandoned thread can finish."""


def student(code: str = TOY, **kwargs) -> HarnessProgram:
    return HarnessProgram(
        HarnessSource(name="toy_h0", code=code).vouched(),
        QA,
        tools_factory=lambda ex: {"wait": RELEASE.wait},
        **kwargs,
    )


def source(code: str, hypothesis: str = "", parent: str | None = "c0000") -> HarnessSource:
    return HarnessSource(name="scripted", code=code, parent=parent, hypothesis=hypothesis)


class ScriptedProposer:
    """Returns the next scripted batch per call; an Exception in the script is raised."""

    label = "scripted"

    def __init__(self, batches: Sequence[Sequence[HarnessSource] | Exception]):
        self.batches = list(batches)
        self.calls = 0
        self.tokens = 0
        self.asked: list[int] = []

    def usage(self) -> ProposerUsage:
        return ProposerUsage(self.calls, self.tokens)

    def propose(self, archive, k: int) -> list[HarnessSource]:
        self.calls += 1
        self.tokens += 10
        self.asked.append(k)
        batch = self.batches.pop(0) if self.batches else []
        if isinstance(batch, Exception):
            raise batch
        return list(batch)


def archive_with(path, batches: Sequence[Sequence[HarnessSource]] = (), h0: str = TOY):
    """An archive holding h0 (TOY) plus the scripted batches, one iteration each, with real traces."""
    config = MetaHarnessConfig.paper(candidates=8, tasks=4, threads=2, timeout_s=30)
    optimizer = MetaHarness(
        proposer=ScriptedProposer(batches),
        metric=exact,
        archive_dir=path,
        lm=lm(),
        config=config,
        evaluator=InProcessEvaluator(threads=2, run_unvouched_in_process=True),  # toy harnesses: no sandbox
    )
    for _ in itertools.islice(optimizer.iterations(student(h0), tasks()), len(batches) + 1):
        pass
    return HarnessArchive(path)
