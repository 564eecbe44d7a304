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
from dataclasses import dataclass
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

    def __contains__(self, name: str) -> bool:
        return name in self._file_of

    def tensor(self, name: str) -> torch.Tensor:
        if name not in self._file_of:
            raise BackendError(f"{self.folder} has no weight {name!r}")
        return self._file_of[name].get_tensor(name)


@dataclass(frozen=True)
class LoraFactors:
    """A plain LoRA adapter in memory: per base weight name its (A, B), and the scale.

    Read once when the adapter is loaded (a few MB), so a later swap serves what was loaded even
    if the folder changes, and computes the full-size deltas only for the swap at hand."""

    scale: float
    factors: dict[str, tuple[torch.Tensor, torch.Tensor]]

    def deltas(self) -> dict[str, torch.Tensor]:
        """Base weight name -> scale * B @ A (float32)."""
        return {name: self.scale * (up.float() @ down.float()) for name, (down, up) in self.factors.items()}


def read_lora(adapter_dir: str | Path) -> LoraFactors:
    """The adapter's factors, or BackendError saying what is not plain LoRA on linear layers."""
    from safetensors.torch import load_file

    folder = Path(adapter_dir)
    try:
        config = json.loads((folder / "adapter_config.json").read_text())
        tensors = load_file(str(folder / "adapter_model.safetensors"))
    except (OSError, ValueError) as error:  # missing or broken files; safetensors raises ValueError kin
        raise BackendError(f"adapter {folder} cannot be read: {error}") from error
    _check_plain_lora(config, folder)
    suffixes = (".lora_A.weight", ".lora_B.weight")
    unknown = [key for key in tensors if not key.endswith(suffixes)]
    modules = {
        key.removeprefix(ADAPTER_PREFIX).rsplit(".lora_", 1)[0] for key in tensors if key.endswith(suffixes)
    }
    factors = {}
    for module in sorted(modules):
        down = tensors.get(f"{ADAPTER_PREFIX}{module}.lora_A.weight")
        up = tensors.get(f"{ADAPTER_PREFIX}{module}.lora_B.weight")
        if down is None or up is None:
            raise BackendError(f"adapter {folder}: {module} lacks its lora_A or lora_B weight")
        factors[f"{module}.weight"] = (down, up)
    if unknown or not factors:
        raise BackendError(
            f"adapter {folder}: cannot merge weights {unknown[:3] or 'none'} (plain LoRA only)"
        )
    rank = int(config["r"])
    return LoraFactors(
        config["lora_alpha"] / (math.sqrt(rank) if config.get("use_rslora") else rank), factors
    )


def lora_deltas(adapter_dir: str | Path) -> dict[str, torch.Tensor]:
    """Base weight name -> scale * B @ A (float32) for every module the adapter changes."""
    return read_lora(adapter_dir).deltas()


def replacement_weights(
    deltas: dict[str, torch.Tensor], base: SafetensorsFolder, reverted: Iterable[str] = ()
) -> dict[str, torch.Tensor]:
    """The full weights to serve: base + delta (float32, rounded once by the server to the served
    dtype) where the adapter changes one, the base's own weight for each `reverted` name."""
    weights = {name: base.tensor(name) for name in reverted if name not in deltas}
    for name, delta in deltas.items():
        original = base.tensor(name)
        if original.shape != delta.shape:
            raise BackendError(
                f"adapter delta for {name} is {tuple(delta.shape)}, the base's {tuple(original.shape)}"
            )
        weights[name] = original.float() + delta
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
        "lora_bias": bool(config.get("lora_bias")),
        "target_parameters": bool(config.get("target_parameters")),
        "layer_replication": bool(config.get("layer_replication")),
    }
    if any(refused.values()):
        names = ", ".join(name for name, bad in refused.items() if bad)
        raise BackendError(f"adapter {folder} uses {names}: merged serving folds plain LoRA only")
