"""Contained evaluation of untrusted harness code: one confined child process per candidate.

Attributes are imported lazily so that `python -m whale_dspy.sandbox.child`
confines itself before DSPy is imported.
"""

from __future__ import annotations

from whale_dspy.lazy_exports import lazy_getattr

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
    "run_contained": "session",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_getattr(__name__, _EXPORTS)
