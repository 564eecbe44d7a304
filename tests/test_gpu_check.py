"""The prepared GPU check's code path on a tiny random model on CPU: every part runs and writes figures."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PARTS = (
    "model",
    "forward (no grad)",
    "full forward+backward (A, before)",
    "adapter save / reload",
    "full forward+backward (A, after)",
    "batch generation (greedy)",
    "adapter keys (Qwen3.5 shape)",
    "adapter-effect probe (PEFT)",
)


def test_the_tiny_run_measures_every_part_and_reloads_the_adapter_exactly(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--tiny", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads((tmp_path / "gpu_check.json").read_text())
    assert figures["complete"] is True
    parts = figures["parts"]
    assert set(PARTS) <= set(parts)
    (lora,) = [value for name, value in parts.items() if name.startswith("LoRA SFT")]
    assert lora["tokens_per_s"] > 0 and all(math.isfinite(loss) for loss in lora["loss_first_last"])
    reload = parts["adapter save / reload"]
    assert reload["max_abs_logit_diff"] == 0.0 and reload["adapter_effect_max_abs_logit"] > 0
    assert parts["batch generation (greedy)"]["new_tokens_per_s"] > 0
    assert "## batch generation (greedy)" in (tmp_path / "gpu_check.md").read_text()
    keys = parts["adapter keys (Qwen3.5 shape)"]
    assert keys["ok"] is True and keys["lora_modules"] > 0, keys
    assert keys["keys_landing_in_vllm_class"] == keys["lora_modules"] and keys["unmapped_keys_landing"] == 0
    assert keys["served_adapter_reread_max_abs_logit_diff"] == 0.0
    probe = parts["adapter-effect probe (PEFT)"]
    noise = probe["noise_threshold"]
    assert probe["max_abs_dlogprob_trained"] > noise >= probe["max_abs_dlogprob_wrong_prefix"]
    assert probe["ok"] is True and probe["probe_s"] > 0 and probe["lora_step_s"] > 0


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has a GPU")
def test_the_wrapper_refuses_a_machine_without_a_gpu(tmp_path):
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode == 2 and "needs a CUDA GPU" in done.stderr
    assert not (tmp_path / "gpu_check.json").exists()
