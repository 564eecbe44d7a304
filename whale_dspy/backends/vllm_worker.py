"""A vLLM worker extension (`--worker-extension-cls`): replace some linear weights of the served
model in place, so a merged adapter is served without the per-token LoRA cost.

On the CPU build vLLM packs each linear layer's weight for oneDNN once after
loading and drops the weight itself, so `load_weights` cannot reach it again.
The extension rebuilds each affected layer's full weight (fused layers such as
qkv_proj from all their shards: the changed ones from the file, the rest from
the base folder). A layer that carries an adapter computes in float32: a trained
LoRA delta is about 1e-4 of its weight (measured 3-7e-4 rms on our RFT adapters),
far below bf16's resolution, so merging it into bf16 weights zeroed 73-82 % of
its entries. A layer restored to the base is packed again in the served dtype,
exactly as vLLM packed it at load. Called through the dev-mode `/collective_rpc`
endpoint by `MergedAdapterServer`; every layer is built and checked before any
is replaced, so a refused swap leaves the served weights as they were.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from whale_dspy.backends.lora_merge import SafetensorsFolder

REPLACE_METHOD = "whale_replace_weights"


class WeightReplacement:
    """Mixed into vLLM's worker class by vLLM itself; `self` is the worker."""

    model_config: Any
    model_runner: Any

    def whale_replace_weights(self, path: str, adapted_json: str) -> int:
        """Serve the weights in the safetensors file at `path` (HF names); the names listed in
        `adapted_json` carry an adapter (their layers compute in float32). Returns the layers set."""
        import torch
        from safetensors.torch import load_file
        from vllm.model_executor.layers.linear import LinearBase
        from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            raise RuntimeError("whale_replace_weights repacks CPU linear layers only")
        model = self.model_runner.get_model()
        changed, adapted = load_file(path), set(json.loads(adapted_json))
        base = SafetensorsFolder(self.model_config.model)
        built = []
        for module_name, shards in _layers_to_rebuild(model, changed).items():
            layer = model.get_submodule(module_name)
            if not isinstance(layer, LinearBase):
                raise RuntimeError(f"{module_name} is a {type(layer).__name__}, not a linear layer")
            prefix = module_name.rpartition(".")[0]
            names = [f"{prefix}.{shard}.weight" for shard in shards]
            weight = torch.cat([changed[n] if n in changed else base.tensor(n) for n in names]).float()
            if tuple(weight.shape) != (layer.output_size, layer.input_size):
                raise RuntimeError(
                    f"{module_name}: rebuilt weight {tuple(weight.shape)}, layer is "
                    f"{(layer.output_size, layer.input_size)} (tensor parallelism is not supported)"
                )
            built.append((layer, weight.contiguous(), any(n in adapted for n in names)))
        for layer, weight, exact in built:
            if exact:
                _compute_in_float32(layer, weight)
            else:
                layer.weight = torch.nn.Parameter(weight.to(layer.weight.dtype), requires_grad=False)
                dispatch_cpu_unquantized_gemm(layer, remove_weight=True)
        return len(built)


def _compute_in_float32(layer: Any, weight: Any) -> None:
    """The layer's GEMM in float32 on a float32 weight, its output in the activations' dtype."""
    import torch

    bias = None if layer.bias is None else layer.bias.detach().float()

    def linear(x: torch.Tensor, _weight: Any, _bias: Any) -> torch.Tensor:
        return torch.nn.functional.linear(x.float(), weight, bias).to(x.dtype)

    layer.cpu_linear = linear


def _layers_to_rebuild(model: Any, changed: dict[str, Any]) -> dict[str, list[str]]:
    """vLLM module name -> its HF shard names in order, for every module a changed weight lands in."""
    fused_of = {shard: fused for fused, shards in model.packed_modules_mapping.items() for shard in shards}
    layers: dict[str, list[str]] = defaultdict(list)
    for name in changed:
        prefix, _, leaf = name.removesuffix(".weight").rpartition(".")
        fused = fused_of.get(leaf)
        if fused is None:
            layers[f"{prefix}.{leaf}"] = [leaf]
        else:
            layers[f"{prefix}.{fused}"] = list(model.packed_modules_mapping[fused])
    return dict(layers)
