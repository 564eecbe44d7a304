"""Look for the gold answer in the inputs, the settings and the module's own attributes."""

from __future__ import annotations

import dspy

EXPECTED = None
"""The failure the sandbox must record with the static check off (None: no failure, no leak, score 0)."""
STATIC = None
"""What the static check reports before any process starts (None: it passes the check)."""


class Harness(dspy.Module):
    def __init__(self, signature, tools):
        super().__init__()
        self.solve = dspy.Predict(signature)
        self.tools = tools

    def forward(self, question: str) -> dspy.Prediction:
        found = [str(value) for value in (self.tools, dict(dspy.settings.config)) if "GOLD" in str(value)]
        found += [question] if "GOLD" in question else []
        return dspy.Prediction(answer=found[0] if found else self.solve(question=question).answer)


def build(signature, tools):
    return Harness(signature, tools)
