"""Plain records shared by every layer: adapters, LM calls, tool calls, rollouts, SFT examples.

A rollout's trace is what the weight phase trains on and what the harness
proposer reads, so it keeps every LM call's messages and raw completion, every
tool call, the prediction, the score and the error (a parse failure included).
Records are frozen and round-trip through JSON (`to_dict` / `from_dict`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class AdapterRef:
    """A LoRA adapter on disk, served under a versioned name that is never reused."""

    name: str
    path: str
    base: str
    parent: str | None = None


@dataclass(frozen=True)
class TrainResult:
    """What one training run produced: the new adapter and its training signals."""

    adapter: AdapterRef
    loss: float
    examples: int
    tokens: int
    seconds: float


WINNING_SAMPLE = "winning_sample"
"""The prediction field in which a harness block that draws several samples of the harness (a
majority vote, verify-and-retry) names the rollout id of the sample whose answer it kept."""

TASK_GROUP = "task_group"
"""An example's optional field naming what it shares with other tasks (SQuAD: its article). Held-out
tasks come from other groups (SQuAD splits by article), so a few-shot demo drawn from one task is
never shown to another task of its group: the search would credit demos for help no held-out task
gets."""
GROUP_SETTING = "whale_task_group"
"""The `dspy.settings` key under which a rollout names its task's group (as `group_key`) to the harness."""


def group_key(group: object) -> str | None:
    """A task group's key, None for none: the same for a group read from the example and from the
    recorded labels (its JSON form), and a hash, so no harness reads a title as a search hint in
    passing (not a secret: a harness could hash every title it finds)."""
    if group is None:
        return None
    canonical = json.dumps(group, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(f"task-group:{canonical}".encode()).hexdigest()[:16]


@dataclass(frozen=True)
class LMCall:
    """One LM request of a rollout: the messages sent and the raw completion returned."""

    messages: tuple[dict[str, Any], ...]
    completion: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    sampling: dict[str, Any] = field(default_factory=dict)
    parsed: bool = True
    """False when the harness's adapter could not parse this completion (the call was retried).
    Seen for in-process rollouts (the weight phase's); a sandboxed child parses out of sight."""

    @property
    def truncated(self) -> bool:
        """The completion stopped at its `max_tokens` (DSPy warns once per such call)."""
        budget = self.sampling.get("max_tokens")
        return budget is not None and self.completion_tokens >= budget

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LMCall:
        return cls(**{**data, "messages": tuple(data["messages"])})


@dataclass(frozen=True)
class ToolCall:
    """One call of a domain tool by the harness, with its result or error text."""

    name: str
    args: dict[str, Any]
    result: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class Rollout:
    """One run of one harness on one task with one adapter: the full trace and its score."""

    task_id: str
    sample: int
    rollout_id: int
    harness: str
    adapter: str | None
    inputs: dict[str, Any]
    prediction: dict[str, Any] | None
    score: float
    error: str | None
    lm_calls: tuple[LMCall, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    seconds: float = 0.0

    @property
    def turns(self) -> int:
        return len(self.lm_calls)

    @property
    def prompt_tokens(self) -> int:
        return sum(call.prompt_tokens for call in self.lm_calls)

    @property
    def completion_tokens(self) -> int:
        return sum(call.completion_tokens for call in self.lm_calls)

    @property
    def truncated_calls(self) -> int:
        return sum(call.truncated for call in self.lm_calls)

    @property
    def parsed(self) -> bool:
        """False when the harness raised (a parse failure included) or returned nothing."""
        return self.error is None and self.prediction is not None

    @property
    def answering_calls(self) -> tuple[LMCall, ...]:
        """The LM calls that produced the answer: those of the sample a vote or retry kept (its
        prediction's WINNING_SAMPLE rollout id), else every call."""
        winner = (self.prediction or {}).get(WINNING_SAMPLE)
        if winner is None:
            return self.lm_calls
        return tuple(call for call in self.lm_calls if call.sampling.get("rollout_id") == winner)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Rollout:
        return cls(
            **{
                **data,
                "lm_calls": tuple(LMCall.from_dict(c) for c in data.get("lm_calls", ())),
                "tool_calls": tuple(ToolCall(**c) for c in data.get("tool_calls", ())),
            }
        )


@dataclass(frozen=True)
class SFTExample:
    """One supervised example: the prompt messages (masked) and the completion (trained on)."""

    messages: tuple[dict[str, Any], ...]
    completion: str

    def to_dict(self) -> dict[str, Any]:
        return {"messages": list(self.messages), "completion": self.completion}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SFTExample:
        return cls(messages=tuple(data["messages"]), completion=data["completion"])


@dataclass(frozen=True)
class ProposerUsage:
    """What a harness proposer has spent so far: LM calls, tokens (None: unknown, as for an external
    agent that reports none; never guessed as 0) and the failures it recorded."""

    calls: int = 0
    tokens: int | None = 0
    failures: tuple[str, ...] = ()

    def since(self, earlier: ProposerUsage) -> ProposerUsage:
        """What was spent after `earlier` (a snapshot of the same proposer)."""
        return ProposerUsage(
            self.calls - earlier.calls,
            add_counts(self.tokens, None if earlier.tokens is None else -earlier.tokens),
            self.failures[len(earlier.failures) :],
        )


def add_counts(first: int | None, second: int | None) -> int | None:
    """Counts (tokens, LM calls) where one unknown makes the total unknown."""
    return None if first is None or second is None else first + second
