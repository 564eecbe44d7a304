"""Climb from a generator frame to the caller's globals to find the metric."""

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
        def gen():
            yield 1

        frame = gen().gi_frame
        while frame.f_back is not None:
            frame = frame.f_back
        return dspy.Prediction(answer=str(sorted(frame.f_globals)))


def build(signature, tools):
    return Harness(signature, tools)
