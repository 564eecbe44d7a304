"""Print gigabytes to stdout to fill the disk or the parent's memory."""

from __future__ import annotations

import dspy

EXPECTED = "output limit"
"""The failure the sandbox must record with the static check off (None: no failure, no leak, score 0)."""
STATIC = None
"""What the static check reports before any process starts (None: it passes the check)."""


class Harness(dspy.Module):
    def __init__(self, signature, tools):
        super().__init__()
        self.solve = dspy.Predict(signature)
        self.tools = tools

    def forward(self, question: str) -> dspy.Prediction:
        line = "x" * 1_000_000
        while True:
            print(line)


def build(signature, tools):
    return Harness(signature, tools)
