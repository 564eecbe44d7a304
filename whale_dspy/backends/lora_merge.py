"""A PEFT LoRA adapter folded into its base weights: W + scale * B @ A, for the modules it targets.

Merged serving (merged_server.py) hands these tensors to the running vLLM so that
the adapter costs nothing per token. Only plain LoRA on linear layers is folded
(what our trainer writes); anything else is refused with the reason, and runtime
LoRA serves it instead.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from whale_dspy.errors import BackendError

if TYPE_CHECKING:
    import torch

ADAPTER_PREFIX = "base_model.model."
"""PEFT's prefix on saved adapter keys, in front of the base model's own module names."""


class SafetensorsFolder:
    """The tensors of a Hugging Face model folder (one or several .safetensors files), read lazily."""

    def __init__(self, folder: str | Path) -> None:
        from safetensors import safe_open

        self.folder = Path(folder)
        files = sorted(self.folder.glob("*.safetensors"))
        if not files:
            raise BackendError(f"{self.folder} holds no .safetensors weights to merge an adapter into")
        self._handles = [safe_open(str(path), framework="pt") for path in files]
        self._file_of = {key: handle for handle in self._handles for key in handle.keys()}  # noqa: SIM118 (a safe_open handle, not a dict)

    def tensor(self, name: str) -> torch.Tensor:
        if name not in self._file_of:
            raise BackendError(f"{self.folder} has no weight {name!r}")
        return self._file_of[name].get_tensor(name)


def lora_deltas(adapter_dir: str | Path) -> dict[str, torch.Tensor]:
    """Base weight name -> scale * B @ A (float32) for every module the adapter changes."""
    from safetensors.torch import load_file

    folder = Path(adapter_dir)
    config = json.loads((folder / "adapter_config.json").read_text())
    _check_plain_lora(config, folder)
    tensors = load_file(str(folder / "adapter_model.safetensors"))
    rank = int(config["r"])
    scale = config["lora_alpha"] / (math.sqrt(rank) if config.get("use_rslora") else rank)
    deltas: dict[str, torch.Tensor] = {}
    for key, down in tensors.items():
        if not key.endswith(".lora_A.weight"):
            continue
        module = key.removeprefix(ADAPTER_PREFIX).removesuffix(".lora_A.weight")
        up = tensors.get(f"{ADAPTER_PREFIX}{module}.lora_B.weight")
        if up is None:
            raise BackendError(f"adapter {folder}: {module} has lora_A but no lora_B")
        deltas[f"{module}.weight"] = scale * (up.float() @ down.float())
    unknown = [key for key in tensors if ".lora_A." not in key and ".lora_B." not in key]
    if unknown or not deltas:
        raise BackendError(
            f"adapter {folder}: cannot merge weights {unknown[:3] or 'none'} (plain LoRA only)"
        )
    return deltas


def replacement_weights(
    deltas: dict[str, torch.Tensor], base: SafetensorsFolder, reverted: Iterable[str] = ()
) -> dict[str, torch.Tensor]:
    """The full weights to serve: base + delta where the adapter changes one, the base's own
    weight for each `reverted` name (changed by the adapter served before, not by this one)."""
    weights = {name: base.tensor(name) for name in reverted if name not in deltas}
    for name, delta in deltas.items():
        original = base.tensor(name)
        if original.shape != delta.shape:
            raise BackendError(
                f"adapter delta for {name} is {tuple(delta.shape)}, the base's {tuple(original.shape)}"
            )
        weights[name] = (original.float() + delta).to(original.dtype)
    return weights


def _check_plain_lora(config: dict, folder: Path) -> None:
    refused = {
        "peft_type": config.get("peft_type") not in (None, "LORA"),
        "use_dora": bool(config.get("use_dora")),
        "bias": config.get("bias", "none") != "none",
        "fan_in_fan_out": bool(config.get("fan_in_fan_out")),
        "modules_to_save": bool(config.get("modules_to_save")),
        "rank_pattern": bool(config.get("rank_pattern")),
        "alpha_pattern": bool(config.get("alpha_pattern")),
    }
    if any(refused.values()):
        names = ", ".join(name for name, bad in refused.items() if bad)
        raise BackendError(f"adapter {folder} uses {names}: merged serving folds plain LoRA only")
