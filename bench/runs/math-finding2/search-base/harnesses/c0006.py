"""Seed math harness (h0): ask for the answer directly, in one LM call, no reasoning step."""

from __future__ import annotations

from collections.abc import Callable

import dspy
import re
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


def _build_before_answer_fallback(signature: type[dspy.Signature], tools: dict[str, Callable]) -> dspy.Module:
    return DirectAnswer(signature)


# Added by the mutation proposer (answer_fallback).


def extract_answer(text: str) -> str | None:
    """The text after the last 'answer' marker, else the last number, else the last non-empty line."""
    marked = re.findall(r"answer\W*(?:is\b)?[\s:=#\]\"']*([^\n\"{}]+)", text, flags=re.IGNORECASE)
    if marked and marked[-1].strip(" ."):
        return marked[-1].strip(" .")
    numbers = re.findall(r"-?\d[\d,]*(?:\.\d+)?", text)
    if numbers:
        return numbers[-1].replace(",", "")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else None


def last_completion() -> str:
    """The raw text of the rollout LM's latest completion ('' when there is none)."""
    history = dspy.settings.lm.history
    outputs = (history[-1].get("outputs") or [""]) if history else [""]
    first = outputs[0]
    return (first.get("text") or "") if isinstance(first, dict) else str(first)


class AnswerFallback(dspy.Module):
    """When the harness raises (a parse failure) or leaves the answer empty, read it off the raw text."""

    def __init__(self, inner: dspy.Module, signature: type[dspy.Signature]) -> None:
        super().__init__()
        self.inner = inner
        self.output = next(iter(signature.output_fields))

    def forward(self, **inputs: Any) -> dspy.Prediction:
        try:
            prediction = self.inner(**inputs)
        except Exception as error:
            prediction, failure = None, error
        else:
            if str(prediction.get(self.output, "") or "").strip():
                return prediction
            failure = None
        answer = extract_answer(last_completion())
        if answer is None:
            if failure is not None:
                raise failure
            return prediction
        return dspy.Prediction(**{self.output: answer})


def build(signature, tools):
    return AnswerFallback(_build_before_answer_fallback(signature, tools), signature)
