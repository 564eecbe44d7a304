"""A proposer's running count of what proposing cost, reported through `HarnessProposer.usage`."""

from __future__ import annotations

from whale_dspy.records import ProposerUsage, add_counts


class UsageMeter:
    """Calls, tokens (None once any call's tokens are unknown) and failures, in the order they came."""

    def __init__(self) -> None:
        self.calls = 0
        self.tokens: int | None = 0
        self.failures: list[str] = []

    def called(self, tokens: int | None) -> None:
        self.calls += 1
        self.tokens = add_counts(self.tokens, tokens)

    def failed(self, message: str) -> None:
        self.failures.append(message)

    def usage(self) -> ProposerUsage:
        return ProposerUsage(self.calls, self.tokens, tuple(self.failures))
