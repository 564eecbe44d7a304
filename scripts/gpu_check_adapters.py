"""The GPU check's adapter parts (scripts/gpu_check.py runs them after its throughput parts).

  (d) adapter keys, Qwen3.5 shape: a small random Qwen3.5 checkpoint (`Qwen3_5ForConditionalGeneration`,
      built from its config, no download) is loaded and given a LoRA by the trainer's own
      `load_model`, saved by its `save_adapter` (our key mapping), and the written keys are put
      through vLLM 0.32's `Qwen3_5ForConditionalGeneration` weights mapper (written down below:
      vLLM is not installed on the GPU machine) and must name the modules that class declares.
      The trained-as-is keys must not (the silent no-op this guards against), and the served
      adapter read back by `load_model(parent=...)` must give the saved model's logits.
  (e) the adapter-effect probe on a PEFT model: next-token log-probabilities on a fixed prompt
      with and without a trained adapter differ beyond noise; with the same adapter saved under a
      prefix that matches no module (loaded, and silently ignored) they do not. Its wall time is
      set against one LoRA training step's.
A part whose model class transformers lacks is recorded as skipped, with the reason.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

VLLM_QWEN3_5_PREFIXES = {
    "model.visual.": "visual.",
    "lm_head.": "language_model.lm_head.",
    "model.language_model.": "language_model.model.",
    "mtp.": None,
}
"""vLLM 0.32's Qwen3_5ForConditionalGeneration.hf_to_vllm_mapper (qwen3_vl.py | qwen3_5.py), prefix rules."""

ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")

NOISE_LOGPROB = 1e-3
"""|delta logprob| at or below this is numerical noise (bf16 forward passes on one device)."""


def vllm_module(key: str) -> str | None:
    """The module vLLM's LoRA loader looks up for a saved key (parse_fine_tuned_lora_name's steps)."""
    name = key.removeprefix("base_model.model.")
    for old, new in VLLM_QWEN3_5_PREFIXES.items():
        if name.startswith(old):
            if new is None:
                return None
            name = new + name.removeprefix(old)
            break
    return name.rsplit(".lora_", 1)[0]


def tiny_qwen3_5(device: str) -> Any:
    """A small random Qwen3.5 dense checkpoint model (3 linear-attention layers, 1 full), or None."""
    import transformers

    config_class = getattr(transformers, "Qwen3_5Config", None)
    model_class = getattr(transformers, "Qwen3_5ForConditionalGeneration", None)
    if config_class is None or model_class is None:
        return None
    text = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=2, head_dim=32, vocab_size=2048, linear_num_key_heads=2,
                linear_num_value_heads=4, linear_key_head_dim=32, linear_value_head_dim=32)  # fmt: skip
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=128)
    config = config_class(text_config=text, vision_config=vision)
    return model_class(config).to(device)


def adapter_keys(check: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Part (d): our key mapping on the Qwen3.5 shape, judged by vLLM 0.32's mapper."""
    import torch
    from peft import PeftModel
    from safetensors import safe_open

    sys.path.insert(0, str(ROOT))
    from whale_dspy.training.adapter_keys import architectures_of, key_map_for
    from whale_dspy.training.config import LoraTrainingConfig
    from whale_dspy.training.worker import load_model, save_adapter

    checkpoint = tiny_qwen3_5(check.device)
    if checkpoint is None:
        return {"skipped": "this transformers has no Qwen3_5Config / Qwen3_5ForConditionalGeneration"}
    with tempfile.TemporaryDirectory(dir=check.out) as tmp:
        base, adapter = Path(tmp) / "base", Path(tmp) / "adapter"
        checkpoint.save_pretrained(base)
        del checkpoint
        key_map = key_map_for(architectures_of(str(base)))
        config = LoraTrainingConfig(rank=8, target_modules=ATTENTION,
                                    device=check.device, gradient_checkpointing=False)  # fmt: skip
        model = load_model(str(base), None, config, key_map)
        for name, param in model.named_parameters():
            if "lora_B" in name:
                torch.nn.init.normal_(param, std=0.02)  # a trained adapter: non-zero B
        targeted = {
            name.removeprefix("base_model.model.")
            for name, _ in model.named_modules()
            if name.endswith(config.target_modules) and ".lora_" not in name
        }
        trained_keys = list(model.state_dict())
        save_adapter(model, str(base), adapter, key_map)
        with safe_open(str(adapter / "adapter_model.safetensors"), framework="pt") as f:
            written = list(f.keys())
        expected = {"language_model." + name for name in targeted}  # the class nests its causal LM
        served = {vllm_module(key) for key in written}
        as_trained = {vllm_module(key.replace(".default", "")) for key in trained_keys if ".lora_" in key}
        ids = torch.arange(1, 17, device=check.device).unsqueeze(0)
        model.eval()
        with torch.no_grad():
            saved_logits = model(input_ids=ids).logits.float()
        reread = load_model(str(base), str(adapter), config, key_map).eval()
        with torch.no_grad():
            reread_diff = (reread(input_ids=ids).logits.float() - saved_logits).abs().max()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            plain = PeftModel.from_pretrained(reread.unload(), str(adapter))  # no key mapping
    return {
        "transformers_class": type(model.get_base_model()).__name__,
        "key_map_source": key_map.source,
        "lora_modules": len(expected),
        "written_keys": len(written),
        "example_key": written[0],
        "keys_landing_in_vllm_class": len(served & expected),
        "keys_missing_in_vllm_class": sorted(served - expected)[:3],
        "unmapped_keys_landing": len(as_trained & expected),
        "served_adapter_reread_max_abs_logit_diff": float(reread_diff),
        "unmapped_reload_warned_missing_keys": any("missing adapter keys" in str(w.message) for w in caught),
        "plain_reload_lora_b_zero": all(
            float(p.abs().max()) == 0 for n, p in plain.named_parameters() if "lora_B" in n
        ),
        "ok": served == expected and not as_trained & expected and float(reread_diff) == 0.0,
    }


def next_token_logprobs(check: Any, model: Any, ids: Any) -> Any:
    with check.torch.no_grad():
        return check.torch.log_softmax(model(input_ids=ids, use_cache=False).logits[0, -1].float(), dim=-1)


def probe_logprobs(check: Any, base: Any, adapter_dir: str, ids: Any) -> tuple[Any, float, float]:
    """Next-token logprobs through the adapter at adapter_dir, the seconds to load it (PEFT, from
    disk) and to run the forward and unload (the base's forward is timed apart)."""
    from peft import PeftModel

    check.sync()
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the mis-prefixed adapter's missing keys: silently ignored
        model = PeftModel.from_pretrained(base, adapter_dir).eval()
    check.sync()
    loaded = time.perf_counter()
    logprobs = next_token_logprobs(check, model, ids)
    model.unload()
    check.sync()
    return logprobs, loaded - started, time.perf_counter() - loaded


def train_steps(check: Any, args: argparse.Namespace, base: Any, steps: int) -> tuple[Any, float]:
    """A LoRA (r=args.lora_r, q,k,v,o) trained `steps` AdamW steps; the last step's seconds."""
    from peft import LoraConfig, get_peft_model

    for param in base.parameters():
        param.requires_grad_(False)
    lora = LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r, lora_dropout=0.0,
                      target_modules=list(ATTENTION), task_type="CAUSAL_LM")  # fmt: skip
    model = get_peft_model(base, lora).train()
    optimizer = check.torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-3)
    ids = check.torch.randint(0, base.config.vocab_size, (args.batch, args.seq), device=check.device)
    seconds = 0.0
    for _ in range(steps):
        check.sync()
        started = time.perf_counter()
        model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        check.sync()
        seconds = time.perf_counter() - started
    return model.eval(), seconds


def adapter_probe(check: Any, args: argparse.Namespace, base: Any) -> dict[str, Any]:
    """Part (e): a trained adapter moves the next-token logprobs, a mis-prefixed copy of it does not."""
    from safetensors.torch import load_file, save_file

    torch = check.torch
    ids = torch.arange(100, 116, device=check.device).unsqueeze(0)  # a fixed 16-token prompt
    model, step_s = train_steps(check, args, base, steps=3)
    with tempfile.TemporaryDirectory(dir=check.out) as tmp:
        trained, wrong = Path(tmp) / "trained", Path(tmp) / "wrong-prefix"
        model.save_pretrained(trained)
        base = model.unload()
        shutil.copytree(trained, wrong)
        tensors = load_file(str(trained / "adapter_model.safetensors"))
        moved = {k.replace("base_model.model.model.", "base_model.model.model.language_model."): v
                 for k, v in tensors.items()}  # fmt: skip
        save_file(moved, str(wrong / "adapter_model.safetensors"), metadata={"format": "pt"})
        check.sync()
        started = time.perf_counter()
        plain = next_token_logprobs(check, base, ids)
        check.sync()
        base_s = time.perf_counter() - started
        again = next_token_logprobs(check, base, ids)
        with_adapter, load_s, forward_s = probe_logprobs(check, base, str(trained), ids)
        with_wrong, _, _ = probe_logprobs(check, base, str(wrong), ids)
    trained_delta = float((with_adapter - plain).abs().max())
    wrong_delta = float((with_wrong - plain).abs().max())
    probe_s = base_s + load_s + forward_s
    return {
        "prompt_tokens": ids.shape[1],
        "max_abs_dlogprob_trained": trained_delta,
        "max_abs_dlogprob_wrong_prefix": wrong_delta,
        "max_abs_dlogprob_base_repeat": float((again - plain).abs().max()),
        "noise_threshold": NOISE_LOGPROB,
        "probe_s": round(probe_s, 4),
        "probe_adapter_load_s": round(load_s, 4),
        "probe_forwards_s": round(base_s + forward_s, 4),
        "lora_step_s": round(step_s, 4),
        "probe_vs_step": round(probe_s / step_s, 4),
        "forwards_vs_step": round((base_s + forward_s) / step_s, 4),
        "ok": trained_delta > NOISE_LOGPROB >= wrong_delta,
    }


def guarded(part: Any, *args: Any) -> dict[str, Any]:
    """A part's figures, or its error with the traceback's tail: one failing part costs only itself."""
    try:
        return part(*args)
    except Exception as error:  # any failure on the lent machine is a finding to record
        return {"error": repr(error)[:500], "traceback": traceback.format_exc()[-1500:], "ok": False}
