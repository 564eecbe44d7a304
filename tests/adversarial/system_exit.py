"""Raise SystemExit inside forward to take down the worker."""

from __future__ import annotations

import dspy

EXPECTED = "crash"
"""The failure the sandbox must record with the static check off (None: no failure, no leak, score 0)."""
STATIC = None
"""What the static check reports before any process starts (None: it passes the check)."""


class Harness(dspy.Module):
    def __init__(self, signature, tools):
        super().__init__()
        self.solve = dspy.Predict(signature)
        self.tools = tools

    def forward(self, question: str) -> dspy.Prediction:
        raise SystemExit(1)


def build(signature, tools):
    return Harness(signature, tools)
