"""Seed search harness (h0): search once with the question as the query, then answer from the hit."""

from __future__ import annotations

from collections.abc import Callable

import dspy
from typing import Any

TOP_K = 3
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


def _build_before_own_sampling(signature: type[dspy.Signature], tools: dict[str, Callable]) -> dspy.Module:
    return RetrieveThenAnswer(signature, tools["search"])


# Added by the mutation proposer (own_sampling).
TEMPERATURE = 0.0
MAX_TOKENS = 512


def run_with(inner: dspy.Module, inputs: dict[str, Any], **settings: Any) -> dspy.Prediction:
    """Run `inner` on a copy of the rollout's LM with `settings` changed.

    The copy's LM calls go back into the rollout LM's history, which is the trace
    the optimizer records and trains on, with the settings they were made under.
    """
    lm = dspy.settings.lm
    own = lm.copy(**settings)
    try:
        with dspy.context(lm=own):
            return inner(**inputs)
    finally:
        for entry in own.history:
            entry["kwargs"] = {**(entry.get("kwargs") or {}), **settings}
        lm.history.extend(own.history)


class WithSampling(dspy.Module):
    """Run the harness under its own sampling: TEMPERATURE and MAX_TOKENS (None keeps the run's)."""

    def __init__(self, inner: dspy.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, **inputs: Any) -> dspy.Prediction:
        settings = {"temperature": TEMPERATURE, "max_tokens": MAX_TOKENS}
        return run_with(self.inner, inputs, **{k: v for k, v in settings.items() if v is not None})


def _build_before_json_adapter(signature, tools):
    return WithSampling(_build_before_own_sampling(signature, tools))


# Added by the mutation proposer (json_adapter).
OUTPUT_ADAPTER = "json"


class UseAdapter(dspy.Module):
    """Run the harness under the output adapter OUTPUT_ADAPTER names."""

    def __init__(self, inner: dspy.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, **inputs: Any) -> dspy.Prediction:
        adapter = dspy.JSONAdapter() if OUTPUT_ADAPTER == "json" else dspy.ChatAdapter()
        with dspy.context(adapter=adapter):
            return self.inner(**inputs)


def build(signature, tools):
    return UseAdapter(_build_before_json_adapter(signature, tools))
