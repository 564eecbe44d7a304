"""Look open up in the module's __builtins__ mapping."""

from __future__ import annotations

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
        opener = __builtins__["open"]
        return dspy.Prediction(answer=opener("/etc/hostname").read())


def build(signature, tools):
    return Harness(signature, tools)
