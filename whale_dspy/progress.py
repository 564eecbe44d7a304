"""The lines a Python user of the short form sees without configuring logging.

A DSPy user who calls `whale_dspy.LM(...)` and `WhaleOptimizer(..., auto=...)` never set up
logging, so library INFO lines went nowhere and a run said nothing for minutes. Everything that
user should follow (the server starting, each weight step, harness decision and checkpoint, the
closing summary) goes to the `whale_dspy.progress` logger, which `show_progress` makes visible on
stderr unless the user has routed it; the lines read the same in a terminal and in a log file.
DSPy's per-call truncation warning is counted here instead of printed (the summary says how many).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator

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

HEARTBEAT_S = 60.0
"""The longest a run the short form drives stays silent: a start's evaluation or a raced decision
takes minutes on CPU, and a user watching a log cannot tell a slow run from a stuck one."""


class LastLine(logging.Filter):
    """When the progress logger last emitted a line."""

    def __init__(self) -> None:
        super().__init__()
        self.at = time.monotonic()

    def filter(self, record: logging.LogRecord) -> bool:
        self.at = time.monotonic()
        return True


@contextlib.contextmanager
def heartbeat(doing: Callable[[], str], every: float = HEARTBEAT_S) -> Iterator[None]:
    """While the block runs, log "still <doing()>" whenever no progress line came for `every` seconds."""
    last, stop = LastLine(), threading.Event()

    def beat() -> None:
        while not stop.wait(max(0.0, every - (time.monotonic() - last.at))):
            quiet = time.monotonic() - last.at
            if quiet >= every:
                log.info("still %s (%.0f s since the last line)", doing(), quiet)

    log.addFilter(last)
    thread = threading.Thread(target=beat, name="whale-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        log.removeFilter(last)


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


__all__ = ["HEARTBEAT_S", "TRUNCATIONS", "heartbeat", "log", "show_progress"]
