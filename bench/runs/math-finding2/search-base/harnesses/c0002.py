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
        self.solve = dspy.Predict(signature)

    def forward(self, **inputs: str) -> dspy.Prediction:
        return self.solve(**inputs)


def _build_before_own_sampling(signature: type[dspy.Signature], tools: dict[str, Callable]) -> dspy.Module:
    return DirectAnswer(signature)


# Added by the mutation proposer (own_sampling).
TEMPERATURE = 0.0
MAX_TOKENS = None


def run_with(inner: dspy.Module, inputs: dict[str, Any], **settings: Any) -> dspy.Prediction:
    """Run `inner` on a copy of the rollout's LM with `settings` changed.

    The copy's LM calls go back into the rollout LM's history, which is the trace
    the optimizer records and trains on, with the settings they were made under (a call's own
    and a nested block's settings win, as they did in the request).
    """
    lm = dspy.settings.lm
    own = lm.copy(**settings)
    try:
        with dspy.context(lm=own):
            return inner(**inputs)
    finally:
        for entry in own.history:
            entry["kwargs"] = {**settings, **(entry.get("kwargs") or {})}
        lm.history.extend(own.history)


class WithSampling(dspy.Module):
    """Run the harness under its own sampling: TEMPERATURE and MAX_TOKENS (None keeps the run's)."""

    def __init__(self, inner: dspy.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, **inputs: Any) -> dspy.Prediction:
        settings = {"temperature": TEMPERATURE, "max_tokens": MAX_TOKENS}
        return run_with(self.inner, inputs, **{k: v for k, v in settings.items() if v is not None})


def build(signature, tools):
    return WithSampling(_build_before_own_sampling(signature, tools))
