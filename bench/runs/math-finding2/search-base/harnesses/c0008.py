"""Seed math harness (h0): ask for the answer directly, in one LM call, no reasoning step."""

from __future__ import annotations

from collections.abc import Callable

import dspy
from typing import Any

INSTRUCTIONS = ""
"""Added after the task's own instructions; the seed adds nothing."""


class DirectAnswer(dspy.Module):
    def __init__(self, signature: type[dspy.Signature]) -> None:
        super().__init__()
        if INSTRUCTIONS:
            signature = signature.with_instructions(f"{signature.instructions}\n\n{INSTRUCTIONS}")
        self.solve = dspy.ChainOfThought(signature)

    def forward(self, **inputs: str) -> dspy.Prediction:
        return self.solve(**inputs)


def _build_before_few_shot(signature: type[dspy.Signature], tools: dict[str, Callable]) -> dspy.Module:
    return DirectAnswer(signature)


# Added by the mutation proposer (few_shot).
DEMOS = [{'question': 'Nathan bought one large box of bananas. He saw that there are six bunches with eight bananas in a bunch and five bunches with seven bananas in a bunch. How many bananas did Nathan have?', 'reasoning': 'Nathan has \\(6 \\times 8 + 5 \\times 7 = 48 + 35 = 83\\) bananas.', 'answer': '83'}]


def own_task(demo: dict[str, Any], inputs: dict[str, Any]) -> bool:
    return any(key in demo and demo[key] == value for key, value in inputs.items())


def set_demos(program: dspy.Module, inputs: dict[str, Any]) -> None:
    """Each predictor gets the demos that hold one of its inputs and one of its outputs (DSPy's own
    rule for a demo it can show; a missing field shows as not supplied), cut to its fields: a
    labeled demo's worked solution reaches a reasoning predictor, a plain one sees the answer."""
    for _, predictor in program.named_predictors():
        signature = predictor.signature
        predictor.demos = [
            dspy.Example(**{name: demo[name] for name in signature.fields if name in demo})
            for demo in DEMOS
            if set(signature.input_fields) & set(demo)
            and set(signature.output_fields) & set(demo)
            and not own_task(demo, inputs)
        ]


class WithDemos(dspy.Module):
    """Show each predictor the DEMOS its fields can hold (DSPy few-shot), never one of the task at hand
    (a demo drawn from a search task would hand that task its own answer)."""

    def __init__(self, inner: dspy.Module) -> None:
        super().__init__()
        self.inner = inner
        set_demos(inner, {})

    def forward(self, **inputs: Any) -> dspy.Prediction:
        if not any(own_task(demo, inputs) for demo in DEMOS):
            return self.inner(**inputs)
        program = self.inner.deepcopy()
        set_demos(program, inputs)
        return program(**inputs)


def build(signature, tools):
    return WithDemos(_build_before_few_shot(signature, tools))
