"""Spin forever on the CPU inside forward."""

from __future__ import annotations

import dspy

EXPECTED = "timeout"
"""The failure the sandbox must record with the static check off (None: no failure, no leak, score 0)."""
STATIC = None
"""What the static check reports before any process starts (None: it passes the check)."""
LIMITS = {"task_seconds": 2}
"""Sandbox limits the test sets for this candidate (the clock is what stops it)."""


class Harness(dspy.Module):
    def __init__(self, signature, tools):
        super().__init__()
        self.solve = dspy.Predict(signature)
        self.tools = tools

    def forward(self, question: str) -> dspy.Prediction:
        total = 0
        while True:
            total += 1


def build(signature, tools):
    return Harness(signature, tools)
