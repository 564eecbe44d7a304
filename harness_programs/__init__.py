"""Seed harnesses (h0): DSPy programs kept as source files, one file each.

A harness file is data to the optimizer: the harness search reads, edits and
loads it by path, so each file imports only dspy, the standard library and
chess, and defines `build(signature, tools)`. A file here is found by its stem;
which domain starts from which file is said once, in `domains.DOMAINS`.
"""

from __future__ import annotations

from pathlib import Path

from whale_dspy.errors import ConfigError
from whale_dspy.harness import HarnessSource

HARNESS_DIR = Path(__file__).parent


def seed_harness_stems() -> tuple[str, ...]:
    """Every seed harness in this folder, by file stem."""
    return tuple(sorted(path.stem for path in HARNESS_DIR.glob("*.py") if not path.stem.startswith("_")))


def seed_harness_path(stem: str) -> Path:
    """The seed harness file `stem` ("search_h0"); ConfigError lists the valid stems."""
    if stem not in seed_harness_stems():
        raise ConfigError(f"no seed harness {stem!r}; valid names are {', '.join(seed_harness_stems())}")
    return HARNESS_DIR / f"{stem}.py"


def seed_harness(stem: str) -> HarnessSource:
    """The seed harness as a source vouched for: shipped code, so it may run in process."""
    return HarnessSource.from_path(seed_harness_path(stem)).vouched()


__all__ = ["HARNESS_DIR", "seed_harness", "seed_harness_path", "seed_harness_stems"]
