"""The child's side of the proxy: requests to the parent and the stand-in LM that makes them.

Every LM and tool call of candidate code becomes a request with an id; the
child's receive loop hands the parent's reply to the waiting worker thread.
An error the parent met (a server error, a tool's ValueError) is re-raised in
the candidate under its original type name, as it would be in process.
"""

from __future__ import annotations

import builtins
import itertools
import threading
from typing import Any

from dspy.utils.callback import BaseCallback

from whale_dspy.dspy_lm_seam import AnsweringLM, Messages
from whale_dspy.sandbox.specs import sampling_kwargs
from whale_dspy.sandbox.wire import Channel


class ProxiedError(Exception):
    """An exception raised in the parent while serving this request, as type name and message."""

    def __init__(self, type_name: str, message: str):
        super().__init__(message)
        self.type_name = type_name


def proxied_error(type_name: str, message: str) -> Exception:
    """A built-in exception type stays itself (so `except ValueError` works as in process)."""
    builtin = getattr(builtins, type_name, None)
    if isinstance(builtin, type) and issubclass(builtin, Exception):
        try:
            return builtin(message)
        except TypeError:  # an exception type whose constructor wants more arguments
            pass
    return ProxiedError(type_name, message)


class Requests:
    """Sends requests tagged with ids and wakes the waiting thread when the reply arrives."""

    def __init__(self, channel: Channel):
        self.channel = channel
        self._ids = itertools.count()
        self._waiting: dict[int, tuple[threading.Event, dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def ask(self, job: int, kind: str, **payload: Any) -> Any:
        event, slot = threading.Event(), {}
        with self._lock:
            request_id = next(self._ids)
            self._waiting[request_id] = (event, slot)
        self.channel.send({"type": kind, "id": request_id, "job": job, **payload})
        event.wait()
        if "error" in slot:
            raise proxied_error(slot["error"]["type"], slot["error"]["message"])
        return slot["value"]

    def deliver(self, reply: dict[str, Any]) -> None:
        with self._lock:
            event, slot = self._waiting.pop(reply["id"])
        slot.update({key: reply[key] for key in ("value", "error") if key in reply})
        event.set()


class ProxyLM(AnsweringLM):
    """Looks like the parent's LM (model, settings, capabilities); each call is served by the parent.

    The parent runs the request on the rollout's own LM copy, so the trace is
    recorded there exactly as in process; the child keeps no history of its own.
    """

    def __init__(self, requests: Requests, job: int, profile: dict[str, Any]):
        super().__init__(model=profile["model"], model_type=profile["model_type"])
        self.kwargs = dict(profile["kwargs"])
        self.requests, self.job, self.profile = requests, job, profile

    @property
    def supports_function_calling(self) -> bool:
        return bool(self.profile["supports_function_calling"])

    @property
    def supports_response_schema(self) -> bool:
        return bool(self.profile["supports_response_schema"])

    @property
    def supports_reasoning(self) -> bool:
        return bool(self.profile["supports_reasoning"])

    @property
    def supported_params(self) -> set[str]:
        return set(self.profile["supported_params"])

    def answer(self, messages: Messages, **kwargs: Any) -> list[Any]:
        merged = sampling_kwargs({**self.kwargs, **kwargs})
        # Only what differs from the parent's rollout LM, so its history matches an in-process call.
        settings = {key: value for key, value in merged.items() if self.profile["kwargs"].get(key) != value}
        return self.requests.ask(self.job, "lm", messages=messages, kwargs=settings)


class ParseReporter(BaseCallback):
    """Sends the parent every completion the job's adapter parsed and whether it could, in order, so
    the parent's trace knows which LM calls were parsed (`LMCall.parsed`) as it does in process."""

    def __init__(self, channel: Channel, job: int):
        self.channel, self.job = channel, job
        self._parsing: dict[str, str] = {}

    def on_adapter_parse_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        self._parsing[call_id] = str(inputs.get("completion", ""))

    def on_adapter_parse_end(
        self, call_id: str, outputs: Any, exception: BaseException | None = None
    ) -> None:
        completion = self._parsing.pop(call_id, None)
        if completion is not None:
            message = {"completion": completion, "ok": exception is None}
            self.channel.send({"type": "parse", "job": self.job, **message})
