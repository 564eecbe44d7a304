"""What the fake vLLM (fake_vllm.py) scores a completions prompt, and whether an adapter it loads
takes effect: enough for the adapter probe (whale_dspy.backends.adapter_probe) to be tested fast.

As in vLLM, an adapter lands only where its keys name the served model's modules: here PEFT's
`base_model.model.` plus `MODULES`, a Llama-shaped model's layers. One with a non-zero weight there
moves every score by `ADAPTER_SHIFT`; one whose keys sit under another prefix, or whose weights
there are all zero, scores as the base. An adapter folder without a safetensors file (a
FakeTrainer's placeholder) stands for one that lands.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

MODULES = "model.layers."
ADAPTER_SHIFT = 0.25


def lands(adapter_dir: str | Path) -> bool:
    """Whether the adapter would change what the fake model answers."""
    path = Path(adapter_dir) / "adapter_model.safetensors"
    if not path.is_file():
        return True
    data = path.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + size])
    for key, entry in header.items():
        if key.startswith(f"base_model.model.{MODULES}"):
            begin, end = entry["data_offsets"]
            if data[8 + size + begin : 8 + size + end].strip(b"\x00"):
                return True
    return False


def completion(body: dict[str, Any], shift: float) -> dict[str, Any]:
    """An OpenAI completions answer with vLLM's `prompt_logprobs`: one entry per whitespace-separated
    word of the prompt after the first, each moved by `shift`."""
    words = str(body.get("prompt", "")).split()
    scores = [
        {str(index): {"logprob": -1.0 - index / 100 - shift, "rank": 1, "decoded_token": word}}
        for index, word in enumerate(words[1:], start=1)
    ]
    choice = {"index": 0, "text": " x", "finish_reason": "length", "prompt_logprobs": [None, *scores]}
    usage = {"prompt_tokens": len(words), "completion_tokens": 1, "total_tokens": len(words) + 1}
    return {
        "id": "x",
        "object": "text_completion",
        "model": body.get("model"),
        "choices": [choice],
        "usage": usage,
    }
