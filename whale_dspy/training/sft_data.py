"""SFT examples -> token ids and labels, with the loss on the completion only.

The prompt is rendered exactly as the server renders it (the tokenizer's chat
template with the generation prompt), so the adapter learns the completion in
the context it will be sampled in. Everything in the prompt (system text, the
user turn, earlier assistant turns, tool outputs) gets label -100. The target
is the completion plus the template's end-of-turn marker, so the model learns
to stop. Pure functions over any Hugging Face tokenizer: no torch needed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from whale_dspy.errors import ConfigError
from whale_dspy.records import SFTExample

IGNORE = -100
"""The label that cross-entropy in transformers skips."""

_SENTINEL = "\x00WHALE-SENTINEL\x00"


@dataclass(frozen=True)
class Encoded:
    """One tokenized example: ids and labels of equal length, labels IGNORE on the prompt."""

    input_ids: tuple[int, ...]
    labels: tuple[int, ...]

    @property
    def completion_tokens(self) -> int:
        return sum(1 for label in self.labels if label != IGNORE)


@dataclass(frozen=True)
class EncodedSet:
    """The examples that fit, and how many were skipped because their completion alone did not."""

    examples: tuple[Encoded, ...]
    skipped: int

    @property
    def completion_tokens(self) -> int:
        return sum(e.completion_tokens for e in self.examples)


def end_of_turn(tokenizer: Any, template_kwargs: Mapping[str, Any] | None = None) -> str:
    """The text the chat template puts after an assistant message (e.g. `<|im_end|>`).

    Read off a rendered conversation rather than hard-coded, so any chat model
    works; trailing whitespace is dropped because the server stops at the marker.
    Falls back to the EOS token for templates that append nothing.
    """
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": "x"}, {"role": "assistant", "content": _SENTINEL}],
        tokenize=False,
        **(template_kwargs or {}),
    )
    if _SENTINEL not in rendered:
        raise ConfigError("the tokenizer's chat template drops assistant content; cannot place the target")
    marker = rendered.split(_SENTINEL, 1)[1].rstrip()
    return marker or (tokenizer.eos_token or "")


def encode_example(
    tokenizer: Any,
    example: SFTExample,
    max_length: int,
    eot: str,
    template_kwargs: Mapping[str, Any] | None = None,
) -> Encoded | None:
    """Prompt ids (cut from the left to fit) + completion ids; None when the completion cannot fit.

    The completion needs at least one prompt token before it (the first label
    is predicted from the token before), so it fits when it is shorter than
    max_length; completion tokens are never dropped. `template_kwargs`: what the
    server renders its prompts with (its default chat-template kwargs).
    """
    prompt_text = tokenizer.apply_chat_template(
        list(example.messages), add_generation_prompt=True, tokenize=False, **(template_kwargs or {})
    )
    prompt = tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
    target = tokenizer(example.completion + eot, add_special_tokens=False)["input_ids"]
    if len(target) >= max_length:
        return None
    prompt = prompt[max(0, len(prompt) + len(target) - max_length) :]
    return Encoded(
        input_ids=tuple(prompt) + tuple(target),
        labels=(IGNORE,) * len(prompt) + tuple(target),
    )


def encode_examples(
    tokenizer: Any,
    examples: Sequence[SFTExample],
    max_length: int,
    template_kwargs: Mapping[str, Any] | None = None,
) -> EncodedSet:
    """Encode every example; those whose completion alone exceeds max_length are counted, not kept."""
    eot = end_of_turn(tokenizer, template_kwargs)
    encoded = [encode_example(tokenizer, example, max_length, eot, template_kwargs) for example in examples]
    kept = tuple(e for e in encoded if e is not None)
    return EncodedSet(examples=kept, skipped=len(encoded) - len(kept))
