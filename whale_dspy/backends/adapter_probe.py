"""Is a loaded adapter really served? A probe of the served log-probabilities with and without it.

vLLM loads a LoRA adapter whose keys sit under a module prefix the served model does not use
(a PEFT adapter trained through `AutoModelForCausalLM` on a model vLLM serves as a
`...ForConditionalGeneration` class, such as Qwen3.5) without complaint, and serves it as the
base: every weight step would train, load, report success and change nothing. So after each load
the server scores one fixed short prompt (OpenAI completions, `prompt_logprobs`, one token at
temperature 0) under the base and under the adapter; a trained adapter (some lora_B non-zero)
that moves no log-probability beyond numerical noise is a BackendError before any rollout runs on
it. A freshly initialised adapter (every lora_B zero) is exempt: it rightly moves nothing. The
base's scores are measured once per server (merged serving: when it starts, while it serves the
base); each probe costs one request of a few dozen tokens.
"""

from __future__ import annotations

import json
import logging
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whale_dspy.errors import BackendError

logger = logging.getLogger(__name__)

PROMPT = "The quick brown fox jumps over the lazy dog. One, two, three, four, five, six, seven"
"""Plain text of about twenty tokens: each position is scored, so an adapter that changes any layer
moves some score."""

NOISE = 1e-4
"""The largest change of a log-probability (nats) that counts as numerical noise. The same prompt
and weights score identically on one server; an adapter served nowhere changes nothing at all,
while one random or trained LoRA adapter moves the largest of these scores by far more than this
(bench/RESULTS.md)."""

Scores = list[dict[str, float]]
"""Per prompt position (after the first): token id -> log-probability, as the server reported them."""


@dataclass(frozen=True)
class ProbeResult:
    """One adapter's probe: the largest log-probability it moved (None when exempt) and its cost."""

    adapter: str
    shift: float | None
    seconds: float
    exempt: str | None = None


class AdapterProbe:
    """One server's probe: the base's scores (measured once) and every adapter's result.

    `measure(weights)` scores PROMPT on the server under `weights` (an adapter's name, None for
    the base).
    """

    def __init__(self, measure: Callable[[str | None], Scores]) -> None:
        self._measure = measure
        self._base: Scores | None = None
        self.results: list[ProbeResult] = []

    def score_base(self) -> Scores:
        """The base's scores, measured on the first call (merged serving: while it serves the base)."""
        if self._base is None:
            self._base = self._measure(None)
        return self._base

    def check(self, name: str, adapter_dir: str | Path, *, model: str) -> ProbeResult:
        """Probe adapter `name` (loaded from `adapter_dir`) on the server of `model`; BackendError if
        it is trained yet moves nothing."""
        started = time.perf_counter()
        if not trained(adapter_dir):
            result = ProbeResult(name, None, time.perf_counter() - started, exempt="no non-zero lora_B")
        else:
            moved = shift(self.score_base(), self._measure(name))
            result = ProbeResult(name, moved, time.perf_counter() - started)
        self.results.append(result)
        if result.shift is not None and result.shift <= NOISE:
            raise BackendError(
                f"adapter {name!r} ({adapter_dir}) changes nothing that {model} serves: its "
                f"weights are trained, yet no next-token log-probability moved by more than {NOISE:g} "
                f"(largest {result.shift:.2g}). Its keys are most likely under a module prefix the served "
                "model does not use (say model.layers. where the model nests model.language_model.)"
            )
        logger.info("adapter %s takes effect: moved a log-probability by %s", name, result.shift)
        return result


def trained(adapter_dir: str | Path) -> bool:
    """Whether any lora_B weight of the adapter is non-zero (PEFT initialises them all to zero).
    Reads the safetensors header and those tensors' bytes only. A folder without a safetensors file
    has no weights to probe (vLLM refuses such a folder; FakeTrainer writes them)."""
    path = Path(adapter_dir) / "adapter_model.safetensors"
    if not path.is_file():
        return False
    try:
        with path.open("rb") as file:
            (size,) = struct.unpack("<Q", file.read(8))
            if size > path.stat().st_size - 8:  # not safetensors: its header would be read whole
                raise ValueError(f"its header claims {size} bytes, more than the file holds")
            header = json.loads(file.read(size))
            for key, entry in header.items():
                if key.endswith("lora_B.weight"):
                    begin, end = entry["data_offsets"]
                    file.seek(8 + size + begin)
                    if file.read(end - begin).strip(b"\x00"):  # IEEE -0.0 has non-zero bytes: moot
                        return True
    except (OSError, struct.error, ValueError, KeyError, TypeError) as error:
        raise BackendError(f"adapter {path} cannot be read: {error}") from error
    return False


def shift(base: Scores, adapted: Scores) -> float:
    """The largest change of a log-probability that both scorings report, over the prompt."""
    if len(base) != len(adapted):
        raise BackendError(f"the probe scored {len(base)} then {len(adapted)} prompt positions")
    moves = [
        abs(a[token] - b[token]) for b, a in zip(base, adapted, strict=True) for token in b.keys() & a.keys()
    ]
    if not moves:
        raise BackendError("the probe's two scorings share no token: the server's answer is malformed")
    return max(moves)


def completion_scores(response: dict[str, Any]) -> Scores:
    """`prompt_logprobs` of an OpenAI completions answer from vLLM, per position after the first."""
    try:
        positions: Sequence[dict[str, Any] | None] = response["choices"][0]["prompt_logprobs"]
        return [
            {token: float(entry["logprob"]) for token, entry in position.items()}
            for position in positions
            if position is not None
        ]
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as error:
        raise BackendError(f"the server's answer has no usable prompt_logprobs: {error}") from error


def probe_request(model: str) -> dict[str, Any]:
    """The completions request that scores PROMPT under `model` (a served name)."""
    return {"model": model, "prompt": PROMPT, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0}
