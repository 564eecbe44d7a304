"""DSPy's LM internals are touched by one module only (whale_dspy/dspy_lm_seam.py), so that a DSPy
upgrade (3.5 removes `lm(messages=...)` and custom BaseLM calls) changes one file."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("whale_dspy", "optimizers", "domains", "harness_programs", "whale_cli", "bench", "scripts")
SEAM = ROOT / "whale_dspy" / "dspy_lm_seam.py"

MARKERS = {
    "sends messages to an LM": re.compile(r"(\blm|\))\(\s*messages\s*="),
    "uses a private DSPy name": re.compile(r"\bdspy(\.\w+)*\._(?!_)\w+"),  # not a dunder
    "sets an LM's engine": re.compile(r"\._(async_)?engine_spec\b"),
    "imports a private DSPy name": re.compile(r"from dspy[\w.]* import [^\n]*\b_\w+"),
    "unwraps DSPy's LM call": re.compile(r"\bacall\.__wrapped__|__call__\.__wrapped__"),
}
LM_CALLS = {"__call__", "acall", "forward", "aforward"}


def sources() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


def lm_call_overrides(path: Path) -> list[str]:
    """Classes of an LM (a base named like BaseLM, LM, DummyLM) that define one of its calls."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.ClassDef):
            continue
        bases = [ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases]
        if any(base.endswith("LM") for base in bases):
            defined = {
                item.name for item in node.body if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
            }
            found += [f"{node.name}.{name}" for name in sorted(defined & LM_CALLS)]
    return found


def uses(path: Path) -> list[str]:
    text = path.read_text()
    return [what for what, marker in MARKERS.items() if marker.search(text)] + [
        f"overrides {name}" for name in lm_call_overrides(path)
    ]


def test_dspy_lm_internals_are_used_in_the_seam_only():
    outside = {
        str(path.relative_to(ROOT)): found for path in sources() if path != SEAM if (found := uses(path))
    }
    assert outside == {}


def test_the_seam_is_where_the_markers_find_them():
    """The markers do find what they look for: every kind of use is in the seam."""
    assert set(uses(SEAM)) >= set(MARKERS) | {"overrides AnsweringLM.__call__", "overrides RoutedLM.acall"}
