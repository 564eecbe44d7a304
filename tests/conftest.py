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
    """A started VLLMServer serving SmolLM2 as 'base' with runtime LoRA adapters."""
    from whale_dspy.backends import embedded_server as make_server

    yield from _serving(
        make_server(smollm2_dir, run_dir=tmp_path_factory.mktemp("embedded-server"), adapters="runtime")
    )


@pytest.fixture(scope="session")
def merged_server(smollm2_dir: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A started MergedAdapterServer (adapters folded into the weights), the CPU runs' default."""
    from whale_dspy.backends import embedded_server as make_server

    yield from _serving(
        make_server(smollm2_dir, run_dir=tmp_path_factory.mktemp("merged-server"), adapters="merged")
    )


def _serving(server) -> Iterator:
    """Start, yield, stop, and check that no vLLM process was left behind."""
    from whale_dspy.backends.process import group_members

    server.start()
    pgid = server.pid
    try:
        yield server
    finally:
        server.stop()
    assert group_members(pgid) == [], f"vLLM processes left behind: {group_members(pgid)}"
