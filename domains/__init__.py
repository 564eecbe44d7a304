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


def get_domain(name: str, **options: Any) -> Domain:
    """A new domain instance; options go to its constructor (e.g. chess `max_rating`, search `score`)."""
    if name not in _REGISTRY:
        raise ConfigError(f"unknown domain {name!r}; valid domains are {', '.join(DOMAIN_NAMES)}")
    module_name, class_name = _REGISTRY[name]
    cls = getattr(importlib.import_module(module_name), class_name)
    try:
        return cls(**options)
    except TypeError as exc:
        raise ConfigError(f"bad options for domain {name!r}: {exc}") from exc


__all__ = ["DOMAIN_NAMES", "get_domain"]
