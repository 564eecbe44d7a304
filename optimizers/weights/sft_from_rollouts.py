"""From verified rollouts to SFT data: the rejection-sampling half of the weight phase.

The model is trained on the harness's own formatted LM calls, never on bare
answers: an adapter trained on plain chat answers breaks DSPy's output format
(FACTS.md). Every LM call of an accepted rollout becomes one example whose
messages (system prompt, task, earlier turns, tool outputs) the trainer masks
and whose completion it learns.
"""

from __future__ import annotations

from collections.abc import Sequence

from whale_dspy.records import Rollout, SFTExample


def accepted(rollouts: Sequence[Rollout], threshold: float) -> list[Rollout]:
    """Rollouts that a verifier scored above `threshold` (WHALE keeps reward > 0.5)."""
    return [r for r in rollouts if r.error is None and r.score > threshold]


def sft_examples(rollouts: Sequence[Rollout]) -> list[SFTExample]:
    """One example per LM call that produced each rollout's answer, in rollout order then call order.

    A call whose completion the adapter could not parse is left out: in a rollout that
    succeeded through DSPy's JSON retry, that malformed first answer is what not to learn.
    So are the calls of samples a majority vote or a retry did not keep (the losing votes).
    """
    return [
        SFTExample(messages=call.messages, completion=call.completion)
        for rollout in rollouts
        for call in rollout.answering_calls
        if call.parsed
    ]
