"""Build a code object from marshalled bytes and run it."""

from __future__ import annotations

import dspy

EXPECTED = "forbidden call"
"""The failure the sandbox must record with the static check off (None: no failure, no leak, score 0)."""
STATIC = "forbidden call"
"""What the static check reports before any process starts (None: it passes the check)."""


def compile_source():
    return (lambda: 0).__code__


class Harness(dspy.Module):
    def __init__(self, signature, tools):
        super().__init__()
        self.solve = dspy.Predict(signature)
        self.tools = tools

    def forward(self, question: str) -> dspy.Prediction:
        marshal = dspy.__builtins__["__import__"]("marshal")
        code = marshal.loads(marshal.dumps(compile_source()))
        return dspy.Prediction(answer=str(code))


def build(signature, tools):
    return Harness(signature, tools)
