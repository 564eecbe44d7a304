"""The training subprocess: `python -m whale_dspy.training.worker SPEC.json`.

Training runs in its own process so that the memory of the base model, the
optimizer and the autograd graphs goes back to the OS when it ends, and so
that a crash leaves the caller (and its inference server) alive. The spec is
written by `LoraTrainer`; this module is the only one here importing torch/peft.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from whale_dspy.errors import TrainingError
from whale_dspy.records import SFTExample
from whale_dspy.training.adapter_keys import AdapterKeyMap, architectures_of, key_map_for, write_served_keys
from whale_dspy.training.config import LoraTrainingConfig
from whale_dspy.training.sft_data import IGNORE, Encoded, encode_examples

log = logging.getLogger("whale_dspy.training.worker")


def load_model(
    base: str, parent: str | None, config: LoraTrainingConfig, key_map: AdapterKeyMap | None = None
) -> Any:
    """The base model with a trainable LoRA: the parent's weights when given (read back from the
    served names), else a fresh one."""
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM

    key_map = key_map or key_map_for(architectures_of(base))
    torch.manual_seed(config.seed)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=getattr(torch, config.dtype))
    model.to(config.device)
    if config.gradient_checkpointing:  # non-reentrant: frozen embeddings need no input-grad hook
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if parent:
        log.info("continuing from parent adapter %s (its rank and target modules apply)", parent)
        fitted = key_map.fitted(name for name, _ in model.named_modules())
        mapping = fitted.load_mapping() or None  # None keeps PEFT's own conversion mapping
        model = PeftModel.from_pretrained(model, parent, is_trainable=True, key_mapping=mapping)
    else:
        lora = LoraConfig(
            r=config.rank,
            lora_alpha=config.alpha,
            lora_dropout=config.dropout,
            target_modules=list(config.target_modules),
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(model, lora)
    model.train()
    return model


def batches(examples: tuple[Encoded, ...], size: int, rng: random.Random) -> list[list[Encoded]]:
    """Length-sorted batches (little padding) in a seeded random order."""
    ordered = sorted(examples, key=lambda e: len(e.input_ids))
    groups = [ordered[i : i + size] for i in range(0, len(ordered), size)]
    rng.shuffle(groups)
    return groups


def collate(batch: list[Encoded], pad_id: int, device: str) -> dict[str, Any]:
    """Right-pad to the longest example; padding is masked from attention and loss."""
    import torch

    width = max(len(e.input_ids) for e in batch)
    pad = [width - len(e.input_ids) for e in batch]
    ids = [list(e.input_ids) + [pad_id] * n for e, n in zip(batch, pad, strict=True)]
    labels = [list(e.labels) + [IGNORE] * n for e, n in zip(batch, pad, strict=True)]
    mask = [[1] * len(e.input_ids) + [0] * n for e, n in zip(batch, pad, strict=True)]
    return {
        name: torch.tensor(rows, dtype=torch.long, device=device)
        for name, rows in (("input_ids", ids), ("labels", labels), ("attention_mask", mask))
    }


def completion_loss(model: Any, batch: dict[str, Any]) -> Any:
    """Mean next-token cross-entropy over the completion tokens, the model's own `labels=` loss.

    Computed here because that loss sends every position through the LM head in
    float32: 4 x 1024 positions x Qwen2.5's 151,936-word vocabulary is 2.5 GB of
    logits, again for their gradient, and a quarter of the step's arithmetic. The
    prompt is most of each sequence and carries no loss, so only the positions
    that predict a completion token in some row reach the head (`logits_to_keep`).
    """
    import torch

    targets = batch["labels"][:, 1:]
    keep = (targets != IGNORE).any(dim=0).nonzero().squeeze(1)
    logits = model(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], logits_to_keep=keep
    ).logits
    return torch.nn.functional.cross_entropy(
        logits.float().flatten(0, 1), targets[:, keep].flatten(), ignore_index=IGNORE
    )


def train_loop(
    model: Any, examples: tuple[Encoded, ...], config: LoraTrainingConfig, pad_id: int
) -> list[dict]:
    """Seeded AdamW over `epochs` passes; one record per optimizer step."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate)
    rng = random.Random(config.seed)
    steps: list[dict] = []
    for epoch in range(config.epochs):
        epoch_batches = batches(examples, config.batch_size, rng)
        for start in range(0, len(epoch_batches), config.grad_accum):
            group = epoch_batches[start : start + config.grad_accum]
            began = time.monotonic()
            losses = []
            for batch in group:
                loss = completion_loss(model, collate(batch, pad_id, config.device))
                (loss / len(group)).backward()
                losses.append(loss.item())
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step = {
                "step": len(steps) + 1,
                "epoch": epoch,
                "loss": sum(losses) / len(losses),
                "tokens": sum(e.completion_tokens for b in group for e in b),
                "seconds": time.monotonic() - began,
            }
            steps.append(step)
            log.info("step %(step)d epoch %(epoch)d loss %(loss).4f (%(seconds).2fs)", step)
    return steps


def save_adapter(model: Any, base: str, adapter_dir: Path, key_map: AdapterKeyMap) -> None:
    """save_pretrained into a side folder, keys under the served names, then rename: a
    half-written adapter never appears."""
    partial = adapter_dir.with_name(adapter_dir.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.peft_config["default"].base_model_name_or_path = base
    model.save_pretrained(str(partial))
    write_served_keys(partial, key_map.fitted(name for name, _ in model.named_modules()))
    partial.rename(adapter_dir)


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Encode, train, save; returns the metrics written next to the adapter."""
    from transformers import AutoTokenizer

    started = time.monotonic()
    key_map = key_map_for(architectures_of(spec["base"]))  # refuse before any training
    log.info("adapter keys for %s: %s", key_map.architecture, key_map.source)
    config = LoraTrainingConfig.from_dict(spec["config"])
    raw = json.loads(Path(spec["examples"]).read_text())
    tokenizer = AutoTokenizer.from_pretrained(spec["base"])
    examples = [SFTExample.from_dict(d) for d in raw]
    data = encode_examples(tokenizer, examples, config.max_length, config.chat_template_kwargs)
    log.info(
        "%d examples (%d skipped: completion > max_length=%d)", len(raw), data.skipped, config.max_length
    )
    if not data.examples:
        raise TrainingError(f"no example fits max_length={config.max_length}; raise max_length")
    model = load_model(spec["base"], spec["parent"], config, key_map)
    pad_id = next((i for i in (tokenizer.pad_token_id, tokenizer.eos_token_id) if i is not None), 0)
    trained = time.monotonic()
    steps = train_loop(model, data.examples, config, pad_id)
    train_seconds = time.monotonic() - trained
    save_adapter(model, spec["base"], Path(spec["adapter_dir"]), key_map)
    return {
        "loss": sum(s["loss"] for s in steps) / len(steps),
        "examples": len(data.examples),
        "skipped": data.skipped,
        "tokens": data.completion_tokens,
        "tokens_trained": sum(s["tokens"] for s in steps),
        "train_seconds": train_seconds,
        "seconds_per_step": train_seconds / len(steps),
        "seconds": time.monotonic() - started,
        "steps": steps,
        "config": config.to_dict(),
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    # Ours from INFO, the libraries (torch, transformers, peft) only from WARNING, as `whale` logs.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("whale_dspy").setLevel(logging.INFO)
    spec = json.loads(Path(args[0]).read_text())
    metrics = run(spec)
    Path(spec["metrics"]).write_text(json.dumps(metrics, indent=2))
    log.info("adapter saved to %s (mean loss %.4f)", spec["adapter_dir"], metrics["loss"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
