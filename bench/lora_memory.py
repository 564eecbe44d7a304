"""Benchmark the LoRA training step's memory and time: the loss and gradient checkpointing.

The weight phase trains on rollouts whose prompt is most of the sequence and
carries no loss. `transformers`' `labels=` loss sends every position through the
LM head in float32; `whale_dspy.training.worker.completion_loss` sends only the
positions that predict a completion token. Gradient checkpointing
(`LoraTrainingConfig.gradient_checkpointing`) then keeps one activation per
decoder layer and recomputes the rest. Each variant runs in its own fresh
process (one forward and backward of the CPU preset on one batch, LoRA as the
weight phase builds it), which reports the step's peak memory above the loaded
model (VmHWM after resetting it) and its seconds. Printed as ratios, each
against the variant before it, measured in the same run.

    python bench/lora_memory.py
    python bench/lora_memory.py --model smollm2-135m --batch 4 --length 1024 --completion 64
    python bench/lora_memory.py --tiny

`--tiny` runs the same three fresh processes, step, peak and time measurements
and ratios on a random two-layer Qwen2 (hidden size 32, a 1,024-word
vocabulary) that it builds in a temp folder, on a 2 x 128-token batch with 16
trained per row unless sizes are given (CI runs it; about 20 s, nearly all of it
each process importing torch). It checks the orchestration, not the savings:
that step's logits and activations are a few MiB and a fraction of a second,
within the allocator's and the clock's noise, so its peaks and ratios (n/a
where the earlier peak is zero) say nothing about a real model.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# variant: (loss, gradient checkpointing), each compared with the one before it
VARIANTS = {
    "model": ("model", False),
    "completion": ("completion", False),
    "checkpointed": ("completion", True),
}

TINY_STEP = {"batch": 2, "length": 128, "completion": 16}
"""--tiny's default batch shape."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--batch", type=int, default=4, help="rows per batch (the CPU preset's)")
    parser.add_argument("--length", type=int, default=1024, help="tokens per row (the CPU preset's max)")
    parser.add_argument("--completion", type=int, default=64, help="trained tokens at the end of each row")
    parser.add_argument("--tiny", action="store_true", help="on a tiny random model, in seconds (CI)")
    parser.add_argument("--variant", choices=VARIANTS, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.tiny:  # a step the tiny model's size, unless sizes are given: values in the namespace win
        args = parser.parse_args(argv, argparse.Namespace(**TINY_STEP))
    return args


def kib(field: str) -> int:
    """A VmRSS/VmHWM figure of this process, in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def measure(args: argparse.Namespace) -> dict[str, float]:
    """One step of one variant, in this (fresh) process: peak MiB above the loaded model, seconds."""
    import torch

    from whale_dspy.models import resolve_model
    from whale_dspy.training.config import LoraTrainingConfig
    from whale_dspy.training.sft_data import IGNORE, Encoded
    from whale_dspy.training.worker import collate, completion_loss, load_model

    def step(rows: int, length: int, trained: int) -> float:
        ids = torch.randint(100, 1000, (rows, length)).tolist()
        cut = length - trained
        batch = collate([Encoded(tuple(r), (IGNORE,) * cut + tuple(r[cut:])) for r in ids], 0, "cpu")
        loss = model(**batch).loss if loss_kind == "model" else completion_loss(model, batch)
        loss.backward()
        model.zero_grad(set_to_none=True)
        return loss.item()

    loss_kind, checkpointing = VARIANTS[args.variant]
    torch.manual_seed(0)
    config = LoraTrainingConfig(gradient_checkpointing=checkpointing)
    model = load_model(resolve_model(args.model), None, config)
    step(1, 32, 4)  # one-off kernel and allocator set-up, paid outside the measurement
    loaded = kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS, so the peak is the step's
    started = time.perf_counter()
    loss = step(args.batch, args.length, args.completion)
    seconds = time.perf_counter() - started
    return {"peak_mib": (kib("VmHWM") - loaded) / 1024, "seconds": seconds, "loss": loss}


def tiny_model(folder: Path) -> str:
    """A random two-layer Qwen2 saved to folder: loads and trains like a real base, in milliseconds."""
    import transformers

    shape = dict(vocab_size=1024, hidden_size=32, intermediate_size=64, num_hidden_layers=2)
    config = transformers.Qwen2Config(**shape, num_attention_heads=4, num_key_value_heads=2)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return str(folder)


def run_variant(args: argparse.Namespace, model: str, variant: str) -> dict[str, float]:
    """`measure` of one variant in a fresh process, so no variant inherits another's peak."""
    sizes = ["--batch", str(args.batch), "--length", str(args.length), "--completion", str(args.completion)]
    command = [sys.executable, __file__, "--model", model, *sizes, "--variant", variant]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def ratio(mine: float, theirs: float) -> str:
    return f"{mine / theirs:.2f}" if theirs > 0 else "n/a"


def print_results(args: argparse.Namespace, results: dict[str, dict[str, float]]) -> None:
    model = "a tiny random Qwen2 (--tiny)" if args.tiny else args.model
    print(
        f"one LoRA step, {model}, batch {args.batch} x {args.length} tokens, "
        f"{args.completion} trained per row (float32, CPU preset)"
    )
    for variant, (loss, checkpointing) in VARIANTS.items():
        peak, seconds, value = (results[variant][key] for key in ("peak_mib", "seconds", "loss"))
        label = f"{loss} loss" + (" + checkpointing" if checkpointing else "")
        print(f"  {label:<32} peak {peak:8.0f} MiB  {seconds:7.2f} s  loss {value:.4f}")
    for before, after in itertools.pairwise(VARIANTS):
        mine, theirs = results[after], results[before]
        print(
            f"  {after} / {before}: peak memory {ratio(mine['peak_mib'], theirs['peak_mib'])}, "
            f"step time {ratio(mine['seconds'], theirs['seconds'])}"
        )
    cores = os.cpu_count()
    print(f"machine: {platform.machine()}, {cores} cores, load average {os.getloadavg()[0]:.1f}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.variant:
        print(json.dumps(measure(args)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        model = tiny_model(Path(tmp)) if args.tiny else args.model
        results = {variant: run_variant(args, model, variant) for variant in VARIANTS}
    print_results(args, results)


if __name__ == "__main__":
    main()
