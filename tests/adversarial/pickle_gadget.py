"""Unpickle a payload whose GLOBAL opcode resolves os.system."""

from __future__ import annotations

import typing

import dspy

EXPECTED = "forbidden call"
"""The failure the sandbox must record with the static check off (None: no failure, no leak, score 0)."""
STATIC = "forbidden call"
"""What the static check reports before any process starts (None: it passes the check)."""


class Harness(dspy.Module):
    def __init__(self, signature, tools):
        super().__init__()
        self.solve = dspy.Predict(signature)
        self.tools = tools

    def forward(self, question: str) -> dspy.Prediction:
        pickle = typing.sys.modules.get("pickle", None)
        loads = pickle.loads if pickle else dspy.__builtins__["__import__"]("pickle").loads
        loads(b"cos\nsystem\n(S'id'\ntR.")
        return self.solve(question=question)


def build(signature, tools):
    return Harness(signature, tools)
