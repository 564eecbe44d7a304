"""Shared pieces of the weight-phase tests: tiny harnesses, a signature, scripted replies."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import dspy

from optimizers import RejectionSamplingFinetune, RFTConfig
from whale_dspy.harness import HarnessProgram, HarnessSource
from whale_dspy.rundir import RunDir
from whale_dspy.testing.fake_backend import FakeBackend
from whale_dspy.testing.fake_trainer import FakeTrainer
from whale_dspy.testing.scripted_lm import ScriptedLM

SINGLE_CALL = """
import dspy

def build(signature, tools):
    return dspy.Predict(signature)
"""

TWO_CALLS = """
import dspy

class DraftThenAnswer(dspy.Module):
    def __init__(self, signature):
        super().__init__()
        self.draft = dspy.Predict("question -> draft")
        self.final = dspy.Predict(signature.append("draft", dspy.InputField(), type_=str))

    def forward(self, question):
        draft = self.draft(question=question).draft
        return self.final(question=question, draft=draft)

def build(signature, tools):
    return DraftThenAnswer(signature)
"""


class QA(dspy.Signature):
    question: str = dspy.InputField()
    answer: str = dspy.OutputField()


def reply(**fields: str) -> str:
    """A raw completion in ChatAdapter's format, as a model that follows it would write."""
    body = "".join(f"[[ ## {name} ## ]]\n{value}\n\n" for name, value in fields.items())
    return body + "[[ ## completed ## ]]"


def exact_match(example: dspy.Example, pred: dspy.Prediction, trace: object = None) -> float:
    return float(pred.answer.strip() == example.answer)


def contains_answer(example: dspy.Example, pred: dspy.Prediction, trace: object = None) -> float:
    return float(example.answer in pred.answer)


def tasks(*names: str) -> list[dspy.Example]:
    """Tasks whose question carries a unique key (Q<NAME>) and whose answer is the name lowercased."""
    return [
        dspy.Example(question=f"Q{name}?", answer=name.lower(), task_id=name).with_inputs("question")
        for name in names
    ]


def program(code: str = SINGLE_CALL) -> HarnessProgram:
    return HarnessProgram(HarnessSource("h0", code).vouched(), QA)


def make_rft(
    replies: dict,
    tmp_path: Path,
    *,
    keyed_by: str = "prompt",
    trainer: FakeTrainer | None = None,
    fail_loading: set[str] | None = None,
    metric: Callable[..., float] = exact_match,
    **config: object,
) -> tuple[RejectionSamplingFinetune, FakeBackend, FakeTrainer]:
    """An RFT optimizer on a scripted backend; threads=1 so replies are consumed in job order."""
    backend = FakeBackend(ScriptedLM(replies, keyed_by=keyed_by), fail_loading=fail_loading)
    trainer = trainer or FakeTrainer()
    settings = {"batch_size": 2, "k": 2, "threads": 1, "run_tag": "01", "steps": 1, **config}
    rft = RejectionSamplingFinetune(
        backend=backend,
        trainer=trainer,
        metric=metric,
        config=RFTConfig(**settings),
        run_dir=RunDir.open(tmp_path / "run", {"test": True}),
        base="base-model",
    )
    return rft, backend, trainer
