"""Merged adapter serving without a server: the LoRA fold against PEFT's own merge, the weights
gate under concurrent calls, and how the merged server is launched and refuses what it cannot do."""

from __future__ import annotations

import copy
import json
import threading
import time
from pathlib import Path

import pytest

from whale_dspy.backends.embedded import embedded_server
from whale_dspy.backends.lora_merge import SafetensorsFolder, lora_deltas, replacement_weights
from whale_dspy.backends.merged_server import MergedAdapterServer
from whale_dspy.backends.vllm_server import VLLMServer
from whale_dspy.backends.vllm_worker import _layers_to_rebuild
from whale_dspy.backends.weights_gate import WeightsGate
from whale_dspy.errors import BackendError
from whale_dspy.records import AdapterRef


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-layer random Llama saved as safetensors, the shape of our embedded models' folders."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2,
    )  # fmt: skip
    folder = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def peft_adapter(base: Path, out: Path, *, targets: list[str], rslora: bool = False, seed: int = 1) -> Path:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=targets, init_lora_weights=False, use_rslora=rslora)
    get_peft_model(model, config).save_pretrained(out)
    return out


def peft_merged(base: Path, adapter: Path) -> dict:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    merged = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), adapter).merge_and_unload()
    return merged.state_dict()


@pytest.mark.parametrize("rslora", [False, True])
def test_the_fold_matches_peft_merge_and_touches_only_the_targets(
    tiny_llama: Path, tmp_path: Path, rslora: bool
) -> None:
    import torch

    adapter = peft_adapter(tiny_llama, tmp_path / "adapter", targets=["q_proj", "v_proj"], rslora=rslora)
    weights = replacement_weights(lora_deltas(adapter), SafetensorsFolder(tiny_llama))
    expected = peft_merged(tiny_llama, adapter)
    assert sorted(weights) == sorted(
        f"model.layers.{i}.self_attn.{m}.weight" for i in range(2) for m in ("q_proj", "v_proj")
    )
    base = SafetensorsFolder(tiny_llama)
    for name, tensor in weights.items():
        torch.testing.assert_close(tensor, expected[name])
        assert not torch.equal(tensor, base.tensor(name))  # the adapter does change it


def test_a_new_adapter_reverts_what_only_the_previous_one_changed(tiny_llama: Path, tmp_path: Path) -> None:
    import torch

    first = lora_deltas(peft_adapter(tiny_llama, tmp_path / "a", targets=["q_proj", "v_proj"]))
    second = lora_deltas(peft_adapter(tiny_llama, tmp_path / "b", targets=["q_proj"], seed=2))
    base = SafetensorsFolder(tiny_llama)
    weights = replacement_weights(second, base, reverted=set(first))
    v_proj = "model.layers.0.self_attn.v_proj.weight"
    assert torch.equal(weights[v_proj], base.tensor(v_proj))  # v back to the base
    assert set(weights) == set(first)  # q replaced by the second adapter's, v reverted
    assert replacement_weights({}, base, reverted=set(first)).keys() == set(
        first
    )  # and all back for the base


def test_an_adapter_beyond_plain_lora_is_refused_before_it_is_served(
    tiny_llama: Path, tmp_path: Path
) -> None:
    adapter = peft_adapter(tiny_llama, tmp_path / "dora", targets=["q_proj"])
    config = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**config, "use_dora": True}))
    with pytest.raises(BackendError, match="use_dora: merged serving folds plain LoRA only"):
        lora_deltas(adapter)


def test_fused_layers_are_rebuilt_from_all_their_shards() -> None:
    class Model:
        packed_modules_mapping = {
            "qkv_proj": ["q_proj", "k_proj", "v_proj"],
            "gate_up_proj": ["gate_proj", "up_proj"],
        }

    changed = dict.fromkeys(
        [
            "model.layers.0.self_attn.q_proj.weight",
            "model.layers.0.self_attn.v_proj.weight",
            "model.layers.1.mlp.down_proj.weight",
        ]
    )
    assert _layers_to_rebuild(Model(), changed) == {
        "model.layers.0.self_attn.qkv_proj": ["q_proj", "k_proj", "v_proj"],
        "model.layers.1.mlp.down_proj": ["down_proj"],
    }


class RecordingSwaps:
    """A swap that takes time and checks that no call was in flight on the old weights."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.lock = threading.Lock()
        self.swapped_with_calls_in_flight = 0
        self.history: list[object] = []

    def __call__(self, weights: object) -> None:
        with self.lock:
            self.swapped_with_calls_in_flight += self.in_flight
        time.sleep(0.01)
        self.history.append(weights)


def test_calls_run_only_on_their_weights_and_a_swap_waits_for_calls_in_flight() -> None:
    swaps = RecordingSwaps()
    gate = WeightsGate(swaps)
    wrong = []

    def call(weights: str | None) -> None:
        with gate.serving(weights):
            with swaps.lock:
                swaps.in_flight += 1
            if gate.current != weights:
                wrong.append(weights)
            time.sleep(0.002)
            with swaps.lock:
                swaps.in_flight -= 1

    threads = [threading.Thread(target=call, args=(["a", "b", None][i % 3],)) for i in range(60)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []
    assert swaps.swapped_with_calls_in_flight == 0
    assert gate.swaps == len(swaps.history) >= 2  # it did swap between the three


def test_calls_on_the_served_weights_never_swap() -> None:
    swaps = RecordingSwaps()
    gate = WeightsGate(swaps, current="a")
    for _ in range(5):
        with gate.serving("a"):
            pass
    assert swaps.history == [] and gate.swaps == 0


def test_a_failed_swap_is_tried_again_by_the_next_call() -> None:
    attempts = []

    def flaky(weights: object) -> None:
        attempts.append(weights)
        if len(attempts) == 1:
            raise BackendError("the server refused the weights")

    gate = WeightsGate(flaky)
    with pytest.raises(BackendError):
        gate.switch("a")
    with gate.serving(None):  # the base again: the half-swapped server is not trusted to hold it
        pass
    assert attempts == ["a", None] and gate.current is None


def test_the_merged_server_launches_without_runtime_lora_and_with_our_worker_extension(
    tmp_path: Path,
) -> None:
    server = MergedAdapterServer("m", log_path=tmp_path / "log", cpu=True)
    argv = server._argv("/models/m", 8000)
    assert "--enable-lora" not in argv
    assert (
        argv[argv.index("--worker-extension-cls") + 1] == "whale_dspy.backends.vllm_worker.WeightReplacement"
    )
    assert server._env()["VLLM_SERVER_DEV_MODE"] == "1"
    assert server.serving()["adapters"] == "merged"


@pytest.mark.parametrize(
    ("model", "options", "expected"),
    [
        ("smollm2-135m", {"cpu": True}, MergedAdapterServer),
        ("smollm2-135m", {"cpu": False}, VLLMServer),
        ("smollm2-135m", {"cpu": True, "command": ["vllm"]}, VLLMServer),
        ("org/hub-model", {"cpu": True}, VLLMServer),  # no weights on disk to fold into
    ],
)
def test_a_runs_own_server_merges_adapters_on_the_cpu_build_when_it_runs_here(
    tmp_path: Path, model: str, options: dict, expected: type
) -> None:
    assert type(embedded_server(model, run_dir=tmp_path, **options)) is expected
    assert type(embedded_server(model, run_dir=tmp_path, adapters="runtime", cpu=True)) is VLLMServer


def test_merged_serving_is_refused_on_a_gpu_build(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="GPU build"):
        MergedAdapterServer("m", log_path=tmp_path / "log", cpu=False)


def test_lora_biases_and_unpaired_factors_are_refused(tiny_llama: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    adapter = peft_adapter(tiny_llama, tmp_path / "adapter", targets=["q_proj"])
    tensors = load_file(adapter / "adapter_model.safetensors")
    key = next(k for k in tensors if k.endswith("lora_B.weight"))
    biased = {**tensors, key.replace(".weight", ".bias"): tensors[key][:, 0].contiguous()}
    save_file(biased, adapter / "adapter_model.safetensors")
    with pytest.raises(BackendError, match="cannot merge weights.*lora_B.bias"):
        lora_deltas(adapter)
    save_file({k: v for k, v in tensors.items() if k != key}, adapter / "adapter_model.safetensors")
    with pytest.raises(BackendError, match="lacks its lora_A or lora_B"):
        lora_deltas(adapter)


def swapping_server(tiny_llama: Path, tmp_path: Path) -> MergedAdapterServer:
    """A merged server that was never started, its base folder open (tests stub its HTTP calls)."""
    server = MergedAdapterServer(str(tiny_llama), log_path=tmp_path / "log", cpu=True)
    server._base = SafetensorsFolder(tiny_llama)
    return server


def test_after_a_failed_swap_the_next_one_still_reverts_what_may_have_changed(
    tiny_llama: Path, tmp_path: Path
) -> None:
    server = swapping_server(tiny_llama, tmp_path)
    adapter = peft_adapter(tiny_llama, tmp_path / "a1", targets=["q_proj"])
    sent = []

    def replace(weights, label):
        sent.append(set(weights))
        if len(sent) == 1:
            raise BackendError("/collective_rpc timed out (the worker may have swapped anyway)")

    server._replace = replace
    with pytest.raises(BackendError):
        server.load_adapter(AdapterRef("a1", str(adapter), str(tiny_llama)))
    server.gate.switch(None)  # back to the base: every weight a1 may have changed goes back
    q_weights = {f"model.layers.{i}.self_attn.q_proj.weight" for i in range(2)}
    assert sent == [q_weights, q_weights]  # a1's weights, then the same names back to the base


def test_a_prefix_cache_that_will_not_reset_is_a_backend_error(tiny_llama: Path, tmp_path: Path) -> None:
    server = swapping_server(tiny_llama, tmp_path)
    routes = []

    class Refused:
        def json(self) -> dict:
            return {"success": False}

    def post(route, payload, name):
        routes.append(route)
        return Refused()

    server._post = post
    with pytest.raises(BackendError, match="prefix cache could not be reset"):
        server._reset_prefix_cache("a1")
    assert routes[-1].endswith("reset_running_requests=true")  # the last try frees running requests too


def test_the_merged_server_refuses_unknown_adapters_and_dspy_caching(tmp_path: Path) -> None:
    server = MergedAdapterServer("m", log_path=tmp_path / "log", cpu=True)
    server._url = "http://127.0.0.1:1"
    server._process = object()  # type: ignore[assignment]  # "started", for lm()'s url
    with pytest.raises(BackendError, match="not loaded"):
        server.lm("never-loaded")
    with pytest.raises(BackendError, match="cache would mix them"):
        server.lm(cache=True)
    with pytest.raises(BackendError, match="not a PEFT adapter"):
        server.load_adapter(AdapterRef("a1", str(tmp_path), "m"))


def test_copies_of_a_bound_lm_share_the_one_gate(tmp_path: Path) -> None:
    from whale_dspy.backends.bound_lm import WeightsBoundLM

    gate = WeightsGate(lambda weights: None)
    lm = WeightsBoundLM("whale-vllm/base", gate=gate, weights="a1", api_base="http://x/v1", api_key="EMPTY")
    assert lm.copy(max_tokens=7).gate is gate
    assert copy.deepcopy(lm).gate is gate


SWALLOWING_HARNESS = """
import dspy


class Swallow(dspy.Module):
    def __init__(self, signature):
        super().__init__()
        self.predict = dspy.Predict(signature)

    def forward(self, **inputs):
        try:
            return self.predict(**inputs)
        except Exception:
            return dspy.Prediction(answer="")


def build(signature, tools):
    return Swallow(signature)
"""


def test_a_failed_swap_stops_the_evaluation_even_when_the_harness_catches_it() -> None:
    """A swap that the server refused is the server's failure: never a rollout scored 0."""
    import dspy

    from whale_dspy.backends.bound_lm import WeightsBoundLM
    from whale_dspy.evaluation import EvalRequest, evaluate
    from whale_dspy.harness import HarnessProgram, HarnessSource

    def refused(weights: object) -> None:
        raise BackendError("/collective_rpc for 'a1' was refused (HTTP 500)")

    lm = WeightsBoundLM("whale-vllm/base", gate=WeightsGate(refused), weights="a1", api_base="http://x/v1")
    program = HarnessProgram(
        HarnessSource("swallow", SWALLOWING_HARNESS).vouched(), dspy.Signature("question -> answer")
    )
    task = dspy.Example(task_id="t0", question="q", answer="a").with_inputs("question")
    with pytest.raises(BackendError, match="inference server failed.*was refused"):
        evaluate(program, EvalRequest([task], metric=lambda e, p, trace=None: 1.0, lm=lm, k=2), threads=1)


def test_a_failed_swap_on_the_async_path_reaches_the_rollouts_watch() -> None:
    import asyncio

    from whale_dspy.backends.bound_lm import WeightsBoundLM
    from whale_dspy.rollouts import RolloutWatch, _current_watch

    def refused(weights: object) -> None:
        raise BackendError("/collective_rpc refused")

    lm = WeightsBoundLM("whale-vllm/base", gate=WeightsGate(refused), weights="a1", api_base="http://x/v1")
    watch = RolloutWatch()
    token = _current_watch.set(watch)
    try:
        with pytest.raises(BackendError):
            asyncio.run(lm.acall("hi"))
    finally:
        _current_watch.reset(token)
    assert isinstance(watch.server_failure, BackendError)  # the waiting thread ran in our context
