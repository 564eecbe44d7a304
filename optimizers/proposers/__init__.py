"""Harness proposers: each reads the archive and writes new harness sources.

`proposer_from_spec` turns the CLI's `--proposer` value into one:
`mutation`, `guided` (mutation drawing first from the edits its traces call for),
`lm:MODEL`, `agent:MODEL`, `mechanism:MODEL` (MODEL: any litellm
id, e.g. openai/gpt-4o-mini, with its API key in the environment; the CLI also
takes `served`, the model the run's own server serves) or `command:'CMD'` (an
external coding agent; `{workdir}` is replaced by its working folder).
"""

from __future__ import annotations

from collections.abc import Callable

import dspy

from optimizers.proposers.agentic import AgenticProposer, ArchiveReader
from optimizers.proposers.command import CommandProposer
from optimizers.proposers.edits import EDITS, Edit, set_output_adapter
from optimizers.proposers.jail import DEFAULT_JAIL, Jail
from optimizers.proposers.lm import LMProposer
from optimizers.proposers.mechanism import MechanismProposer
from optimizers.proposers.mutation import MutationProposer
from whale_dspy.errors import ConfigError
from whale_dspy.protocols import HarnessProposer

PROPOSER_KINDS = ("mutation", "guided", "lm:MODEL", "agent:MODEL", "mechanism:MODEL", "command:CMD")


def proposer_from_spec(
    spec: str,
    *,
    seed: int = 0,
    prompt_only: bool = False,
    make_lm: Callable[[str], dspy.BaseLM] = dspy.LM,
    jail: Jail | None = DEFAULT_JAIL,
) -> HarnessProposer:
    """Build the proposer a spec names; ConfigError lists the valid forms. `jail`: what a
    `command:` proposer's agent may reach (the other proposers run no external program)."""
    kind, _, value = spec.partition(":")
    if kind in ("mutation", "guided") and not value:
        return MutationProposer(seed, prompt_only=prompt_only, guided=kind == "guided")
    if kind in ("lm", "agent") and value:
        proposer = LMProposer if kind == "lm" else AgenticProposer
        return proposer(make_lm(value), seed=seed, prompt_only=prompt_only)
    if kind == "mechanism" and value:
        return MechanismProposer(make_lm(value), seed=seed, prompt_only=prompt_only)
    if kind == "command" and value.strip():
        return CommandProposer(value, prompt_only=prompt_only, jail=jail)
    raise ConfigError(f"unknown proposer {spec!r}; valid forms: {', '.join(PROPOSER_KINDS)}")


__all__ = [
    "DEFAULT_JAIL",
    "EDITS",
    "PROPOSER_KINDS",
    "AgenticProposer",
    "ArchiveReader",
    "CommandProposer",
    "Edit",
    "Jail",
    "LMProposer",
    "MechanismProposer",
    "MutationProposer",
    "proposer_from_spec",
    "set_output_adapter",
]
