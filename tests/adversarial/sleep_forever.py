"""Block forever on the wall clock (the test allows `time` so only the clock stops it)."""

from __future__ import annotations

import time

import dspy

EXPECTED = "timeout"
"""The failure the sandbox must record with the static check off (None: no failure, no leak, score 0)."""
STATIC = None
"""What the static check reports before any process starts (None: it passes the check)."""
LIMITS = {"task_seconds": 2}
"""Sandbox limits the test sets for this candidate (the clock is what stops it)."""
EXTRA_IMPORTS = ("time",)
"""Modules the test adds to the allowlist for this candidate."""


class Harness(dspy.Module):
    def __init__(self, signature, tools):
        super().__init__()
        self.solve = dspy.Predict(signature)
        self.tools = tools

    def forward(self, question: str) -> dspy.Prediction:
        time.sleep(10_000)
        return self.solve(question=question)


def build(signature, tools):
    return Harness(signature, tools)
