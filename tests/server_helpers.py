"""Servers for fast tests: the fake vLLM (whale_dspy.testing.fake_vllm) or any Python snippet, run by
VLLMServer."""

from __future__ import annotations

import sys
from pathlib import Path

from whale_dspy.backends import VLLMServer
from whale_dspy.testing import fake_vllm


def fake_server(tmp_path: Path, code: str | None = None, **options) -> VLLMServer:
    """A VLLMServer whose command is a Python snippet (or the fake vLLM), serving a dummy local model."""
    command = [sys.executable, "-c", code] if code else fake_vllm.command(tmp_path / "requests.jsonl")
    (tmp_path / "model").mkdir(exist_ok=True)
    return VLLMServer(str(tmp_path / "model"), log_path=tmp_path / "server.log", command=command, **options)
