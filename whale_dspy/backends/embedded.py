"""A run's own vLLM server, runtime LoRA or merged adapters: the choice between the two servers.

It lives above both: `MergedAdapterServer` is a `VLLMServer`, so the plain server cannot name it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from whale_dspy.backends.merged_server import MergedAdapterServer
from whale_dspy.backends.vllm_server import (
    DEFAULT_MODEL,
    AdapterServing,
    VLLMServer,
    cpu_build,
    runs_this_interpreter,
)
from whale_dspy.models import EMBEDDED_MODELS


def folds_adapters(model: str) -> bool:
    """Whether adapters can be merged into this model's weights here: an embedded model or a local
    folder of safetensors (a hub id has no weights on disk to fold into)."""
    return model in EMBEDDED_MODELS or any(Path(model).expanduser().glob("*.safetensors"))


def embedded_server(
    model: str = DEFAULT_MODEL, *, run_dir: Path, adapters: AdapterServing = "auto", **options: Any
) -> VLLMServer:
    """A run's own server, logging to run_dir/vllm.log (not started yet).

    `adapters`: "runtime" serves LoRA adapters by name (several at once; the GPU default);
    "merged" folds the one adapter in use into the weights (MergedAdapterServer: no per-token
    LoRA cost, the default on the CPU build when vLLM runs this interpreter).
    """
    if adapters == "auto":
        here = runs_this_interpreter(options.get("python", sys.executable), options.get("command"))
        on_cpu = cpu_build() if options.get("cpu") is None else options["cpu"]
        adapters = "merged" if on_cpu and here and folds_adapters(model) else "runtime"
    server_class = MergedAdapterServer if adapters == "merged" else VLLMServer
    return server_class(model, log_path=Path(run_dir) / "vllm.log", **options)
