"""Our server and trainer behind DSPy's fine-tuning plug-in point, for `dspy.BootstrapFinetune`.

`dspy.LM(..., provider=...)` is where DSPy's optimizers reach a model's training:
BootstrapFinetune collects its traces and calls `lm.finetune(train_data, ...)`,
BetterTogether calls `lm.launch()` / `lm.kill()` around its steps. Here
`finetune` trains a LoRA adapter on the chat data with our trainer, hot-loads
it into our server under a versioned name and answers that name, so DSPy's new
LM is our server's LM for the adapter. DSPy's own local provider launches SGLang
and merges the LoRA; here adapters stay separate and hot-swappable, so nothing
needs the server stopped to train: `kill` leaves it serving, and `close()` stops
a server this provider started.
"""

from __future__ import annotations

import itertools
import logging
import secrets
import threading
from pathlib import Path
from typing import Any

import dspy
from dspy.clients.utils_finetune import TrainDataFormat

from whale_dspy.errors import BackendError, ConfigError
from whale_dspy.protocols import InferenceBackend, WeightTrainer
from whale_dspy.records import AdapterRef, SFTExample

log = logging.getLogger(__name__)


class WhaleProvider(dspy.Provider):
    """`provider.lm()` is the server's LM with this provider attached; fine-tuning it trains an adapter.

    `manage_server=True`: the first `launch` starts the backend and `close()` stops it; otherwise the
    caller runs the server (as `embedded_server()` does) and this provider only trains and loads.
    """

    def __init__(
        self,
        backend: InferenceBackend,
        trainer: WeightTrainer,
        *,
        base: str,
        adapters_dir: str | Path,
        prefix: str = "dspy-ft",
        manage_server: bool = False,
    ):
        super().__init__()
        self.finetunable = True
        self.backend, self.trainer, self.base = backend, trainer, base
        self.adapters_dir = Path(adapters_dir)
        self.prefix = f"{prefix}-r{secrets.token_hex(2)}"
        self.manage_server = manage_server
        self.trained: dict[str, AdapterRef] = {}
        self._lock = threading.Lock()
        self._started = False
        self._counter = itertools.count()

    def __deepcopy__(self, memo: dict[int, Any]) -> WhaleProvider:
        """A provider is a handle on one server and its trainer (a lock among them): a deep copy of a
        program (DSPy's `Module.deepcopy`, every optimizer's student copy) shares it."""
        return self

    def lm(self, adapter: str | None = None, **sampling: Any) -> dspy.BaseLM:
        """The backend's LM for `adapter` (None: the base model), fine-tunable through this provider."""
        lm = self.backend.lm(adapter, **sampling)
        lm.provider = self
        return lm

    def launch(self, lm: dspy.BaseLM, launch_kwargs: dict[str, Any] | None = None) -> None:
        """Serve what `lm` names: start a managed server once, re-load an adapter the server lost."""
        with self._lock:
            if self.manage_server and not self._started:
                self.backend.start()
                self._started = True
            adapter = self.trained.get(_served_name(lm.model))
            if adapter is not None:
                try:
                    self.backend.lm(adapter.name)
                except BackendError:
                    self.backend.load_adapter(adapter)

    def kill(self, lm: dspy.BaseLM, launch_kwargs: dict[str, Any] | None = None) -> None:
        """Nothing to free: training does not need the server stopped (see the module docstring)."""

    def close(self) -> None:
        """Stop the server if this provider started it."""
        with self._lock:
            if self._started:
                self.backend.stop()
                self._started = False

    def finetune(
        self,
        job: Any,
        model: str,
        train_data: list[dict[str, Any]],
        train_data_format: TrainDataFormat | str | None,
        train_kwargs: dict[str, Any] | None = None,
    ) -> str:
        """Train an adapter on `train_data` (DSPy's chat format) from `model`'s weights; the new
        adapter's model name, served, is the result."""
        if TrainDataFormat(train_data_format or TrainDataFormat.CHAT) is not TrainDataFormat.CHAT:
            raise ConfigError(f"WhaleProvider trains on chat data, not {train_data_format!r}")
        if train_kwargs:
            raise ConfigError(
                f"WhaleProvider takes no train_kwargs ({sorted(train_kwargs)}): configure its trainer instead"
            )
        examples = [sft_example(row) for row in train_data]
        parent = self.trained.get(_served_name(model))
        name = f"{self.prefix}-{next(self._counter):03d}"
        result = self.trainer.train(
            examples, base=self.base, parent=parent, name=name, out_dir=self.adapters_dir / name
        )
        self.backend.load_adapter(result.adapter)
        self.trained[name] = result.adapter
        log.info("fine-tuned %s from %s on %d examples (loss %.4f)", name, model, len(examples), result.loss)
        return str(self.backend.lm(name).model)


def sft_example(row: dict[str, Any]) -> SFTExample:
    """One DSPy chat-format row as our SFT example: the last (assistant) message is what is trained on."""
    messages = list(row.get("messages") or ())
    if not messages or messages[-1].get("role") != "assistant":
        raise ConfigError("each fine-tuning row needs messages ending with the assistant's reply")
    return SFTExample(messages=tuple(messages[:-1]), completion=str(messages[-1]["content"]))


def _served_name(model: str) -> str:
    """`whale-vllm/policy-x` (a served LM's model) or `policy-x` (the fake backend's) -> `policy-x`."""
    return str(model).rsplit("/", 1)[-1]
