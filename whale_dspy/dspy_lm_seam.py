"""The one module that touches DSPy's LM internals, so that a DSPy upgrade changes one file.

Internals here means: sending chat messages to an LM directly (`lm(messages=...)`), DSPy's private
helpers around LM calls (`dspy.clients._deprecation`, the undecorated `BaseLM.__call__`, the
structured-output schema helpers, the engines an LM keeps on private attributes, `dspy.LM`'s
provider calls), and overriding `BaseLM.__call__` / `acall` (only those public calls: overriding
`forward` would make DSPy 3.4 treat an LM as a legacy custom engine). Everything else reaches an
LM through DSPy's public surface (modules, adapters, `dspy.context`) or through what is here: our
LMs subclass `AnsweringLM`, `HeldCallLM` or `RoutedLM` and fill in one hook.
tests/test_dspy_lm_seam.py greps the source tree so that no other module does. Left outside on
purpose: DSPy's public engine and provider API (`dspy.lm15`, `dspy.clients.engines`, used by
`ScriptedLM` and the provider registration), which is where DSPy is going.

DSPy 3.5 (released; `dspy<3.5` holds while the registries serve 3.4.1) changes this surface, and
the seam would follow like this:
- `lm(messages=...)` is removed: `send_messages` and `replay_adapter_call` would build the
  request the new way (a `Prompt` of those messages through the LM's public call).
- custom `BaseLM` LMs that answer calls themselves (`forward`) give way to engines: `AnsweringLM`
  would become an engine whose completion calls `answer` (as `ScriptedLM` already does on 3.4.1),
  and `HeldCallLM` / `RoutedLM` would wrap the engine's request instead of `__call__`; their
  hooks (`answer`, `hold`, `route`) stay as they are, so their subclasses would not change.
- `Adapter.format` returns a `Prompt`, not a list of messages: the sandbox sends the child
  adapter's messages, so `replay_adapter_call` would rebuild the `Prompt` from them.
- XMLAdapter becomes the default adapter: no LM internal, but every harness and trace that
  assumes ChatAdapter's format by default would have to name its adapter.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any

import dspy
from dspy.clients._deprecation import adapter_message_call
from dspy.utils.callback import with_callbacks

Messages = list[dict[str, Any]]

_call_once = dspy.BaseLM.__call__.__wrapped__  # DSPy's call without its callbacks: one attempt
_acall_once = dspy.BaseLM.acall.__wrapped__


def send_messages(lm: dspy.BaseLM, messages: Messages, **kwargs: Any) -> list[Any]:
    """The LM's raw outputs for chat `messages`, with no adapter in between."""
    return lm(messages=messages, **kwargs)


def replay_adapter_call(lm: dspy.BaseLM, messages: Messages, **kwargs: Any) -> list[Any]:
    """Send `messages` that an adapter formatted elsewhere (the sandbox child's) as that adapter's
    own call, so the LM's history and callbacks record it as they record an in-process call."""
    with adapter_message_call(lm, messages):
        return lm(messages=messages, **kwargs)


def json_schema_response_format(signature: type[dspy.Signature]) -> dict[str, Any]:
    """The `response_format` body DSPy's JSONAdapter sends for `signature` (strict json_schema)."""
    from dspy.adapters.json_adapter import _get_structured_outputs_response_format
    from dspy.clients.legacy_requests import _strict_json_schema

    model = _get_structured_outputs_response_format(signature)
    schema = _strict_json_schema(model.model_json_schema())
    return {"type": "json_schema", "json_schema": {"name": model.__name__, "schema": schema, "strict": True}}


def install_engines(lm: dspy.BaseLM, engine: Any, async_engine: Any) -> None:
    """Answer `lm`'s calls with these engines (DSPy's engine API, which 3.4.1 reads from private
    attributes of the LM)."""
    lm._engine_spec = engine
    lm._async_engine_spec = async_engine


class ProviderCalls:
    """`dspy.LM`'s provider calls (launch, kill, finetune and its job runner), for an LM built on
    another base that a stock optimizer must drive as it drives a served one."""

    launch = dspy.LM.launch
    kill = dspy.LM.kill
    finetune = dspy.LM.finetune
    _run_finetune_job = dspy.LM._run_finetune_job


class AnsweringLM(dspy.BaseLM):
    """An LM that answers each call itself (no engine, no HTTP): subclasses implement `answer`.
    A bare prompt arrives as one user message; DSPy's callbacks are not run."""

    def answer(self, messages: Messages, **kwargs: Any) -> list[Any]:
        raise NotImplementedError

    def __call__(self, prompt: Any = None, *, messages: Messages | None = None, **kwargs: Any) -> list[Any]:
        if messages is None:
            messages = [{"role": "user", "content": str(prompt)}]
        return self.answer(messages, **kwargs)

    async def acall(
        self, prompt: Any = None, *, messages: Messages | None = None, **kwargs: Any
    ) -> list[Any]:
        return self(prompt, messages=messages, **kwargs)


class HeldCallLM(dspy.LM):
    """A `dspy.LM` whose every call, sync or async, runs inside `hold()` / `ahold()`, with DSPy's own
    call (callbacks included) inside."""

    def hold(self) -> AbstractContextManager[None]:
        raise NotImplementedError

    def ahold(self) -> AbstractAsyncContextManager[None]:
        raise NotImplementedError

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self.hold():
            return super().__call__(*args, **kwargs)

    async def acall(self, *args: Any, **kwargs: Any) -> Any:
        async with self.ahold():
            return await super().acall(*args, **kwargs)


class RoutedLM(dspy.LM):
    """A `dspy.LM` whose every call `route`s DSPy's own request, maybe to several servers in turn:
    callbacks see the one call; `send(api_base)` is one attempt at that server, without them."""

    def route(self, send: Callable[[str], Any]) -> Any:
        raise NotImplementedError

    async def aroute(self, send: Callable[[str], Awaitable[Any]]) -> Any:
        raise NotImplementedError

    @with_callbacks
    def __call__(self, prompt: Any = None, *, messages: Messages | None = None, **kwargs: Any) -> Any:
        return self.route(
            lambda api_base: _call_once(self, prompt, messages=messages, **kwargs, api_base=api_base)
        )

    @with_callbacks
    async def acall(self, prompt: Any = None, *, messages: Messages | None = None, **kwargs: Any) -> Any:
        return await self.aroute(
            lambda api_base: _acall_once(self, prompt, messages=messages, **kwargs, api_base=api_base)
        )
