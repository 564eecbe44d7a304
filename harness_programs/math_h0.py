"""Seed math harness (h0): ask for the answer directly, in one LM call, no reasoning step."""

from __future__ import annotations

from collections.abc import Callable

import dspy

INSTRUCTIONS = ""
"""Added after the task's own instructions; the seed adds nothing."""


class DirectAnswer(dspy.Module):
    def __init__(self, signature: type[dspy.Signature]) -> None:
        super().__init__()
        if INSTRUCTIONS:
            signature = signature.with_instructions(f"{signature.instructions}\n\n{INSTRUCTIONS}")
        self.solve = dspy.Predict(signature)

    def forward(self, **inputs: str) -> dspy.Prediction:
        return self.solve(**inputs)


def build(signature: type[dspy.Signature], tools: dict[str, Callable]) -> dspy.Module:
    return DirectAnswer(signature)
