"""A scripted LM for fast tests: replies in sequence, keyed by prompt text, or keyed by model name.

Every copy (`lm.copy(rollout_id=...)`, as the rollout runner makes one per
rollout) shares the same script, so a test scripts a whole evaluation or
training step up front. An exhausted script raises instead of inventing text.
It has the part of `dspy.LM` that stock optimizers call beyond requests
(`launch`, `kill`, `finetune` through its `provider`), so BetterTogether and
BootstrapFinetune run on it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import dspy
from dspy.clients.engines.dummy_engine import AsyncDummyEngine, DummyEngine
from dspy.lm15 import Message, Response, TextPart, Usage
from dspy.utils.dummies import DummyLM

from whale_dspy.dspy_lm_seam import ProviderCalls, install_engines

Reply = str | Mapping[str, Any] | Exception
"""A raw completion string, output fields that the adapter formats, or an error the LM call raises."""


class ScriptExhausted(RuntimeError):
    """The test's script has no reply left for this request."""


class _Script:
    """Thread-safe reply queues shared by every copy of one ScriptedLM."""

    def __init__(self, replies: Sequence[Reply] | Mapping[str, Sequence[Reply] | Reply], keyed_by: str):
        self.keyed_by = keyed_by
        self.lock = threading.Lock()
        if isinstance(replies, Mapping):
            self.queues: dict[str, list[Reply] | Reply] = {
                key: list(value) if isinstance(value, list | tuple) else value
                for key, value in replies.items()
            }
        else:
            self.queues = {"": list(replies)}

    def __getstate__(self) -> dict[str, Any]:
        """Picklable (a program saved with `save_program=True`); the copy gets its own lock."""
        return {key: value for key, value in self.__dict__.items() if key != "lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.lock = threading.Lock()

    def next_reply(self, model: str, last_message: str) -> Reply:
        with self.lock:
            key = self._key(model, last_message)
            queue = self.queues[key]
            if not isinstance(queue, list):
                return queue  # a single reply answers every matching request
            if not queue:
                raise ScriptExhausted(f"no scripted reply left for key {key!r}")
            return queue.pop(0)

    def _key(self, model: str, last_message: str) -> str:
        if set(self.queues) == {""}:
            return ""
        if self.keyed_by == "model":
            if model in self.queues:
                return model
            raise ScriptExhausted(f"no script for model {model!r}; scripted: {sorted(self.queues)}")
        for key in self.queues:
            if key in last_message:
                return key
        raise ScriptExhausted(f"no scripted key occurs in the prompt: {last_message[:200]!r}")


class _ScriptEngine(DummyEngine):
    def _complete_messages(self, messages: list[dict[str, Any]]) -> Response:
        owner: ScriptedLM = self.owner
        reply = owner.script.next_reply(owner.model, messages[-1]["content"])
        if isinstance(reply, Exception):
            raise reply
        text = reply if isinstance(reply, str) else owner._format_answer_fields(dict(reply))
        prompt_words = sum(len(str(m.get("content", "")).split()) for m in messages)
        usage = Usage(input_tokens=prompt_words, output_tokens=len(text.split()), total_tokens=0)
        return Response(
            id=None,
            model=owner.model,
            message=Message.assistant([TextPart(text)]),
            finish_reason="stop",
            usage=usage,
        )


class ScriptedLM(ProviderCalls, DummyLM):
    """`ScriptedLM(["a", {"answer": "b"}])`, `ScriptedLM({"2+2": {"answer": "4"}})` (keyed by prompt),
    or `ScriptedLM({"base": [...], "policy-r01": [...]}, keyed_by="model")` (keyed by adapter name).

    Token counts are word counts: enough for accounting tests, not for billing.
    """

    def __init__(
        self,
        replies: Sequence[Reply] | Mapping[str, Sequence[Reply] | Reply],
        *,
        keyed_by: str = "prompt",
        model: str = "scripted",
        adapter: Any = None,
        provider: dspy.Provider | None = None,
    ):
        if keyed_by not in ("prompt", "model"):
            raise ValueError(f"keyed_by must be 'prompt' or 'model', not {keyed_by!r}")
        super().__init__([], adapter=adapter)
        self.model = model
        self.script = _Script(replies, keyed_by)
        self.provider = provider or dspy.Provider()  # dspy.LM's plug-in point: launch, kill, finetune
        self.finetuning_model: str | None = None
        self.launch_kwargs: dict[str, Any] = {}
        self.train_kwargs: dict[str, Any] = {}
        self._install_engine()

    def _install_engine(self) -> None:
        engine = _ScriptEngine(self)
        install_engines(self, engine, AsyncDummyEngine(engine))

    def copy(self, **kwargs: Any) -> ScriptedLM:
        copied = super().copy(**kwargs)
        copied._install_engine()
        return copied

    def __deepcopy__(self, memo: dict[int, Any]) -> ScriptedLM:
        """A new LM object on the same script (its lock cannot be copied, and copies share the script)."""
        return self.copy()

    def for_model(self, model: str) -> ScriptedLM:
        """The same script seen under another model name (as a backend binds an adapter)."""
        return self.copy(model=model)
