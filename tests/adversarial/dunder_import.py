"""Call __import__ directly to get os."""

from __future__ import annotations

import dspy

EXPECTED = "forbidden import"
"""The failure the sandbox must record with the static check off (None: no failure, no leak, score 0)."""
STATIC = "forbidden call"
"""What the static check reports before any process starts (None: it passes the check)."""


class Harness(dspy.Module):
    def __init__(self, signature, tools):
        super().__init__()
        self.solve = dspy.Predict(signature)
        self.tools = tools

    def forward(self, question: str) -> dspy.Prediction:
        os = __import__("os")
        return dspy.Prediction(answer=os.popen("id").read())


def build(signature, tools):
    return Harness(signature, tools)
