"""LoraTrainer: up-front checks, crashes as TrainingError, and a real tiny run on SmolLM2."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from whale_dspy.errors import TrainingError
from whale_dspy.protocols import WeightTrainer
from whale_dspy.records import AdapterRef, SFTExample
from whale_dspy.training import LoraTrainer, LoraTrainingConfig, lora_trainer


@pytest.fixture(autouse=True)
def own_training_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine-wide CPU training lock per test: a fast test here must not wait for another
    xdist worker's real training."""
    monkeypatch.setattr(lora_trainer, "CPU_TRAINING_LOCK", tmp_path / "training.lock")


def toy_examples(items: range) -> list[SFTExample]:
    """A made-up fact the base model cannot know: each item's code."""
    return [
        SFTExample(
            ({"role": "user", "content": f"Give me the code for item {i}."},), f"The code is ZEBRA-{i}."
        )
        for i in items
    ]


def test_lora_trainer_is_a_weight_trainer():
    assert isinstance(LoraTrainer(), WeightTrainer)


def test_importing_the_trainer_loads_no_heavy_library():
    code = (
        "import sys, whale_dspy.training, whale_dspy.testing.fake_trainer;"
        "print(sorted({'torch', 'peft', 'transformers', 'vllm'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_empty_examples_fail_before_any_process_starts(tmp_path):
    with pytest.raises(TrainingError, match="no examples"):
        LoraTrainer().train([], base="any", parent=None, name="a1", out_dir=tmp_path / "a1")
    assert not (tmp_path / "a1").exists()


def test_parent_from_another_base_is_refused(tmp_path):
    parent = AdapterRef("p", str(tmp_path / "p"), base="other-model")
    with pytest.raises(TrainingError, match="other-model"):
        LoraTrainer().train(
            toy_examples(range(1)), base="mine", parent=parent, name="c", out_dir=tmp_path / "c"
        )


def test_a_crashing_worker_raises_training_error_with_the_log_tail(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(TrainingError, match="exited with") as info:
        LoraTrainer().train(
            toy_examples(range(2)), base=str(missing), parent=None, name="x", out_dir=tmp_path / "x"
        )
    assert "Traceback" in str(info.value)
    assert str(missing) in str(info.value)
    assert (tmp_path / "x" / "train.log").read_text().strip().splitlines()[-1] in str(info.value)
    assert not (tmp_path / "x" / "adapter").exists()


def test_a_launcher_runs_the_worker_with_its_variables_on_the_command_line(tmp_path):
    """As `ssh host` would: the launcher gets the worker's command, and no environment of ours."""
    marker = tmp_path / "launched"
    launcher = ["sh", "-c", f'echo "$@" > {marker}; exec env -i "$@"', "launcher"]
    missing = tmp_path / "no-such-model"
    with pytest.raises(TrainingError, match="exited with") as info:
        LoraTrainer(launcher=launcher).train(
            toy_examples(range(2)), base=str(missing), parent=None, name="x", out_dir=tmp_path / "x"
        )
    assert str(missing) in str(info.value)  # the worker itself ran, and read the spec
    command = marker.read_text()
    assert command.startswith("env PYTHONPATH=") and " OMP_NUM_THREADS=" in command
    assert f"-m whale_dspy.training.worker {tmp_path / 'x' / 'spec.json'}" in command


def test_a_worker_past_its_timeout_is_killed_and_reported(tmp_path):
    trainer = LoraTrainer(timeout_s=0.2)  # far less than importing torch takes
    with pytest.raises(TrainingError, match="timeout_s=0.2"):
        trainer.train(toy_examples(range(2)), base="any", parent=None, name="t", out_dir=tmp_path / "t")
    assert not (tmp_path / "t" / "adapter").exists()


SLEEPING_LAUNCHER = """
import json, sys, time
spans, wait_s = sys.argv[1], float(sys.argv[2])
start = time.time()
with open(spans + ".started", "a") as started:
    started.write("x")
time.sleep(0.3)
while time.time() - start < wait_s and len(open(spans + ".started").read()) < 2:
    time.sleep(0.05)  # the other has not started yet: on loaded cores it may take seconds
open(spans, "a").write(json.dumps([start, time.time()]) + "\\n")
"""
"""A launcher standing in for the worker: it records when it ran (0.3 s, or until the other one has
started, `wait_s` at most) and ignores the command."""


def training_spans(tmp_path: Path, device: str, wait_s: float = 0.0) -> list[tuple[float, float]]:
    """(start, end) of two trainings started at once, each a stand-in worker."""
    spans = tmp_path / "spans.jsonl"
    launcher = (sys.executable, "-c", SLEEPING_LAUNCHER, str(spans), str(wait_s))
    trainer = LoraTrainer(LoraTrainingConfig(device=device), launcher=launcher)
    threads = [
        threading.Thread(target=trainer._run_worker, args=(tmp_path / f"spec{i}", tmp_path / f"log{i}"))
        for i in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(tuple(json.loads(line)) for line in spans.read_text().splitlines())


def test_cpu_trainings_on_one_machine_take_turns(tmp_path):
    first, second = training_spans(tmp_path, "cpu")
    assert second[0] >= first[1]


def test_gpu_trainings_do_not_wait_for_each_other(tmp_path):
    # Each waits (30 s at most) for the other to start, so a second process slow to start on loaded
    # cores still overlaps the first; trainings that took turns would not, however long they waited.
    first, second = training_spans(tmp_path, "cuda", wait_s=30)
    assert second[0] < first[1]


@pytest.fixture(scope="module")
def parent_run(smollm2_dir: str, tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("train") / "toy-1"
    config = LoraTrainingConfig(learning_rate=2e-3, epochs=5, batch_size=4, seed=1)
    result = LoraTrainer(config).train(
        toy_examples(range(8)), base=smollm2_dir, parent=None, name="toy-1", out_dir=out_dir
    )
    return result, json.loads((out_dir / "metrics.json").read_text())


def greedy(model, tokenizer, prompt: str) -> str:
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
    )
    inputs = tokenizer(text, return_tensors="pt", add_special_tokens=False)
    out = model.generate(**inputs, max_new_tokens=10, do_sample=False)
    return tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)


@pytest.mark.integration
@pytest.mark.no_server
def test_loss_falls_on_a_toy_task_and_the_result_is_reported(parent_run, smollm2_dir):
    result, metrics = parent_run
    losses = [s["loss"] for s in metrics["steps"]]
    assert len(losses) == 5 * 2  # 5 epochs of 8 examples in batches of 4
    assert sum(losses[-2:]) < 0.25 * sum(losses[:2])
    assert result.loss == pytest.approx(sum(losses) / len(losses))
    assert result.examples == 8
    assert result.tokens == metrics["tokens"] > 8  # each completion is several tokens plus the end-of-turn
    assert result.seconds >= metrics["train_seconds"] > 0
    assert result.adapter == AdapterRef("toy-1", result.adapter.path, smollm2_dir, None)
    config = json.loads((Path(result.adapter.path) / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == smollm2_dir
    assert (Path(result.adapter.path) / "adapter_model.safetensors").exists()


@pytest.mark.integration
@pytest.mark.no_server
def test_the_adapter_loads_with_peft_and_changes_greedy_generation(parent_run, smollm2_dir):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    result, _ = parent_run
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    base = AutoModelForCausalLM.from_pretrained(smollm2_dir)
    prompt = "Give me the code for item 5."
    before = greedy(base, tokenizer, prompt)
    tuned = PeftModel.from_pretrained(base, result.adapter.path)
    after = greedy(tuned, tokenizer, prompt)
    assert after != before
    assert "ZEBRA" in after and "ZEBRA" not in before


@pytest.mark.integration
@pytest.mark.no_server
def test_a_child_continues_from_its_parent_weights(parent_run, smollm2_dir, tmp_path):
    parent, parent_metrics = parent_run
    config = LoraTrainingConfig(learning_rate=1e-4, epochs=1, batch_size=4, seed=2)
    child = LoraTrainer(config).train(
        toy_examples(range(8, 12)),
        base=smollm2_dir,
        parent=parent.adapter,
        name="toy-2",
        out_dir=tmp_path / "toy-2",
    )
    child_metrics = json.loads((tmp_path / "toy-2" / "metrics.json").read_text())
    # Unseen items of the learned task start far below where the fresh adapter started.
    assert child_metrics["steps"][0]["loss"] < 0.25 * parent_metrics["steps"][0]["loss"]
    assert child.adapter.parent == "toy-1"
    assert child.adapter.path != parent.adapter.path
    config = json.loads((Path(child.adapter.path) / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == smollm2_dir
    with pytest.raises(TrainingError, match="never reused"):
        LoraTrainer(config).train(
            toy_examples(range(1)),
            base=smollm2_dir,
            parent=parent.adapter,
            name="toy-2",
            out_dir=tmp_path / "toy-2",
        )


@pytest.mark.parametrize("config_name", ["Qwen2Config", "LlamaConfig"])
def test_completion_loss_and_its_gradient_equal_the_models_own_loss(config_name):
    """The head sees only positions that predict a completion token; loss and LoRA gradients agree."""
    import torch
    import transformers
    from peft import LoraConfig, get_peft_model

    from whale_dspy.training.sft_data import IGNORE, Encoded
    from whale_dspy.training.worker import collate, completion_loss

    torch.manual_seed(0)
    shape = dict(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2)
    config = getattr(transformers, config_name)(**shape, num_attention_heads=4, num_key_value_heads=2)
    base = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model = get_peft_model(
        base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    )
    rows = [(list(range(5, 17)), 3), (list(range(20, 27)), 4), (list(range(40, 50)), 1)]
    batch = collate(
        [Encoded(tuple(ids), tuple([IGNORE] * (len(ids) - n) + ids[-n:])) for ids, n in rows], 0, "cpu"
    )
    trainable = [p for p in model.parameters() if p.requires_grad]
    ours = completion_loss(model, batch)
    ours_grads = torch.autograd.grad(ours, trainable)
    theirs = model(**batch).loss
    theirs_grads = torch.autograd.grad(theirs, trainable)
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-5)
    for mine, reference in zip(ours_grads, theirs_grads, strict=True):
        torch.testing.assert_close(mine, reference, rtol=1e-4, atol=1e-6)


def test_gradient_checkpointing_recomputes_each_layer_and_keeps_loss_and_gradients(tmp_path):
    """With the flag, every decoder layer runs again in the backward pass; the numbers do not change."""
    import torch
    import transformers

    from whale_dspy.training.sft_data import IGNORE, Encoded
    from whale_dspy.training.worker import collate, completion_loss, load_model

    torch.manual_seed(0)
    shape = dict(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2)
    config = transformers.Qwen2Config(**shape, num_attention_heads=4, num_key_value_heads=2)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "base")
    ids = list(range(5, 17))
    batch = collate([Encoded(tuple(ids), tuple([IGNORE] * 8 + ids[-4:]))], 0, "cpu")

    def backward(checkpointing: bool) -> tuple[float, list, int]:
        settings = LoraTrainingConfig(dropout=0.0, gradient_checkpointing=checkpointing)
        model = load_model(str(tmp_path / "base"), None, settings)
        for name, parameter in model.named_parameters():  # LoRA's B starts at zero: give it a gradient path
            if "lora_B" in name:
                torch.nn.init.normal_(parameter, std=0.1)
        calls = []
        model.base_model.model.model.layers[0].register_forward_pre_hook(lambda *_: calls.append(1))
        loss = completion_loss(model, batch)
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters() if p.requires_grad]
        return loss.item(), grads, len(calls)

    plain_loss, plain_grads, plain_calls = backward(False)
    loss, grads, calls = backward(True)
    assert (plain_calls, calls) == (1, 2)  # the second call is the recomputation
    assert loss == pytest.approx(plain_loss, rel=1e-6)
    for mine, reference in zip(grads, plain_grads, strict=True):
        torch.testing.assert_close(mine, reference, rtol=1e-5, atol=1e-7)
