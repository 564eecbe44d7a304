"""Inference backends: OpenAI-compatible vLLM servers serving a base model plus LoRA adapters."""

from __future__ import annotations

from whale_dspy.backends.dspy_provider import WhaleProvider
from whale_dspy.backends.remote import PROVIDER, RemoteServer
from whale_dspy.backends.vllm_server import DEFAULT_MODEL, VLLMServer, default_dtype, embedded_server

__all__ = [
    "DEFAULT_MODEL",
    "PROVIDER",
    "RemoteServer",
    "VLLMServer",
    "default_dtype",
    "embedded_server",
    "WhaleProvider",
]
