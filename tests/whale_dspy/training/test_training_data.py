"""SFT encoding on the real SmolLM2 tokenizer: loss on the completion only, prompts cut from the left."""

from __future__ import annotations

import pytest

from whale_dspy.records import SFTExample
from whale_dspy.training.sft_data import IGNORE, encode_example, encode_examples, end_of_turn


@pytest.fixture(scope="module")
def tokenizer(smollm2_dir: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


def ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def prompt_ids(tokenizer, messages) -> list[int]:
    return ids(tokenizer, tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))


def test_end_of_turn_is_read_from_the_chat_template(tokenizer):
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], tokenize=False
    )
    eot = end_of_turn(tokenizer)
    assert eot == eot.strip() and eot
    assert rendered.rstrip().endswith("a" + eot)
    assert ids(tokenizer, eot) == [tokenizer.convert_tokens_to_ids(eot)]  # one special token


def test_prompt_is_masked_and_completion_plus_end_of_turn_is_the_target(tokenizer):
    messages = (
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Capital of France?"},
    )
    eot = end_of_turn(tokenizer)
    encoded = encode_example(tokenizer, SFTExample(messages, "Paris."), max_length=512, eot=eot)

    prompt = prompt_ids(tokenizer, list(messages))
    target = ids(tokenizer, "Paris." + eot)
    assert list(encoded.input_ids) == prompt + target
    assert list(encoded.labels) == [IGNORE] * len(prompt) + target
    assert tokenizer.decode(prompt).endswith("assistant\n")  # the generation prompt is part of the prompt
    assert encoded.labels[-1] == tokenizer.convert_tokens_to_ids(eot)
    assert encoded.completion_tokens == len(target)


def test_earlier_turns_and_tool_outputs_are_masked(tokenizer):
    messages = (
        {"role": "user", "content": "What is 6*7? Use the calculator."},
        {"role": "assistant", "content": "calculator(6*7)"},
        {"role": "tool", "content": "42"},
    )
    encoded = encode_example(
        tokenizer, SFTExample(messages, "The answer is 42."), 512, end_of_turn(tokenizer)
    )
    trained = [i for i, label in zip(encoded.input_ids, encoded.labels, strict=True) if label != IGNORE]
    assert tokenizer.decode(trained) == "The answer is 42." + end_of_turn(tokenizer)
    assert "calculator(6*7)" in tokenizer.decode(encoded.input_ids[: len(encoded.input_ids) - len(trained)])


def test_long_prompt_is_cut_from_the_left_and_the_completion_kept_whole(tokenizer):
    messages = ({"role": "user", "content": " ".join(f"word{i}" for i in range(300))},)
    eot = end_of_turn(tokenizer)
    encoded = encode_example(tokenizer, SFTExample(messages, "Done."), max_length=64, eot=eot)

    full_prompt = prompt_ids(tokenizer, list(messages))
    target = ids(tokenizer, "Done." + eot)
    kept = 64 - len(target)
    assert len(encoded.input_ids) == 64
    assert list(encoded.input_ids) == full_prompt[-kept:] + target
    assert list(encoded.labels) == [IGNORE] * kept + target


def test_completion_that_cannot_fit_is_skipped_and_counted(tokenizer):
    eot = end_of_turn(tokenizer)
    user = ({"role": "user", "content": "Write."},)
    completion = "one two three four five six seven"
    target_len = len(ids(tokenizer, completion + eot))

    just_fits = encode_example(tokenizer, SFTExample(user, completion), max_length=target_len + 1, eot=eot)
    assert just_fits.labels[0] == IGNORE and just_fits.completion_tokens == target_len
    assert encode_example(tokenizer, SFTExample(user, completion), max_length=target_len, eot=eot) is None

    examples = [SFTExample(user, completion), SFTExample(user, "ok")]
    encoded = encode_examples(tokenizer, examples, max_length=target_len)
    assert encoded.skipped == 1
    assert len(encoded.examples) == 1
    assert encoded.completion_tokens == len(ids(tokenizer, "ok" + eot))


THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)
"""Qwen3's thinking switch, reduced: with enable_thinking false the generation prompt closes an empty
thinking block, which the served prompt has as well (vLLM's --default-chat-template-kwargs)."""


def test_the_trainer_renders_prompts_with_the_servers_thinking_switch(tokenizer):
    thinking = tokenizer.__class__.from_pretrained(tokenizer.name_or_path)
    thinking.chat_template = THINKING_TEMPLATE
    messages = ({"role": "user", "content": "Capital of France?"},)
    switch = {"enable_thinking": False}
    off = encode_examples(thinking, [SFTExample(messages, "Paris.")], 512, switch).examples[0]
    default = encode_examples(thinking, [SFTExample(messages, "Paris.")], 512).examples[0]
    served = thinking.apply_chat_template(
        list(messages), add_generation_prompt=True, tokenize=False, **switch
    )
    masked = [i for i, label in zip(off.input_ids, off.labels, strict=True) if label == IGNORE]
    assert thinking.decode(masked) == served and served.endswith("<think>\n\n</think>\n\n")
    assert "<think>" not in thinking.decode(default.input_ids)  # the template's default: no block
    assert thinking.decode(off.input_ids[len(masked) :]).startswith("Paris.")  # the target is unchanged
