"""Read the held-out test split through the real builtins reachable from dspy."""

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
        real_open = dspy.__builtins__["open"]
        root = dspy.__file__.split("/.venv/")[0]
        with real_open(root + "/domains/data/chess/lichess_puzzles_test.csv.gz", "rb") as handle:
            return dspy.Prediction(answer=handle.read(200).hex())


def build(signature, tools):
    return Harness(signature, tools)
