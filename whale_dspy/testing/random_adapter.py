"""LoRA adapters for serving checks: one with random weights that visibly changes the model's answers
(`whale smoke`, the serving and replica benchmarks, integration tests), a small one written without
torch for fake servers, and a copy of either with its keys under the wrong module prefix."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

from whale_dspy.records import AdapterRef

MISPLACED = "model.language_model.layers."
"""Where Qwen3.5's checkpoint keeps the layers that `AutoModelForCausalLM` calls model.layers."""


def make_random_adapter(
    base_dir: str, out_dir: Path, *, name: str, rank: int = 8, seed: int = 0
) -> AdapterRef:
    """Save a LoRA adapter with random A and B (peft's default leaves B zero: a no-op adapter)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    config = LoraConfig(
        r=rank, lora_alpha=2 * rank, target_modules=["q_proj", "v_proj"], init_lora_weights=False
    )
    get_peft_model(model, config).save_pretrained(out_dir)
    return AdapterRef(name=name, path=str(out_dir), base=base_dir)


def numpy_adapter(
    out_dir: Path, base: str, *, name: str, layers: int = 2, rank: int = 4, zero_b: bool = False
) -> AdapterRef:
    """A small LoRA adapter on q_proj of `layers` layers, written with numpy (no torch): enough for
    fake servers, which read its keys and bytes only. `zero_b`: B zero, as PEFT initialises it."""
    import numpy as np
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    tensors = {}
    for layer in range(layers):
        key = f"base_model.model.model.layers.{layer}.self_attn.q_proj"
        tensors[f"{key}.lora_A.weight"] = rng.standard_normal((rank, 16), dtype=np.float32)
        up = np.zeros((16, rank), np.float32) if zero_b else rng.standard_normal((16, rank), dtype=np.float32)
        tensors[f"{key}.lora_B.weight"] = up
    out_dir.mkdir(parents=True)
    save_file(tensors, str(out_dir / "adapter_model.safetensors"))
    config = {"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "target_modules": ["q_proj"]}
    (out_dir / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": base}))
    return AdapterRef(name=name, path=str(out_dir), base=base)


def misplaced_copy(
    adapter: AdapterRef, out_dir: Path, *, name: str, old: str = "model.layers.", new: str = MISPLACED
) -> AdapterRef:
    """A copy of `adapter` with its keys moved from module prefix `old` to `new` (the tensors as they
    are): an adapter that a server loads and serves as the base, the way a PEFT adapter trained through
    AutoModelForCausalLM lands on a model whose vLLM class nests its language model."""
    source = Path(adapter.path)
    shutil.copytree(source, out_dir)
    data = (source / "adapter_model.safetensors").read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + size])
    moved = {key.replace(f".{old}", f".{new}", 1): entry for key, entry in header.items()}
    text = json.dumps(moved).encode()
    text += b" " * (-len(text) % 8)  # safetensors pads its header to 8 bytes
    (out_dir / "adapter_model.safetensors").write_bytes(
        struct.pack("<Q", len(text)) + text + data[8 + size :]
    )
    return AdapterRef(name=name, path=str(out_dir), base=adapter.base)
