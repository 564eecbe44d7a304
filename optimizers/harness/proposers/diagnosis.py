"""Reading a parent's failing traces for symptoms, and the edits that address each one.

The guided mutation proposer draws from these edits first: a harness whose moves
a tool rejects as illegal needs its answer constrained to the legal set, one whose
completions stop at max_tokens needs a larger budget, one that answers in format
and is still wrong needs reasoning or worked examples (and, when it was sampled, greedy
decoding or a vote). The symptoms are read off
what every rollout records (tool results, truncation, parse failures, empty
answers), so no domain is named here.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

from whale_dspy.records import WINNING_SAMPLE, Rollout

REJECTIONS = ("illegal", "invalid", "unreadable", "not allowed", "error")
"""How a tool's reply starts when it refuses the harness's input (only the start is read: later
text may quote anything)."""

REMEDIES: dict[str, tuple[str, ...]] = {
    "a tool rejected the answer": ("answer_from_choices",),
    "a completion hit max_tokens": ("more_tokens",),
    "the output did not parse": ("answer_fallback", "constrained_decoding_on"),
    "the answer was empty": ("verify_retry", "answer_fallback"),
    "the answer was wrong": ("labeled_demos", "chain_of_thought"),
    "a wrong answer was sampled": ("greedy_decoding", "majority_vote"),
}
"""Symptom -> the edits (by name) that address it."""


def symptoms(rollout: Rollout) -> set[str]:
    """What went wrong in one rollout, as REMEDIES keys."""
    found = set()
    if any(refused(call.result) or call.error for call in rollout.tool_calls):
        found.add("a tool rejected the answer")
    if any(call.truncated for call in rollout.lm_calls):
        found.add("a completion hit max_tokens")
    if "AdapterParseError" in (rollout.error or "") or any(not call.parsed for call in rollout.lm_calls):
        found.add("the output did not parse")
    elif rollout.error is None and not any(str(value or "").strip() for value in answers(rollout)):
        found.add("the answer was empty")
    if not found and rollout.error is None and rollout.score < 1.0:
        found.add("the answer was wrong")  # in format, accepted by every tool, and still scored below 1
        if any(float(call.sampling.get("temperature") or 0) > 0 for call in rollout.lm_calls):
            found.add("a wrong answer was sampled")  # an unlucky sample, maybe: decode greedily, or vote
    return found


def refused(reply: str | None) -> bool:
    return (reply or "").lower().startswith(REJECTIONS)


def answers(rollout: Rollout) -> list[object]:
    """The prediction's answer fields: not its reasoning, not the kept sample's id."""
    return [v for k, v in (rollout.prediction or {}).items() if k not in ("reasoning", WINNING_SAMPLE)]


def diagnose(rollouts: Sequence[Rollout]) -> collections.Counter[str]:
    """How many failing rollouts show each symptom."""
    return collections.Counter(s for rollout in rollouts if rollout.score < 1.0 for s in symptoms(rollout))


def indicated_edits(rollouts: Sequence[Rollout]) -> dict[str, str]:
    """Edit name -> why the traces call for it ('12 of 30 failing rollouts: a tool rejected the
    answer'), most frequent symptom first."""
    failing = sum(1 for rollout in rollouts if rollout.score < 1.0)
    out: dict[str, str] = {}
    for symptom, count in diagnose(rollouts).most_common():
        for edit in REMEDIES[symptom]:
            out.setdefault(edit, f"{count} of {failing} failing rollouts: {symptom}")
    return out
