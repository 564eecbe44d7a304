"""Spin forever while the module loads (before any task starts)."""

from __future__ import annotations

import dspy

EXPECTED = "timeout"
"""The failure the sandbox must record with the static check off (None: no failure, no leak, score 0)."""
STATIC = None
"""What the static check reports before any process starts (None: it passes the check)."""
LIMITS = {"cpu_seconds": 4}
"""Sandbox limits the test sets for this candidate (the clock is what stops it)."""


SPIN = 0
while True:
    SPIN += 1


class Harness(dspy.Module):
    def __init__(self, signature, tools):
        super().__init__()
        self.solve = dspy.Predict(signature)
        self.tools = tools

    def forward(self, question: str) -> dspy.Prediction:
        return self.solve(question=question)


def build(signature, tools):
    return Harness(signature, tools)
