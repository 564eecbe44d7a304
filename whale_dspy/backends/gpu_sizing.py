"""A GPU run sized from the model and the devices: KV cache, concurrent rollouts, where the trainer goes.

A fixed KV cache (2 GiB) holds about 174k tokens of a 0.5B Qwen2 but only about 14k of a 4B
Qwen3, against 64 rollouts of up to 4k tokens each: the cache must follow the model's attention
shape (layers x KV heads x head size, read from its config.json) and the GPU's memory. With two
GPUs or more the trainer gets the second; with one it shares the serving GPU, so serving keeps
half of it and the trainer checkpoints gradients.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from whale_dspy.errors import ConfigError

SERVING_SHARE = {"own": 0.9, "shared": 0.5}
"""The serving GPU's memory vLLM may take, alone on it or beside the trainer."""
OVERHEAD_GIB = 2.0
"""Activations, CUDA graphs and allocator slack beside weights and cache."""
MAX_THREADS = 64
"""WHALE's concurrent rollouts; more would only queue in vLLM."""
KV_BYTES = 2
"""bf16 keys and values."""


@dataclass(frozen=True)
class GpuSizing:
    kv_cache_gib: float
    threads: int
    """Concurrent rollouts: the sequences of `tokens_per_rollout` the cache holds, at most MAX_THREADS."""
    train_device: str
    gradient_checkpointing: bool
    max_model_len: int
    """The model's context, cut to what the cache holds: vLLM refuses a cache smaller than one context."""
    gpu_memory_utilization: float
    """The serving GPU's share vLLM may take (it refuses to start when less than that is free)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def kv_bytes_per_token(config: dict[str, Any]) -> int:
    """Bytes of keys and values one token takes in every layer (grouped-query attention included)."""
    try:
        layers, heads = int(config["num_hidden_layers"]), int(config["num_attention_heads"])
        kv_heads = int(config.get("num_key_value_heads") or heads)
        head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
    except (KeyError, TypeError, ValueError) as error:
        raise ConfigError(f"the model's config.json lacks its attention shape ({error})") from None
    return 2 * layers * kv_heads * head_dim * KV_BYTES


def size_gpu_run(model_dir: str | Path, gpu_gib: Sequence[float], tokens_per_rollout: int) -> GpuSizing:
    """The sizing for a local model folder on GPUs with `gpu_gib` memory each (the first serves)."""
    folder = Path(model_dir)
    if not (folder / "config.json").is_file():
        raise ConfigError(f"sizing a GPU run reads the model's config.json; {folder} has none")
    if not gpu_gib or min(gpu_gib) <= 0:
        raise ConfigError(f"sizing a GPU run needs each GPU's memory in GiB, got {list(gpu_gib)}")
    weights_gib = sum(path.stat().st_size for path in folder.glob("*.safetensors")) / 2**30
    own = len(gpu_gib) >= 2
    share = SERVING_SHARE["own" if own else "shared"]
    cache = share * gpu_gib[0] - weights_gib - OVERHEAD_GIB
    if cache < 0.5:
        raise ConfigError(
            f"the model's weights ({weights_gib:.1f} GiB) leave no KV cache on a {gpu_gib[0]:g} GiB GPU"
            + ("" if own else " shared with the trainer")
        )
    config = json.loads((folder / "config.json").read_text())
    tokens = int(cache * 2**30) // kv_bytes_per_token(config)
    context = int(config.get("max_position_embeddings") or tokens)
    return GpuSizing(
        kv_cache_gib=round(cache, 2),
        threads=max(1, min(MAX_THREADS, tokens // tokens_per_rollout)),
        train_device="cuda:1" if own else "cuda:0",
        gradient_checkpointing=not own,
        max_model_len=min(context, tokens),
        gpu_memory_utilization=share,
    )


def local_model_folder(model: str) -> Path | None:
    """A resolved model as a local folder: itself, or a hub id's cached snapshot (None when absent)."""
    if Path(model).is_dir():
        return Path(model)
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model, local_files_only=True))
    except Exception:  # not cached (or not a hub id): nothing to read the shape from
        return None


def visible_gpu_gib() -> list[float]:
    """Each visible CUDA device's memory in GiB (torch imported here; none on a CPU machine)."""
    import torch

    if not torch.cuda.is_available():
        return []
    return [
        torch.cuda.get_device_properties(i).total_memory / 2**30 for i in range(torch.cuda.device_count())
    ]
