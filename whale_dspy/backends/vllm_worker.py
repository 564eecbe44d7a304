"""A vLLM worker extension (`--worker-extension-cls`): replace some linear weights of the served
model in place, so a merged adapter is served without the per-token LoRA cost.

On the CPU build vLLM packs each linear layer's weight for oneDNN once after
loading and drops the weight itself, so `load_weights` cannot reach it again.
The extension rebuilds each affected layer's full weight (fused layers such as
qkv_proj from all their shards: the changed ones from the file, the rest from
the base folder), rounds it once to the served dtype and has vLLM pack it again.

In bf16 a trained RFT delta (3-7e-4 rms of its weight) rounds away in 73-82 % of
its entries, yet the rounding dithers: over a layer the merged weights keep the
adapter's effect on the outputs in expectation (measured 1.02 of it on a layer of
SmolLM2's shape, as exact float32 weights do), with per-weight noise the size of
the base's own bf16 rounding. Runtime LoRA in bf16 adds each sub-ulp contribution
to an output already on the bf16 grid and keeps 0.31 of the same effect.

Called through the dev-mode `/collective_rpc` endpoint by `MergedAdapterServer`;
every layer is built and checked before any is replaced, so a refused swap leaves
the served weights as they were.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from whale_dspy.backends.lora_merge import SafetensorsFolder

REPLACE_METHOD = "whale_replace_weights"


class WeightReplacement:
    """Mixed into vLLM's worker class by vLLM itself; `self` is the worker."""

    model_config: Any
    model_runner: Any

    def whale_replace_weights(self, path: str) -> int:
        """Serve the weights in the safetensors file at `path` (HF names, float32: rounded once,
        here, to the served dtype); returns the layers replaced."""
        import torch
        from safetensors.torch import load_file
        from vllm.model_executor.layers.linear import LinearBase
        from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            raise RuntimeError("whale_replace_weights repacks CPU linear layers only")
        model = self.model_runner.get_model()
        changed = load_file(path)
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
            built.append((layer, weight.contiguous()))
        for layer, weight in built:
            layer.weight = torch.nn.Parameter(weight.to(layer.weight.dtype), requires_grad=False)
            dispatch_cpu_unquantized_gemm(layer, remove_weight=True)  # as vLLM packs it after loading
        return len(built)


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
