"""The task families WHALE optimizes on: data splits, verifier metrics and per-rollout tools.

`get_domain(name, **options)` imports the domain's module on demand, so
`import domains` stays light; data is read on the first `load`.
"""

from __future__ import annotations

import importlib
from typing import Any

from whale_dspy.errors import ConfigError
from whale_dspy.protocols import Domain

_REGISTRY = {
    "chess": ("domains.chess_puzzles", "ChessDomain"),
    "math": ("domains.math_problems", "GSM8KDomain"),
    "math500": ("domains.math_problems", "Math500Domain"),
    "search": ("domains.search_qa", "HotpotQADomain"),
    "squad": ("domains.search_qa", "SquadDomain"),
}

DOMAIN_NAMES = tuple(_REGISTRY)


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
    if name not in _REGISTRY:
        raise ConfigError(f"unknown domain {name!r}; valid domains are {', '.join(DOMAIN_NAMES)}")
    module_name, class_name = _REGISTRY[name]
    cls = getattr(importlib.import_module(module_name), class_name)
    try:
        return cls(**{**parsed, **options})
    except TypeError as exc:
        raise ConfigError(f"bad options for domain {name!r}: {exc}") from exc


__all__ = ["DOMAIN_NAMES", "get_domain", "parse_domain_spec"]
