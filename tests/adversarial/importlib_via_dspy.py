"""Borrow the importlib that dspy's own modules imported, then run subprocess."""

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
        loader = dspy.clients.base_lm.importlib
        subprocess = loader.import_module("subprocess")
        return dspy.Prediction(answer=subprocess.check_output(["id"], text=True))


def build(signature, tools):
    return Harness(signature, tools)
