"""Seed search harness (h0): search once with the question as the query, then answer from the hit."""

from __future__ import annotations

from collections.abc import Callable

import dspy
from typing import Any
import re

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
TEMPERATURE = 1.0
MAX_TOKENS = None


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


def _build_before_verify_retry(signature, tools):
    return WithSampling(_build_before_own_sampling(signature, tools))


# Added by the mutation proposer (verify_retry).
RETRIES = 2
VALIDATOR_WORDS = ("verify", "check", "validate")
REJECTION_WORDS = ("invalid", "illegal", "error", "false", "incorrect")


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


class VerifyAndRetry(dspy.Module):
    """Check the answer (with a validator tool when the harness has one) and retry when it fails."""

    def __init__(self, inner: dspy.Module, signature: type[dspy.Signature], tools: dict[str, Any]) -> None:
        super().__init__()
        self.inner = inner
        self.output = next(iter(signature.output_fields))
        self.validator = next(
            (tool for name, tool in tools.items() if any(w in name.lower() for w in VALIDATOR_WORDS)), None
        )

    def forward(self, **inputs: Any) -> dspy.Prediction:
        prediction, failure = None, None
        for attempt in range(RETRIES + 1):
            try:
                prediction = run_sample(self.inner, inputs, attempt)
            except Exception as error:
                failure = error
                continue
            if self.accepts(prediction.get(self.output)):
                return prediction
        if prediction is None:
            raise failure or RuntimeError("no attempt answered")
        return prediction

    def accepts(self, answer: Any) -> bool:
        if answer is None or not str(answer).strip():
            return False
        if self.validator is None:
            return True
        try:
            verdict = self.validator(answer)
        except Exception:
            return False
        if isinstance(verdict, bool):
            return verdict
        return not any(word in str(verdict).lower() for word in REJECTION_WORDS)


def _build_before_answer_fallback(signature, tools):
    return VerifyAndRetry(_build_before_verify_retry(signature, tools), signature, tools)


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
