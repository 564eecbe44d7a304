"""Seed harnesses (h0), one per domain: DSPy programs kept as source files.

A harness file is data to the optimizer: the harness search reads, edits and
loads it by path, so each file imports only dspy, the standard library, chess
and `harness_programs.blocks`, and defines `build(signature, tools)`.
"""

from __future__ import annotations

from pathlib import Path

from whale_dspy.errors import ConfigError
from whale_dspy.harness import HarnessSource

HARNESS_DIR = Path(__file__).parent

SEED_HARNESSES = {
    "chess": "chess_h0",
    "math": "math_h0",
    "math500": "math_h0",
    "search": "search_h0",
    "squad": "search_h0",
}
"""Domain name -> stem of its seed harness file in this folder."""


def seed_harness_path(domain_or_stem: str) -> Path:
    """The seed harness file for a domain name ("squad", "squad:score=f1") or a harness stem ("search_h0")."""
    name = domain_or_stem.partition(":")[0]  # a domain spec's options do not change its seed harness
    stem = SEED_HARNESSES.get(name, name)
    if stem not in SEED_HARNESSES.values():
        valid = sorted(set(SEED_HARNESSES) | set(SEED_HARNESSES.values()))
        raise ConfigError(f"no seed harness for {domain_or_stem!r}; valid names are {', '.join(valid)}")
    return HARNESS_DIR / f"{stem}.py"


def seed_harness(domain_or_stem: str) -> HarnessSource:
    """The seed harness as a source vouched for: shipped code, so it may run in process."""
    return HarnessSource.from_path(seed_harness_path(domain_or_stem)).vouched()


__all__ = ["HARNESS_DIR", "SEED_HARNESSES", "seed_harness", "seed_harness_path"]
