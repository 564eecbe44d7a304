"""`whale_dspy.LM(model)`: a DSPy LM whose provider serves and trains it, for the short form.

`LM("qwen2.5-coder-0.5b")` starts the embedded vLLM server on that model (any model vLLM
serves, or a folder, works too) and `LM(model, url=...)` uses a running one; either way the LM's
provider is a WhaleProvider, so `WhaleOptimizer(metric=..., auto=...)` and `dspy.BootstrapFinetune`
find the server and the LoRA trainer on the student's LM.
"""

from __future__ import annotations

import atexit
import tempfile
from pathlib import Path
from typing import Any

import dspy


def LM(  # noqa: N802 - named as dspy.LM, which it stands in for
    model: str, *, url: str | None = None, folder: str | Path | None = None, **sampling: Any
) -> dspy.BaseLM:
    """An LM on `model` served by our backend and trainable through its provider.

    Args:
        model: An embedded model's name (smollm2-135m, qwen2.5-coder-0.5b), a local safetensors
            folder or a hub id.
        url: A running `whale serve` / vLLM server for it (default: start the embedded server now,
            stopped when the process exits).
        folder: Where the server's log and the provider's own fine-tunes go (default a new
            temporary folder, logged).
        **sampling: Request settings of this LM (e.g. max_tokens); a WhaleOptimizer run rebinds its own.

    Returns:
        The LM, its provider a WhaleProvider over the server and a LoRA trainer.

    Raises:
        ConfigError: `model` is none of an embedded name, a folder or a hub id.
        BackendError: The embedded server did not start.
    """
    from whale_dspy.backends import RemoteServer, WhaleProvider, embedded_server
    from whale_dspy.machine import cpu_build
    from whale_dspy.models import resolve_model
    from whale_dspy.progress import log as progress_log
    from whale_dspy.progress import show_progress
    from whale_dspy.training.config import LoraTrainingConfig
    from whale_dspy.training.lora_trainer import LoraTrainer

    folder = Path(folder or tempfile.mkdtemp(prefix="whale-lm-"))
    folder.mkdir(parents=True, exist_ok=True)
    base = resolve_model(model)
    if url is not None:
        backend: Any = RemoteServer(url, base_model=base)
    else:
        show_progress()
        progress_log.info(
            "starting the embedded server on %s (a minute or more; log: %s)", model, folder / "vllm.log"
        )
        backend = embedded_server(model, run_dir=folder)
        backend.start()
        atexit.register(backend.stop)
    training = LoraTrainingConfig() if cpu_build() else LoraTrainingConfig.gpu_2b()
    provider = WhaleProvider(backend, LoraTrainer(training), base=base, adapters_dir=folder / "adapters")
    return provider.lm(**sampling)
