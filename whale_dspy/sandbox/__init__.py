"""Contained evaluation of untrusted harness code: one confined child process per candidate.

Attributes are imported lazily so that `python -m whale_dspy.sandbox.child`
confines itself before DSPy is imported.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ALLOWED_IMPORTS": "allowlist",
    "check_imports": "allowlist",
    "FAILURE_REASONS": "limits",
    "SandboxLimits": "limits",
    "SandboxFailure": "limits",
    "classify_failure": "limits",
    "LONG_EVALUATION_SECONDS": "limits",
    "CandidateProgram": "evaluator",
    "ContainedEvaluator": "evaluator",
    "SandboxedEvaluator": "evaluator",
    "run_contained": "evaluator",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"whale_dspy.sandbox.{_EXPORTS[name]}"), name)
