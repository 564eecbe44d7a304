"""Allocate memory without bound inside forward."""

from __future__ import annotations

import dspy

EXPECTED = "memory"
"""The failure the sandbox must record with the static check off (None: no failure, no leak, score 0)."""
STATIC = None
"""What the static check reports before any process starts (None: it passes the check)."""


class Harness(dspy.Module):
    def __init__(self, signature, tools):
        super().__init__()
        self.solve = dspy.Predict(signature)
        self.tools = tools

    def forward(self, question: str) -> dspy.Prediction:
        hoard = []
        while True:
            hoard.append(bytearray(50_000_000))


def build(signature, tools):
    return Harness(signature, tools)
