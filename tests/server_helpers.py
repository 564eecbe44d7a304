"""Servers for fast tests: the fake vLLM (whale_dspy.testing.fake_vllm) or any Python snippet, run by
VLLMServer."""

from __future__ import annotations

import sys
from pathlib import Path

from whale_dspy.backends import VLLMServer
from whale_dspy.testing import fake_vllm


def fake_server(tmp_path: Path, code: str | None = None, **options) -> VLLMServer:
    """A VLLMServer whose command is a Python snippet (or the fake vLLM), serving a dummy local model."""
    if not code:
        return fake_vllm.server(
            tmp_path / "model", tmp_path / "server.log", record=tmp_path / "requests.jsonl", **options
        )
    (tmp_path / "model").mkdir(exist_ok=True)
    command = [sys.executable, "-c", code]
    return VLLMServer(str(tmp_path / "model"), log_path=tmp_path / "server.log", command=command, **options)
