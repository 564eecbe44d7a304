"""The one home of the defaults many layers share, so that a run, a search and an evaluation that
say nothing agree: concurrent rollouts and samples per task."""

from __future__ import annotations

DEFAULT_THREADS = 8
"""Concurrent rollouts of an evaluation or a phase (a GPU preset sizes its own)."""
DEFAULT_EVAL_K = 8
"""Samples per task of an evaluation (WHALE samples 8)."""
