"""Seed search harness (h0): search once with the question as the query, then answer from the hit."""

from __future__ import annotations

from collections.abc import Callable

import dspy
import collections
from typing import Any

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


def _build_before_majority_vote(signature: type[dspy.Signature], tools: dict[str, Callable]) -> dspy.Module:
    return RetrieveThenAnswer(signature, tools["search"])


# Added by the mutation proposer (majority_vote).
VOTES = 5


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


def run_sample(inner: dspy.Module, inputs: dict[str, Any], index: int) -> dspy.Prediction:
    """Run `inner` once under a distinct rollout id and seed, so neither DSPy's cache nor a
    seeded server sampler can repeat a sample."""
    lm = dspy.settings.lm
    if index == 0:
        return inner(**inputs)
    distinct = {"rollout_id": (lm.kwargs.get("rollout_id") or 0) * 1009 + index}
    if lm.kwargs.get("seed") is not None:  # same seed, same prompt: the server draws the same sample
        distinct["seed"] = (lm.kwargs["seed"] * 1009 + index) % 2**31
    return run_with(inner, inputs, **distinct)


class MajorityVote(dspy.Module):
    """Sample the harness VOTES times and keep the most common answer (self-consistency)."""

    def __init__(self, inner: dspy.Module, signature: type[dspy.Signature]) -> None:
        super().__init__()
        self.inner = inner
        self.output = next(iter(signature.output_fields))

    def forward(self, **inputs: Any) -> dspy.Prediction:
        predictions, failure = [], None
        for index in range(VOTES):
            try:
                predictions.append(run_sample(self.inner, inputs, index))
            except Exception as error:
                failure = error
        if not predictions:
            raise failure or RuntimeError("no sample answered")
        votes = collections.Counter(str(p.get(self.output, "")).strip() for p in predictions)
        winner = votes.most_common(1)[0][0]
        return next(p for p in predictions if str(p.get(self.output, "")).strip() == winner)


def _build_before_own_sampling(signature, tools):
    return MajorityVote(_build_before_majority_vote(signature, tools), signature)


# Added by the mutation proposer (own_sampling).
TEMPERATURE = 0.0
MAX_TOKENS = None


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
