"""The user's program's tools, LM script, tasks and metric that the student tests and the tests of
a user's own DSPy program through the optimizers share (the program itself is in user_programs.py)."""

from __future__ import annotations

import dspy

from whale_dspy.testing import ScriptedLM

KNOWLEDGE = {"capital france": ["Paris is the capital of France.", "France is in Europe."]}


def lookup(query: str, k: int) -> list[str]:
    """Notes about a query, at most k."""
    return KNOWLEDGE.get(query, [])[:k]


def scripted() -> ScriptedLM:
    """The rewrite step answers a query, the answer step reads the notes (keys: the prompt's fields)."""
    return ScriptedLM({"## notes ##": {"answer": "Paris"}, "## question ##": {"query": "capital france"}})


def questions(n: int = 2) -> list[dspy.Example]:
    return [
        dspy.Example(
            task_id=f"q{i}", question=f"What is the capital of France? #{i}", answer="Paris"
        ).with_inputs("question")
        for i in range(n)
    ]


def exact(example, pred, trace=None) -> float:
    return float(pred.answer == example.answer)
