"""The one home of the defaults many layers share, so that a run, a search and an evaluation that
say nothing agree: concurrent rollouts, samples per task, and how rollouts sample."""

from __future__ import annotations

DEFAULT_THREADS = 8
"""Concurrent rollouts of an evaluation or a phase (a GPU preset sizes its own)."""
DEFAULT_EVAL_K = 8
"""Samples per task of an evaluation (WHALE samples 8)."""
DEFAULT_TEMPERATURE = 1.0
"""Sampling temperature of rollouts and checkpoint evaluations: k samples of one task must differ
(a served LM's own default, `backends.remote.DEFAULT_SAMPLING`, is greedy, for plain use)."""
DEFAULT_MAX_TOKENS = 256
"""Completion budget of each rollout LM call where no preset sets one (the presets do)."""
