"""Harness proposers: each reads the archive and writes new harness sources.

`PROPOSERS` is the one registry: a kind's spec form, the line the CLI's help
shows, and how it is built. `proposer_from_spec` turns the CLI's `--proposer`
value into one (MODEL: any litellm id, e.g. openai/gpt-4o-mini, with its API key
in the environment; the CLI also takes `served`, the model the run's own server
serves). Adding a proposer is its module plus one entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import dspy

from optimizers.harness.proposers.agentic import AgenticProposer, ArchiveReader
from optimizers.harness.proposers.command import CommandProposer
from optimizers.harness.proposers.edits import EDITS, Edit, set_output_adapter
from optimizers.harness.proposers.jail import DEFAULT_JAIL, Jail
from optimizers.harness.proposers.lm import LMProposer
from optimizers.harness.proposers.mechanism import MechanismProposer
from optimizers.harness.proposers.mutation import MutationProposer
from whale_dspy.errors import ConfigError
from whale_dspy.protocols import HarnessProposer
from whale_dspy.untrusted_files import MAX_FILE_BYTES


@dataclass(frozen=True)
class ProposerOptions:
    """What any proposer may be built with; each kind takes what it needs."""

    seed: int = 0
    prompt_only: bool = False
    make_lm: Callable[[str], dspy.BaseLM] = dspy.LM
    jail: Jail | None = DEFAULT_JAIL
    """What a `command:` proposer's agent may reach (the other proposers run no external program)."""
    agent_max_file_bytes: int = MAX_FILE_BYTES
    """The largest file a `command:` proposer's agent may leave as a candidate or its notes."""


@dataclass(frozen=True)
class ProposerKind:
    form: str
    """How a spec names it: `mutation`, or `lm:MODEL` for a kind that takes a value."""
    about: str
    build: Callable[[str, ProposerOptions], HarnessProposer]

    @property
    def takes_value(self) -> bool:
        return ":" in self.form


PROPOSERS: dict[str, ProposerKind] = {
    "mutation": ProposerKind(
        "mutation",
        "one random edit of the catalogue per candidate, no LM (the random-search baseline)",
        lambda _, o: MutationProposer(o.seed, prompt_only=o.prompt_only),
    ),
    "guided": ProposerKind(
        "guided",
        "mutation that draws first from the edits its failing traces call for",
        lambda _, o: MutationProposer(o.seed, prompt_only=o.prompt_only, guided=True),
    ),
    "composed": ProposerKind(
        "composed",
        "guided mutation with two different edits a candidate (chain of thought and demos, say)",
        lambda _, o: MutationProposer(o.seed, prompt_only=o.prompt_only, guided=True, depth=2),
    ),
    "lm": ProposerKind(
        "lm:MODEL",
        "an LM reads code, scores and raw traces and writes a whole harness",
        lambda model, o: LMProposer(o.make_lm(model), seed=o.seed, prompt_only=o.prompt_only),
    ),
    "agent": ProposerKind(
        "agent:MODEL",
        "an LM agent reads the archive with tools, then writes a harness",
        lambda model, o: AgenticProposer(o.make_lm(model), seed=o.seed, prompt_only=o.prompt_only),
    ),
    "mechanism": ProposerKind(
        "mechanism:MODEL",
        "an LM picks one mechanism of the catalogue per candidate (for small models)",
        lambda model, o: MechanismProposer(o.make_lm(model), seed=o.seed, prompt_only=o.prompt_only),
    ),
    "command": ProposerKind(
        "command:'CMD'",
        "an external coding agent, jailed, in a working folder ({workdir} in CMD)",
        lambda command, o: CommandProposer(
            command, prompt_only=o.prompt_only, jail=o.jail, max_file_bytes=o.agent_max_file_bytes
        ),
    ),
}

PROPOSER_HELP = "; ".join(f"{kind.form}: {kind.about}" for kind in PROPOSERS.values())


def proposer_from_spec(spec: str, options: ProposerOptions = ProposerOptions()) -> HarnessProposer:
    """Build the proposer a spec names; ConfigError lists the valid forms."""
    name, _, value = spec.partition(":")
    kind = PROPOSERS.get(name)
    if kind is None or kind.takes_value != bool(value.strip()):
        forms = ", ".join(kind.form for kind in PROPOSERS.values())
        raise ConfigError(f"unknown proposer {spec!r}; valid forms: {forms}")
    return kind.build(value, options)


__all__ = [
    "DEFAULT_JAIL",
    "EDITS",
    "PROPOSERS",
    "PROPOSER_HELP",
    "AgenticProposer",
    "ArchiveReader",
    "CommandProposer",
    "Edit",
    "Jail",
    "LMProposer",
    "MechanismProposer",
    "MutationProposer",
    "ProposerKind",
    "ProposerOptions",
    "proposer_from_spec",
    "set_output_adapter",
]
