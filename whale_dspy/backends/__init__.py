"""Inference backends: OpenAI-compatible vLLM servers serving a base model plus LoRA adapters.

Exports resolve on first use: vLLM imports this package in each of its processes (our plugin and
worker extension live here), and those must not pay for dspy.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "DEFAULT_MODEL": "vllm_server",
    "PROVIDER": "remote",
    "RemoteServer": "remote",
    "VLLMServer": "vllm_server",
    "default_dtype": "vllm_server",
    "embedded_server": "vllm_server",
    "WhaleProvider": "dspy_provider",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"whale_dspy.backends.{_EXPORTS[name]}"), name)
