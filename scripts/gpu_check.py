"""GPU check: LoRA SFT, batch generation and adapter save/reload on one GPU, no hub, no weights carried.

Run it through the wrapper:   bash scripts/gpu_check.sh OUTDIR   (default $OUT or ./gpu_check_out)
CPU code-path test:            python scripts/gpu_check.py --tiny --out /tmp/gpu_check_tiny

A real-architecture model (Qwen2-style config, random bf16 weights, built on the
device from its config; no tokenizer: random token ids) is measured, each
figure against the same model's plain throughput in the same run:
  (a) LoRA SFT tokens/s (peft r=16 on q,k,v,o + MLP, AdamW) vs full forward+backward tokens/s,
      the full forward+backward measured before and after the LoRA steps (A-B-A);
  (b) batch generation tokens/s (`generate`, greedy, fixed length) vs plain forward tokens/s;
  (c) adapter save_pretrained and PeftModel.from_pretrained (onto the base) latency, with a
      check that the reloaded adapter gives the trained adapter's logits;
  (d) adapter keys on the Qwen3.5 shape and (e) the adapter-effect probe: gpu_check_adapters.py.
Everything lands in OUT/gpu_check.json and OUT/gpu_check.md, rewritten after every part, so
a run cut short keeps what it measured. A deadline (--budget-s) skips the parts that are left.
Exits 2 with a clear message when there is no CUDA device (unless --tiny).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpu_check_adapters import adapter_keys, adapter_probe, guarded

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

PRESETS: dict[str, dict[str, Any]] = {
    # Qwen2.5-1.5B's shape (tied embeddings, GQA 12/2).
    "qwen2-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                       num_attention_heads=12, num_key_value_heads=2, vocab_size=151936,
                       tie_word_embeddings=True),
    # Qwen2.5-0.5B's shape.
    "qwen2-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                       num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                       tie_word_embeddings=True),
    # CPU code-path test only.
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=1000, tie_word_embeddings=True),
}  # fmt: skip
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT") or "gpu_check_out")
    parser.add_argument("--preset", default="qwen2-1.5b", choices=sorted(PRESETS))
    parser.add_argument("--tiny", action="store_true", help="tiny config and sizes; runs on CPU")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--gen-batch", type=int, default=32)
    parser.add_argument("--gen-prompt", type=int, default=128)
    parser.add_argument("--gen-new", type=int, default=128)
    parser.add_argument("--gen-runs", type=int, default=2)
    parser.add_argument("--lora-r", type=int, default=16)
    parser.add_argument("--budget-s", type=float, default=240.0, help="skip parts not started by then")
    args = parser.parse_args()
    if args.tiny:
        args.preset = "tiny"
        args.batch, args.seq, args.warmup, args.steps = 2, 64, 1, 2
        args.gen_batch, args.gen_prompt, args.gen_new, args.gen_runs = 4, 16, 8, 1
    return args


class Check:
    """Collects figures and rewrites the JSON and Markdown reports after every part."""

    def __init__(self, args: argparse.Namespace, device: str) -> None:
        import torch

        self.torch = torch
        self.device = device
        self.started = time.perf_counter()
        self.deadline = self.started + args.budget_s
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.data: dict[str, Any] = {"args": vars(args), "env": environment(torch, device), "parts": {}}

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def time_left(self) -> bool:
        return time.perf_counter() < self.deadline

    def record(self, part: str, figures: dict[str, Any]) -> None:
        if self.device == "cuda":
            figures["peak_memory_gib"] = round(self.torch.cuda.max_memory_allocated() / 2**30, 2)
        self.data["parts"][part] = figures
        self.data["elapsed_s"] = round(time.perf_counter() - self.started, 1)
        print(f"[{self.data['elapsed_s']:6.1f} s] {part}: {json.dumps(figures)}", flush=True)
        self.write()

    def write(self) -> None:
        (self.out / "gpu_check.json").write_text(json.dumps(self.data, indent=2) + "\n")
        (self.out / "gpu_check.md").write_text(markdown(self.data))


def environment(torch: Any, device: str) -> dict[str, Any]:
    import peft
    import transformers

    env = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "host": platform.node(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "device": device,
        "cpu_count": os.cpu_count(),
    }
    if device == "cuda":
        env["gpu"] = torch.cuda.get_device_name(0)
        env["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
        env["cuda"] = torch.version.cuda
    return env


def markdown(data: dict[str, Any]) -> str:
    lines = ["# GPU check", "", "```", json.dumps(data["env"], indent=1), "```", ""]
    for part, figures in data["parts"].items():
        lines += [f"## {part}", "", "| figure | value |", "|---|---|"]
        lines += [f"| {key} | {value} |" for key, value in figures.items()]
        lines.append("")
    lines.append(f"elapsed {data.get('elapsed_s')} s")
    return "\n".join(lines) + "\n"


def build_model(check: Check, args: argparse.Namespace) -> Any:
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(**PRESETS[args.preset], max_position_embeddings=max(4096, args.seq * 2))
    config.use_cache = True
    started = time.perf_counter()
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(check.device):
            model = AutoModelForCausalLM.from_config(config)
    finally:
        torch.set_default_dtype(previous)
    model.to(device=check.device, dtype=torch.bfloat16)
    model.generation_config.eos_token_id = None  # random weights: never stop early
    model.generation_config.pad_token_id = 0
    check.sync()
    params = sum(p.numel() for p in model.parameters())
    check.record(
        "model",
        {
            "preset": args.preset,
            "parameters": params,
            "parameters_b": round(params / 1e9, 3),
            "dtype": str(next(model.parameters()).dtype),
            "attention": getattr(model.config, "_attn_implementation", None),
            "build_s": round(time.perf_counter() - started, 2),
        },
    )
    return model


def batch_ids(check: Check, args: argparse.Namespace, vocab: int, seed: int) -> Any:
    generator = check.torch.Generator(device="cpu").manual_seed(seed)
    ids = check.torch.randint(0, vocab, (args.batch, args.seq), generator=generator)
    return ids.to(check.device)


def timed_steps(check: Check, args: argparse.Namespace, step: Any) -> dict[str, Any]:
    """Warm-up steps, then timed ones; tokens/s over the timed steps."""
    for _ in range(args.warmup):
        step()
    check.sync()
    started = time.perf_counter()
    for _ in range(args.steps):
        step()
    check.sync()
    seconds = time.perf_counter() - started
    tokens = args.batch * args.seq * args.steps
    return {"steps": args.steps, "seconds": round(seconds, 3), "tokens_per_s": round(tokens / seconds, 1)}


def forward_only(check: Check, args: argparse.Namespace, model: Any) -> dict[str, Any]:
    ids = batch_ids(check, args, model.config.vocab_size, 1)
    model.eval()

    def step() -> None:
        with check.torch.no_grad():
            model(input_ids=ids, use_cache=False)

    return timed_steps(check, args, step)


def full_forward_backward(check: Check, args: argparse.Namespace, model: Any) -> dict[str, Any]:
    """Plain forward+backward of every weight (gradients computed, no optimizer)."""
    ids = batch_ids(check, args, model.config.vocab_size, 2)
    model.train()
    for param in model.parameters():
        param.requires_grad_(True)

    def step() -> None:
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        model.zero_grad(set_to_none=True)

    figures = timed_steps(check, args, step)
    model.zero_grad(set_to_none=True)
    return figures


def approx_tflops(params: int, tokens_per_s: float, factor: int) -> float:
    return round(factor * params * tokens_per_s / 1e12, 1)


def lora_sft(check: Check, args: argparse.Namespace, model: Any) -> tuple[Any, dict[str, Any]]:
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r, lora_dropout=0.0,
                        target_modules=LORA_TARGETS, task_type="CAUSAL_LM")  # fmt: skip
    for param in model.parameters():
        param.requires_grad_(False)
    peft_model = get_peft_model(model, config)
    peft_model.train()
    trainable = [p for p in peft_model.parameters() if p.requires_grad]
    optimizer = check.torch.optim.AdamW(trainable, lr=1e-4)
    ids = batch_ids(check, args, model.config.vocab_size, 3)
    losses: list[float] = []

    def step() -> None:
        loss = peft_model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.detach())

    figures = timed_steps(check, args, step)
    figures["trainable_parameters"] = sum(p.numel() for p in trainable)
    figures["loss_first_last"] = [round(float(losses[0]), 4), round(float(losses[-1]), 4)]
    return peft_model, figures


def save_reload(check: Check, args: argparse.Namespace, peft_model: Any) -> tuple[Any, dict[str, Any]]:
    """save_pretrained, then PeftModel.from_pretrained onto the (unloaded) base; logits must match."""
    from peft import PeftModel

    torch = check.torch
    probe_shape = argparse.Namespace(batch=2, seq=min(args.seq, 64))
    probe = batch_ids(check, probe_shape, peft_model.config.vocab_size, 4)
    peft_model.eval()
    with torch.no_grad():
        expected = peft_model(input_ids=probe, use_cache=False).logits.float()
        with peft_model.disable_adapter():
            plain = peft_model(input_ids=probe, use_cache=False).logits.float()
    with tempfile.TemporaryDirectory(dir=check.out) as tmp:
        check.sync()
        started = time.perf_counter()
        peft_model.save_pretrained(tmp)
        save_s = time.perf_counter() - started
        size = sum(f.stat().st_size for f in Path(tmp).rglob("*") if f.is_file())
        base = peft_model.unload()  # the base model without LoRA layers, weights untouched
        check.sync()
        started = time.perf_counter()
        reloaded = PeftModel.from_pretrained(base, tmp)
        reloaded.to(check.device)
        check.sync()
        reload_s = time.perf_counter() - started
    reloaded.eval()
    with torch.no_grad():
        got = reloaded(input_ids=probe, use_cache=False).logits.float()
    figures = {
        "save_s": round(save_s, 3),
        "reload_s": round(reload_s, 3),
        "adapter_mib": round(size / 2**20, 1),
        "max_abs_logit_diff": float((got - expected).abs().max()),
        "adapter_effect_max_abs_logit": float((expected - plain).abs().max()),
    }
    return reloaded.unload(), figures


def generation(check: Check, args: argparse.Namespace, model: Any) -> dict[str, Any]:
    """Greedy batch generation of exactly gen_new tokens per row; new tokens per second."""
    torch = check.torch
    model.eval()
    generator = torch.Generator(device="cpu").manual_seed(5)
    ids = torch.randint(0, model.config.vocab_size, (args.gen_batch, args.gen_prompt), generator=generator)
    ids = ids.to(check.device)
    mask = torch.ones_like(ids)
    options = dict(do_sample=False, pad_token_id=0, eos_token_id=None, use_cache=True)

    with torch.no_grad():
        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4, min_new_tokens=4, **options)
        check.sync()
        seconds, new_tokens = 0.0, 0
        for _ in range(args.gen_runs):
            started = time.perf_counter()
            out = model.generate(
                input_ids=ids, attention_mask=mask, max_new_tokens=args.gen_new, min_new_tokens=args.gen_new,
                **options,
            )  # fmt: skip
            check.sync()
            seconds += time.perf_counter() - started
            new_tokens += (out.shape[1] - ids.shape[1]) * out.shape[0]
    return {
        "batch": args.gen_batch,
        "prompt_tokens": args.gen_prompt,
        "new_tokens_per_row": args.gen_new,
        "runs": args.gen_runs,
        "seconds": round(seconds, 3),
        "new_tokens_per_s": round(new_tokens / seconds, 1),
        "ms_per_decode_step": round(1000 * seconds / (args.gen_runs * args.gen_new), 2),
    }


def main() -> int:
    args = parse_args()
    try:
        import torch
    except ImportError:
        print("gpu_check: PyTorch is not installed", file=sys.stderr)
        return 2
    if torch.cuda.is_available():
        device = "cuda"
    elif args.tiny:
        device = "cpu"
    else:
        print("gpu_check: no CUDA device (torch.cuda.is_available() is False); "
              "use --tiny to test the code path on CPU", file=sys.stderr)  # fmt: skip
        return 2
    torch.manual_seed(0)
    check = Check(args, device)
    print(f"gpu_check: {json.dumps(check.data['env'])}", flush=True)
    model = build_model(check, args)
    params = check.data["parts"]["model"]["parameters"]

    fwd = forward_only(check, args, model)
    fwd["approx_tflops_2N"] = approx_tflops(params, fwd["tokens_per_s"], 2)
    check.record("forward (no grad)", fwd)
    full = full_forward_backward(check, args, model)
    full["approx_tflops_6N"] = approx_tflops(params, full["tokens_per_s"], 6)
    check.record("full forward+backward (A, before)", full)

    peft_model = None
    if check.time_left():
        peft_model, lora = lora_sft(check, args, model)
        lora["vs_full_forward_backward"] = round(lora["tokens_per_s"] / full["tokens_per_s"], 3)
        check.record(f"LoRA SFT r={args.lora_r} q,k,v,o+MLP, AdamW", lora)
    if peft_model is not None and check.time_left():
        model, saved = save_reload(check, args, peft_model)
        check.record("adapter save / reload", saved)
    elif peft_model is not None:
        model = peft_model.unload()
    if check.time_left():
        again = full_forward_backward(check, args, model)
        if "LoRA" in " ".join(check.data["parts"]):
            mean_full = (full["tokens_per_s"] + again["tokens_per_s"]) / 2
            lora_tps = check.data["parts"][f"LoRA SFT r={args.lora_r} q,k,v,o+MLP, AdamW"]["tokens_per_s"]
            again["lora_vs_mean_full_forward_backward"] = round(lora_tps / mean_full, 3)
        check.record("full forward+backward (A, after)", again)
    if check.time_left():
        gen = generation(check, args, model)
        gen["vs_forward_tokens_per_s"] = round(gen["new_tokens_per_s"] / fwd["tokens_per_s"], 4)
        check.record("batch generation (greedy)", gen)
    if check.time_left():
        check.record("adapter keys (Qwen3.5 shape)", guarded(adapter_keys, check, args))
    if check.time_left():
        check.record("adapter-effect probe (PEFT)", guarded(adapter_probe, check, args, model))
    parts = check.data["parts"].values()  # fewer than 9: the budget cut later parts
    check.data["complete"] = len(parts) == 9 and not any("error" in figures for figures in parts)
    check.data["ok"] = all(figures.get("ok", True) for figures in parts)  # a failed check, not a cut
    check.write()
    print(f"gpu_check: wrote {check.out / 'gpu_check.json'} and gpu_check.md in {check.data['elapsed_s']} s")
    return 0 if check.data["complete"] and check.data["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
