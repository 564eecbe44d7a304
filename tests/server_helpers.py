"""Servers for fast tests: the fake vLLM (tests/fake_vllm.py) or any Python snippet, run by VLLMServer."""

from __future__ import annotations

import sys
from pathlib import Path

from whale_dspy.backends import VLLMServer

FAKE_VLLM = str(Path(__file__).with_name("fake_vllm.py"))


def fake_server(tmp_path: Path, code: str | None = None, **options) -> VLLMServer:
    """A VLLMServer whose command is a Python snippet (or the fake vLLM), serving a dummy local model."""
    command = (
        [sys.executable, "-c", code]
        if code
        else [sys.executable, FAKE_VLLM, "--record", str(tmp_path / "requests.jsonl")]
    )
    (tmp_path / "model").mkdir(exist_ok=True)
    return VLLMServer(str(tmp_path / "model"), log_path=tmp_path / "server.log", command=command, **options)
