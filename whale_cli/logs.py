"""What the `whale` log shows: our own loggers from INFO, the libraries under them only from WARNING.

Read from a file (nohup, CI), a run's log otherwise carries httpx's "HTTP Request: POST ..." line
for every adapter swap, bm25s's DEBUG lines and matplotlib's font-manager line among the progress it
means to show. `whale -v` lets everything through at DEBUG.
"""

from __future__ import annotations

import logging

LIBRARIES = (
    "httpx",
    "httpcore",
    "openai",
    "LiteLLM",
    "urllib3",
    "vllm",
    "bm25s",
    "matplotlib",
)
"""Loggers seen in a run's log or that talk to its servers: the HTTP clients (httpx under vLLM's
OpenAI client and our own server calls), LiteLLM, vLLM, the BM25 index and the curve plot."""


def not_library_chatter(record: logging.LogRecord) -> bool:
    """The handlers' filter: False (drop) for a library's record under WARNING."""
    return record.levelno >= logging.WARNING or not record.name.startswith(LIBRARIES)


def quiet_libraries() -> None:
    """Library loggers at WARNING, and every root handler dropping their records below it.

    Both, because a level alone does not hold: bm25s sets its own logger to DEBUG when it is
    imported (mid-run, when a domain first builds its index), and LiteLLM writes through a
    handler of its own, which the root handler's filter never sees."""
    for name in LIBRARIES:
        logging.getLogger(name).setLevel(logging.WARNING)
    for handler in logging.getLogger().handlers:
        handler.addFilter(not_library_chatter)
