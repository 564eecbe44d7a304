"""Inference backends: OpenAI-compatible vLLM servers serving a base model plus LoRA adapters.

Exports resolve on first use: vLLM imports this package in each of its processes (our plugin and
worker extension live here), and those must not pay for dspy.
"""

from __future__ import annotations

from whale_dspy.lazy_exports import lazy_getattr

_EXPORTS = {
    "AdapterStore": "adapter_store",
    "DEFAULT_MODEL": "vllm_server",
    "PROVIDER": "remote",
    "RemoteServer": "remote",
    "ReplicaSet": "replicas",
    "VLLMServer": "vllm_server",
    "default_dtype": "vllm_server",
    "embedded_server": "embedded",
    "WhaleProvider": "dspy_provider",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_getattr(__name__, _EXPORTS)
