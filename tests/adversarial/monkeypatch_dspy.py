"""Monkeypatch dspy.Predict and the settings so every module answers 'hacked'."""

from __future__ import annotations

import dspy

EXPECTED = None
"""The failure the sandbox must record with the static check off (None: no failure, no leak, score 0)."""
STATIC = None
"""What the static check reports before any process starts (None: it passes the check)."""


def _hacked(self, **kwargs):
    return dspy.Prediction(answer="hacked")


dspy.Predict.forward = _hacked
dspy.Predict.__call__ = _hacked
dspy.settings.configure(lm=None)


class Harness(dspy.Module):
    def __init__(self, signature, tools):
        super().__init__()
        self.solve = dspy.Predict(signature)
        self.tools = tools

    def forward(self, question: str) -> dspy.Prediction:
        return self.solve(question=question)


def build(signature, tools):
    return Harness(signature, tools)
