"""The lines a Python user of the short form sees without configuring logging.

A DSPy user who calls `whale_dspy.LM(...)` and `WhaleOptimizer(..., auto=...)` never set up
logging, so library INFO lines went nowhere and a run said nothing for minutes. Everything that
user should follow (the server starting, each weight step, harness decision and checkpoint, the
closing summary) goes to the `whale_dspy.progress` logger, which `show_progress` makes visible on
stderr unless the user has routed it; the lines read the same in a terminal and in a log file.
DSPy's per-call truncation warning is counted here instead of printed (the summary says how many).
"""

from __future__ import annotations

import logging
import sys

log = logging.getLogger("whale_dspy.progress")

TRUNCATED = "LM response was truncated"
"""What DSPy warns on every LM call cut at max_tokens (dspy.clients.lm), dozens of lines a run."""


class TruncationCount(logging.Filter):
    """Holds back DSPy's per-call truncation warning and counts it."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().startswith(TRUNCATED):
            self.count += 1
            return False
        return True


TRUNCATIONS = TruncationCount()


def show_progress() -> None:
    """Make the progress lines visible on stderr, once, unless the user routed them already."""
    truncation_logger = logging.getLogger("dspy.clients.lm")
    if TRUNCATIONS not in truncation_logger.filters:
        truncation_logger.addFilter(TRUNCATIONS)
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)
    if log.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s whale: %(message)s", "%H:%M:%S"))
    log.addHandler(handler)
    log.propagate = False


__all__ = ["TRUNCATIONS", "log", "show_progress"]
