"""Adapter keys land: a LoRA trained through AutoModelForCausalLM is written under the module
names vLLM serves the checkpoint with, on tiny random models built from each architecture's
config (no download)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers
from safetensors import safe_open
from vllm_source import mapper_prefixes, registered, submodule_built_from

from whale_dspy.errors import TrainingError
from whale_dspy.records import SFTExample
from whale_dspy.training import LoraTrainer, LoraTrainingConfig, lora_trainer
from whale_dspy.training.adapter_keys import PEFT_PREFIX, architectures_of, key_map_for
from whale_dspy.training.worker import load_model, save_adapter

vllm_lora = pytest.importorskip("vllm.lora.utils")
from vllm.model_executor.models.utils import WeightsMapper  # noqa: E402 (after the skip)

SETTINGS = LoraTrainingConfig(rank=4, target_modules=("q_proj", "k_proj", "v_proj", "o_proj"),
                              gradient_checkpointing=False)  # fmt: skip
TEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, vocab_size=256, linear_num_key_heads=2,
            linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16)  # fmt: skip
VISION = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64)
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32)
NESTED = {  # architecture -> (transformers config class, extra text settings)
    "Qwen3_5ForConditionalGeneration": ("Qwen3_5Config", {}),
    "Qwen3_5MoeForConditionalGeneration": ("Qwen3_5MoeConfig", MOE),
}


@pytest.fixture(autouse=True)
def own_training_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lora_trainer, "CPU_TRAINING_LOCK", tmp_path / "training.lock")


def nested_checkpoint(folder: Path, architecture: str) -> Path:
    """A random-weight checkpoint of a nested architecture, saved as the hub ships it."""
    config_class, extra = NESTED[architecture]
    config = getattr(transformers, config_class)(text_config=TEXT | extra, vision_config=VISION)
    torch.manual_seed(0)
    getattr(transformers, architecture)(config).save_pretrained(folder)
    return folder


def causal_checkpoint(folder: Path, config_class: str) -> Path:
    config = getattr(transformers, config_class)(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=256,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return folder


def trained_adapter(base: Path, out: Path) -> tuple[list[str], list[str], dict[str, torch.Tensor]]:
    """(LoRA modules as trained, keys as written, B weights as trained) for a fresh adapter with
    non-zero B, saved by the worker's own code."""
    model = load_model(str(base), None, SETTINGS)
    for name, param in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(param)
    modules = [n.removeprefix(PEFT_PREFIX) for n, m in model.named_modules() if hasattr(m, "lora_A")]
    b_weights = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_B" in n}
    save_adapter(model, str(base), out, key_map_for(architectures_of(str(base))))
    with safe_open(str(out / "adapter_model.safetensors"), framework="pt") as f:
        return modules, list(f.keys()), b_weights


def vllm_modules(keys: list[str], rules: dict) -> set[str]:
    """The modules vLLM's LoRA loader looks up for these keys, with the class's mapper."""
    mapper = WeightsMapper(orig_to_new_prefix=rules)
    return {vllm_lora.parse_fine_tuned_lora_name(key, mapper)[0] for key in keys}


@pytest.mark.parametrize("architecture", sorted(NESTED))
def test_keys_name_the_modules_vllms_nested_class_declares(tmp_path, architecture):
    base = nested_checkpoint(tmp_path / "base", architecture)
    modules, written, _ = trained_adapter(base, tmp_path / "adapter")
    module, class_name = registered(architecture)
    language_model, causal_class = submodule_built_from(module, class_name, "ForCausalLM")
    inner, _ = submodule_built_from(module, causal_class, "Model")
    declared = {f"{language_model}.{inner}.{name.removeprefix('model.')}" for name in modules}
    rules = mapper_prefixes(module, class_name)
    assert modules and all(name.startswith("model.layers.") for name in modules)  # as trained
    assert vllm_modules(written, rules) == declared
    as_trained = [f"{PEFT_PREFIX}{name}.lora_A.weight" for name in modules]
    assert not vllm_modules(as_trained, rules) & declared  # what vLLM issue #49354 loads: nothing


@pytest.mark.parametrize("config_class", ["Qwen2Config", "LlamaConfig"])
def test_a_causal_lm_adapter_is_written_as_peft_saves_it(tmp_path, config_class):
    base = causal_checkpoint(tmp_path / "base", config_class)
    modules, written, _ = trained_adapter(base, tmp_path / "adapter")
    assert sorted(written) == sorted(f"{PEFT_PREFIX}{m}.lora_{ab}.weight" for m in modules for ab in "AB")


def test_a_child_continues_from_its_parents_served_weights(tmp_path):
    base = nested_checkpoint(tmp_path / "base", "Qwen3_5ForConditionalGeneration")
    _, written, trained = trained_adapter(base, tmp_path / "parent")
    assert all(".language_model." in key for key in written)
    child = load_model(str(base), str(tmp_path / "parent"), SETTINGS)
    loaded = {n: p for n, p in child.named_parameters() if "lora_B" in n}
    assert loaded.keys() == trained.keys()
    assert all(torch.equal(loaded[name], trained[name]) for name in trained)


def test_a_model_loaded_nested_keeps_its_names(tmp_path):
    """AutoModelForCausalLM loads some nested classes whole (Gemma 3's): already the served names."""
    from peft import LoraConfig, get_peft_model

    base = nested_checkpoint(tmp_path / "base", "Qwen3_5ForConditionalGeneration")
    whole = transformers.Qwen3_5ForConditionalGeneration.from_pretrained(base)
    model = get_peft_model(whole, LoraConfig(r=4, target_modules=["q_proj"], task_type="CAUSAL_LM"))
    key_map = key_map_for(architectures_of(str(base)))
    save_adapter(model, str(base), tmp_path / "adapter", key_map)
    with safe_open(str(tmp_path / "adapter" / "adapter_model.safetensors"), framework="pt") as f:
        written = list(f.keys())
    assert written and all(key.startswith(f"{PEFT_PREFIX}model.language_model.layers.") for key in written)
    assert key_map.fitted(name for name, _ in model.named_modules()).load_mapping() == {}


def test_the_rename_is_read_off_vllms_own_mapper():
    """PaliGemma nests its language model too, and its vLLM class imports here."""
    from vllm.model_executor.models.registry import ModelRegistry

    model_class = ModelRegistry.models["PaliGemmaForConditionalGeneration"].load_model_cls()
    key_map = key_map_for(["PaliGemmaForConditionalGeneration"])
    assert key_map.source.startswith("vLLM ") and "PaliGemmaForConditionalGeneration" in key_map.source
    trained = f"{PEFT_PREFIX}model.layers.0.self_attn.q_proj.lora_A.weight"
    served = vllm_lora.parse_fine_tuned_lora_name(key_map.served_key(trained), model_class.hf_to_vllm_mapper)
    assert served == ("language_model.model.layers.0.self_attn.q_proj", True)


def test_vllms_class_decides_whether_keys_move(tmp_path):
    """Out-of-tree classes registered with vLLM's public API: one nesting nothing keeps the trained
    names, a multimodal one whose mapper has no rule for its language model is refused."""
    from vllm.model_executor.models.interfaces import SupportsMultiModal
    from vllm.model_executor.models.registry import ModelRegistry

    class Flat(torch.nn.Module):
        def forward(self, input_ids, positions): ...

    class TowerOnly(Flat, SupportsMultiModal):
        hf_to_vllm_mapper = WeightsMapper(orig_to_new_prefix={"model.vision_tower.": "vision_tower."})

    ModelRegistry.register_model("WhaleTestFlatForRanking", Flat)
    ModelRegistry.register_model("WhaleTestTowerOnlyForConditionalGeneration", TowerOnly)
    assert key_map_for(["WhaleTestFlatForRanking"]).renames == ()
    with pytest.raises(TrainingError, match="maps no checkpoint prefix onto language_model.model."):
        key_map_for(["WhaleTestTowerOnlyForConditionalGeneration"])


def test_an_architecture_with_no_known_mapping_is_refused_before_training(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text('{"architectures": ["MadeUpForConditionalGeneration"]}')
    example = SFTExample(({"role": "user", "content": "hi"},), "hello")
    with pytest.raises(TrainingError, match="cannot establish the module names vLLM serves Made"):
        LoraTrainer(SETTINGS).train([example], base=str(base), parent=None, name="a", out_dir=tmp_path / "a")
    assert not (tmp_path / "a" / "adapter").exists()


def word_tokenizer(folder: Path, words: list[str]) -> None:
    """A word-level tokenizer with a chat template, built here (no download), beside a checkpoint."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    specials = ["<unk>", "<pad>", "<user>", "<assistant>", "<end>"]
    vocab = {word: i for i, word in enumerate(dict.fromkeys(specials + words))}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    template = (
        "{% for m in messages %}<{{ m.role }}> {{ m.content }} <end> {% endfor %}"
        "{% if add_generation_prompt %}<assistant> {% endif %}"
    )
    special = dict(unk_token="<unk>", pad_token="<pad>", eos_token="<end>", chat_template=template)
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, **special)
    tokenizer.save_pretrained(folder)


@pytest.mark.integration
@pytest.mark.no_server
def test_the_trainer_writes_served_keys_and_a_child_starts_from_its_parent(tmp_path):
    """Through LoraTrainer's worker processes on a tiny Qwen3.5 checkpoint: the adapter is written
    under the nested names, and a child trained at a negligible rate keeps its parent's B."""
    from safetensors.torch import load_file

    base = nested_checkpoint(tmp_path / "base", "Qwen3_5ForConditionalGeneration")
    word_tokenizer(base, [f"w{i}" for i in range(40)])
    examples = [SFTExample(({"role": "user", "content": f"w{i} w{i + 1}"},), f"w{i + 2}") for i in range(8)]
    quick = dict(rank=4, target_modules=("q_proj", "v_proj"), batch_size=4, gradient_checkpointing=False)
    parent = LoraTrainer(LoraTrainingConfig(learning_rate=1e-2, **quick)).train(
        examples, base=str(base), parent=None, name="p", out_dir=tmp_path / "p"
    )
    child = LoraTrainer(LoraTrainingConfig(learning_rate=1e-9, **quick)).train(
        examples, base=str(base), parent=parent.adapter, name="c", out_dir=tmp_path / "c"
    )
    before = load_file(str(Path(parent.adapter.path) / "adapter_model.safetensors"))
    after = load_file(str(Path(child.adapter.path) / "adapter_model.safetensors"))
    assert before.keys() == after.keys()
    assert all(key.startswith(f"{PEFT_PREFIX}model.language_model.layers.") for key in before)
    b_keys = [key for key in before if "lora_B" in key]
    assert b_keys and all(before[key].abs().max() > 1e-4 for key in b_keys)
    assert all(torch.allclose(after[key], before[key], atol=1e-6) for key in b_keys)
