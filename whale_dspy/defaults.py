"""The one home of the defaults many layers share, so that a run, a search and an evaluation that
say nothing agree: concurrent rollouts, samples per task, and how rollouts sample."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

DEFAULT_THREADS = 8
"""Concurrent rollouts of an evaluation or a phase (a GPU preset sizes its own)."""
DEFAULT_EVAL_K = 8
"""Samples per task of an evaluation (WHALE samples 8)."""
DEFAULT_TEMPERATURE = 1.0
"""Sampling temperature of rollouts and checkpoint evaluations: k samples of one task must differ
(a served LM used plainly is greedy: `SERVED_LM_SAMPLING`)."""
DEFAULT_MAX_TOKENS = 256
"""Completion budget of each rollout LM call where no preset sets one (the presets do)."""
SERVED_LM_SAMPLING: Mapping[str, float | int] = MappingProxyType({"temperature": 0.0, "max_tokens": 512})
"""How a served model's DSPy LM samples when its caller says nothing (`backend.lm()` used plainly):
greedy, so a question asked twice gets one answer. Runs never rely on it: they bind their own."""
SERVER_RESTARTS = 2
"""How often `whale run` and `whale compare` start their own inference server again after it died
mid-run, before they stop: a long run on shared cores outlives an engine crash, and each restart
resumes the run from its records as `--resume` would."""
PROPOSER_TEMPERATURE = 1.0
"""Sampling temperature of an LM proposer: the candidates of one iteration must differ."""
PROPOSER_MAX_TOKENS = 256
"""Completion budget of a proposer on the run's own served model (a mechanism choice and one
sentence); an API model writing whole harnesses uses its own default."""
