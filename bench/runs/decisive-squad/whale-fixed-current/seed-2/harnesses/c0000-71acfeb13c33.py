"""Seed search harness (h0): search once with the question as the query, then answer from the hit."""

from __future__ import annotations

from collections.abc import Callable

import dspy

TOP_K = 1
"""Passages retrieved per question."""

INSTRUCTIONS = (
    "Answer the question using the passages. "
    "Reply with a short answer: a few words copied from the passages, no explanation."
)


class RetrieveThenAnswer(dspy.Module):
    def __init__(self, signature: type[dspy.Signature], search: Callable[..., str]) -> None:
        super().__init__()
        self.search = search
        with_passages = signature.prepend(
            "passages", dspy.InputField(desc="retrieved passages: [title] text")
        )
        self.answer = dspy.Predict(with_passages.with_instructions(INSTRUCTIONS))

    def forward(self, question: str) -> dspy.Prediction:
        passages = self.search(query=question, k=TOP_K)
        return self.answer(passages=passages, question=question)


def build(signature: type[dspy.Signature], tools: dict[str, Callable]) -> dspy.Module:
    return RetrieveThenAnswer(signature, tools["search"])
