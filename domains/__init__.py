"""The task families WHALE optimizes on: data splits, verifier metrics and per-rollout tools.

`DOMAINS` is the one registry: adding a domain is its module plus one entry here,
which names its class, its seed harness (a stem in `harness_programs`) and the
line the CLI's help shows. `get_domain(name, **options)` imports the domain's
module on demand, so `import domains` stays light; data is read on the first `load`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from whale_dspy.errors import ConfigError
from whale_dspy.protocols import Domain


@dataclass(frozen=True)
class DomainEntry:
    module: str
    cls: str
    seed_harness: str
    """The stem of its seed harness file in `harness_programs` (h0)."""
    about: str
    """One line for the CLI's help: the data and how an answer is scored."""


_CHESS, _MATH, _QA = "domains.chess_puzzles", "domains.math_problems", "domains.search_qa"
DOMAINS: dict[str, DomainEntry] = {
    "chess": DomainEntry(
        _CHESS, "ChessDomain", "chess_h0", "Lichess puzzles, solved when the moves replay the line"
    ),
    "math": DomainEntry(_MATH, "GSM8KDomain", "math_h0", "GSM8K, the final number"),
    "math500": DomainEntry(_MATH, "Math500Domain", "math_h0", "MATH-500, LaTeX by math-verify"),
    "search": DomainEntry(
        _QA, "HotpotQADomain", "search_h0", "HotpotQA over BM25 passages, exact match or score=f1"
    ),
    "squad": DomainEntry(
        _QA, "SquadDomain", "search_h0", "SQuAD over BM25 passages, exact match or score=f1"
    ),
}

DOMAIN_NAMES = tuple(DOMAINS)
DOMAIN_HELP = (
    "; ".join(f"{name}: {entry.about}" for name, entry in DOMAINS.items())
    + "; options as NAME:key=value (e.g. search:score=f1)"
)


def domain_entry(spec: str) -> DomainEntry:
    """The registry entry of a domain name or spec ("squad:score=f1"); ConfigError lists the names."""
    name = spec.partition(":")[0]
    if name not in DOMAINS:
        raise ConfigError(f"unknown domain {name!r}; valid domains are {', '.join(DOMAIN_NAMES)}")
    return DOMAINS[name]


def parse_domain_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """`search` or `search:score=f1,...`: a domain name and its constructor options.

    The spec is what the CLI's --domain takes, so an option such as the QA score or a
    chess rating cap travels with the run's settings and its "run it again" command.
    """
    name, _, rest = spec.partition(":")
    options: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"domain option {item!r} in {spec!r} is not key=value (e.g. search:score=f1)")
        options[key.strip()] = _option_value(value.strip())
    return name, options


def _option_value(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def get_domain(spec: str, **options: Any) -> Domain:
    """A new domain instance from a name or spec; options go to its constructor (e.g. chess
    `max_rating`, search `score`), keyword options over those in the spec."""
    name, parsed = parse_domain_spec(spec)
    entry = domain_entry(name)
    cls = getattr(importlib.import_module(entry.module), entry.cls)
    try:
        return cls(**{**parsed, **options})
    except TypeError as exc:
        raise ConfigError(f"bad options for domain {name!r}: {exc}") from exc


__all__ = [
    "DOMAINS",
    "DOMAIN_HELP",
    "DOMAIN_NAMES",
    "DomainEntry",
    "domain_entry",
    "get_domain",
    "parse_domain_spec",
]
