"""Seed search harness (h0): search once with the question as the query, then answer from the hit."""

from __future__ import annotations

from collections.abc import Callable

import dspy
import collections
import re
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
WINNING_SAMPLE = "winning_sample"


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


def sample_id(index: int) -> int:
    """The rollout id sample `index` runs under: one of its own for every sample (the first too), so
    nested blocks (a vote inside a retry) never give two samples one id."""
    return (dspy.settings.lm.kwargs.get("rollout_id") or 0) * 1009 + index + 1


def run_sample(inner: dspy.Module, inputs: dict[str, Any], index: int) -> dspy.Prediction:
    """Run `inner` once under a distinct rollout id and seed, so neither DSPy's cache nor a
    seeded server sampler can repeat a sample; the prediction names the sample (WINNING_SAMPLE),
    so only the LM calls that produced a kept answer are trained on."""
    lm = dspy.settings.lm
    distinct = {"rollout_id": sample_id(index)}
    if lm.kwargs.get("seed") is not None:  # same seed, same prompt: the server draws the same sample
        distinct["seed"] = (lm.kwargs["seed"] * 1009 + index + 1) % 2**31
    prediction = run_with(inner, inputs, **distinct)
    if isinstance(prediction, dspy.Prediction) and WINNING_SAMPLE not in prediction:
        prediction[WINNING_SAMPLE] = distinct["rollout_id"]  # an inner block's own pick is more precise
    return prediction


def refuse_stateful(block: str, tools: dict[str, Any]) -> None:
    """A block that re-runs the harness cannot share one episode's tools between runs (each later
    run would play on in the same episode), and forking the episode would let a harness search
    against the verifier's replies: refused. (`stateful` is `whale_dspy.protocols.STATEFUL_TOOL`.)"""
    held = sorted(name for name, tool in tools.items() if getattr(tool, "stateful", False))
    if held:
        raise ValueError(f"{block} re-runs the harness, but its tools {held} hold one episode's state")


class MajorityVote(dspy.Module):
    """Sample the harness VOTES times and keep the most common answer (self-consistency)."""

    def __init__(self, inner: dspy.Module, signature: type[dspy.Signature], tools: dict[str, Any]) -> None:
        super().__init__()
        refuse_stateful("majority vote", tools)
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


def build(signature, tools):
    return MajorityVote(_build_before_majority_vote(signature, tools), signature, tools)
