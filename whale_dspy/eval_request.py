"""What one evaluation runs: the single argument every evaluator takes.

Kept apart from `whale_dspy.evaluation` so the seams (`whale_dspy.protocols`) can name it without
importing the evaluation machinery.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from whale_dspy.defaults import DEFAULT_EVAL_K
from whale_dspy.records import Rollout

if TYPE_CHECKING:
    import dspy


@dataclass(frozen=True)
class EvalRequest:
    """One evaluation, as every evaluator takes it (`evaluate` and each `CandidateEvaluator`).

    Rollout ids derive from (`namespace`, task, sample), so the same request draws the same samples.
    """

    examples: Sequence[dspy.Example]
    metric: Callable[..., float]
    """Scores a rollout: (example, prediction, trace=None) -> float (`whale_dspy.rollouts.Metric`)."""
    lm: dspy.BaseLM | None = None
    """The LM the rollouts call (default: the program's bound LM, else DSPy's configured one)."""
    k: int = DEFAULT_EVAL_K
    """Samples per task."""
    namespace: str = "eval"
    trace_path: Path | None = None
    """Where each rollout is appended as it finishes (JSON lines)."""
    on_rollout: Callable[[Rollout], None] | None = None
    done: Sequence[Rollout] = ()
    """Rollouts an interrupted call of this same evaluation recorded: their (task, sample) pairs are
    not run again, and the report counts them; those of other tasks or samples are ignored."""
    sampling: Mapping[str, Any] = field(default_factory=dict)
    """LM settings (temperature, max_tokens) over the LM's own, for this evaluation only."""


__all__ = ["EvalRequest"]
