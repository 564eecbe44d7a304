"""A LoRA adapter with random weights: a real adapter that visibly changes the model's answers, for
serving checks (`whale smoke`, the serving and replica benchmarks, integration tests)."""

from __future__ import annotations

from pathlib import Path

from whale_dspy.records import AdapterRef


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
