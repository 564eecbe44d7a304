"""Shared fixtures: the embedded model folder and ONE real vLLM server for all integration tests.

Starting vLLM on a CPU takes about a minute and 4-5 GB, so every integration test
shares the session's server. Adapters loaded on it need names unique across the
session (names are never reused on a server): include the test's name in them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def smollm2_dir() -> str:
    """The converted SmolLM2-135M-Instruct safetensors folder (converted once per user cache)."""
    from whale_dspy.models import resolve_model

    return resolve_model("smollm2-135m")


@pytest.fixture(scope="session")
def embedded_server(smollm2_dir: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A started VLLMServer serving SmolLM2 as 'base'; stopped (and checked for orphans) at session end."""
    from whale_dspy.backends import embedded_server as make_server
    from whale_dspy.backends.process import group_members

    server = make_server(smollm2_dir, run_dir=tmp_path_factory.mktemp("embedded-server"))
    server.start()
    pgid = server.pid
    try:
        yield server
    finally:
        server.stop()
    assert group_members(pgid) == [], f"vLLM processes left behind: {group_members(pgid)}"
