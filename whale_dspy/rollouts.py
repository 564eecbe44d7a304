"""One rollout: run a harness on one task with one LM copy and keep its full trace.

Each rollout gets its own LM copy (a distinct `rollout_id`, so DSPy's cache
cannot collapse k samples), and that copy's history is exactly this rollout's
LM calls. Tools are wrapped to record calls and results. A harness that raises
(a parse failure included) yields an ordinary rollout scored 0 with the error
and the raw completions kept. A server that cannot answer is not the harness's
failure: that rollout raises BackendError instead of being scored 0, even when
the harness caught the LM's error itself.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import inspect
import json
import logging
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import dspy
from dspy.utils.callback import BaseCallback
from dspy.utils.exceptions import LMProviderError, LMTransportError

from whale_dspy.errors import BackendError
from whale_dspy.harness import HarnessProgram
from whale_dspy.jsonl import to_jsonable
from whale_dspy.protocols import Tools, is_stateful, stateful_tool
from whale_dspy.records import GROUP_SETTING, TASK_GROUP, LMCall, Rollout, ToolCall, group_key

log = logging.getLogger(__name__)

Metric = Callable[..., float]
MAX_TOOL_RESULT_CHARS = 4000


class ToolRecorder:
    """Wraps tools so every call, its arguments and its result land in the trace.

    The wrapper shows a harness the tool's name, docstring and signature and nothing of what it
    wraps (no `__wrapped__`): what is behind a tool (a chess episode and its solution) is the
    domain's, not the harness's.
    """

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self._lock = threading.Lock()

    def wrap(self, tools: Tools) -> Tools:
        return {name: self._wrap_one(name, tool) for name, tool in tools.items()}

    def _wrap_one(self, name: str, tool: Callable[..., Any]) -> Callable[..., Any]:
        def traced(*args: Any, **kwargs: Any) -> Any:
            record_args = {**{f"arg{i}": a for i, a in enumerate(args)}, **kwargs}
            try:
                result = tool(*args, **kwargs)
            except Exception as error:
                self._record(
                    ToolCall(name, to_jsonable(record_args), error=f"{type(error).__name__}: {error}")
                )
                raise
            self._record(ToolCall(name, to_jsonable(record_args), result=str(result)[:MAX_TOOL_RESULT_CHARS]))
            return result

        traced.__name__ = traced.__qualname__ = getattr(tool, "__name__", name)
        traced.__doc__ = inspect.getdoc(tool)
        with contextlib.suppress(TypeError, ValueError):  # a builtin without a signature keeps none
            traced.__signature__ = inspect.signature(tool)  # type: ignore[attr-defined]
        return stateful_tool(traced) if is_stateful(tool) else traced

    def _record(self, call: ToolCall) -> None:
        with self._lock:
            self.calls.append(call)


def lm_call_from_history(entry: dict[str, Any], sampling: dict[str, Any]) -> LMCall:
    """Turn one DSPy history entry into an LMCall (messages sent, raw completion, usage)."""
    outputs = entry.get("outputs") or [""]
    first = outputs[0]
    completion = (first.get("text") or "") if isinstance(first, dict) else str(first)
    usage = entry.get("usage") or {}
    return LMCall(
        messages=tuple(
            to_jsonable(entry.get("messages") or [{"role": "user", "content": entry.get("prompt")}])
        ),
        completion=completion,
        model=str(entry.get("model", "")),
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
        sampling=to_jsonable({**sampling, **(entry.get("kwargs") or {})}),
    )


def prediction_dict(prediction: Any) -> dict[str, Any] | None:
    if prediction is None:
        return None
    if isinstance(prediction, dspy.Prediction):
        return to_jsonable(prediction.toDict())
    return to_jsonable({"answer": prediction})


def score_of(metric: Metric, example: dspy.Example, prediction: Any) -> tuple[float, str | None]:
    """The metric's score, or 0 with the reason when there is no prediction or the metric fails."""
    if prediction is None:
        return 0.0, None
    try:
        return float(metric(example, prediction)), None
    except Exception as error:
        return 0.0, f"metric failed: {type(error).__name__}: {error}"


def sampling_for(lm: dspy.BaseLM, rollout_id: int, sampling: dict[str, Any]) -> dict[str, Any]:
    """The request's sampling, seeded by the rollout id where the server takes a seed.

    The rollout id alone only keeps DSPy's cache from collapsing samples; the
    server's sampler also needs the seed, or re-evaluating the same (harness,
    adapter) on the same rollout ids draws different samples.
    """
    if "seed" in sampling or "seed" not in getattr(lm, "supported_params", set()):
        return sampling
    return {**sampling, "seed": rollout_id}


_current_watch: ContextVar[RolloutWatch | None] = ContextVar("whale_rollout_watch", default=None)


def report_server_failure(error: BaseException) -> None:
    """For a backend that failed before its request reached the server (a merged-weights swap):
    the running rollout then stops its evaluation as for a dead server, whatever the harness catches."""
    watch = _current_watch.get()
    if watch is not None and watch.server_failure is None:
        watch.server_failure = error


class RolloutWatch(BaseCallback):
    """Sees what a rollout's LM history cannot tell: each LM call's error, including one a
    harness's own try/except swallows, and which completions the adapter failed to parse."""

    def __init__(self) -> None:
        self.server_failure: BaseException | None = None
        self._lock = threading.Lock()
        self._parsing: dict[str, str] = {}
        self._unparsed: collections.Counter[str] = collections.Counter()

    def on_lm_end(self, call_id: str, outputs: Any, exception: BaseException | None = None) -> None:
        if self.server_failure is None and server_failed(exception):
            self.server_failure = exception

    def on_adapter_parse_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        with self._lock:
            self._parsing[call_id] = str(inputs.get("completion", ""))

    def on_adapter_parse_end(
        self, call_id: str, outputs: Any, exception: BaseException | None = None
    ) -> None:
        with self._lock:
            completion = self._parsing.pop(call_id, None)
            if exception is not None and completion is not None:
                self._unparsed[completion] += 1

    def lm_calls(self, history: list[dict[str, Any]], sampling: dict[str, Any]) -> tuple[LMCall, ...]:
        """The history as LMCalls; a completion whose parse failed (say, ChatAdapter's, before DSPy's
        JSON retry) is marked `parsed=False`, matched by text to the earliest such call."""
        unparsed = self._unparsed.copy()
        calls = []
        for entry in history:
            call = lm_call_from_history(entry, sampling)
            if unparsed[call.completion] > 0:
                unparsed[call.completion] -= 1
                call = dataclasses.replace(call, parsed=False)
            calls.append(call)
        return tuple(calls)


def server_failed(error: BaseException | None) -> bool:
    """The request never got an answer (connection refused, reset) or the server broke (HTTP 5xx).

    A 4xx (a prompt too long, a bad parameter) stays the harness's failure.
    """
    if isinstance(error, LMTransportError):
        return True
    return isinstance(error, LMProviderError) and (error.status or 0) >= 500


def raise_if_server_failed(error: BaseException, caller: str) -> None:
    """BackendError from `error` when its server failed (`server_failed`): a caller that turns LM
    errors into a recorded failure (a proposer's empty answer) must not record a dead server as one."""
    if server_failed(error):
        raise BackendError(
            f"the inference server failed during a {caller} call: {type(error).__name__}: {error}"
        ) from error


def task_id_of(example: dspy.Example) -> str:
    """The task id a Rollout records for `example`: its `task_id`, or one derived from its inputs.

    DSPy's examples carry no `task_id`; without the derived id every task of a user's program
    would be recorded as one, and CIs and pairing would count one "task". The id is a digest of
    the input fields (all fields when no inputs are marked), so the same example gets the same id
    in every run and process and two examples with different inputs never share one.
    """
    given = example.get("task_id")
    if given is not None:
        return str(given)
    try:
        fields = example.inputs().toDict()
    except ValueError:
        fields = example.toDict()
    canonical = json.dumps(to_jsonable(fields), sort_keys=True, ensure_ascii=False)
    return "task-" + hashlib.sha256(canonical.encode()).hexdigest()[:16]


def run_rollout(
    program: HarnessProgram,
    example: dspy.Example,
    *,
    lm: dspy.BaseLM,
    metric: Metric,
    sample: int,
    rollout_id: int,
    **sampling: Any,
) -> Rollout:
    """Run `program` on `example` once; never raises for harness, parse or metric failures.

    Raises BackendError when an LM call found the server unreachable or broken.
    """
    rollout_lm = lm.copy(rollout_id=rollout_id, **sampling_for(lm, rollout_id, sampling))
    recorder = ToolRecorder()
    watch = RolloutWatch()
    started = time.perf_counter()
    prediction, error = None, None
    watching = _current_watch.set(watch)
    try:
        inner = program.build_for(example, recorder.wrap(program.tools_factory(example)))
        group = {GROUP_SETTING: group_key(example.get(TASK_GROUP))}
        with dspy.context(lm=rollout_lm, callbacks=[*dspy.settings.callbacks, watch], **group):
            prediction = inner(**example.inputs())
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        log.debug("rollout %s/%s failed: %s", task_id_of(example), sample, error)
    finally:
        _current_watch.reset(watching)
    if watch.server_failure is not None:
        failure = watch.server_failure
        raise BackendError(
            f"the inference server failed during rollout {task_id_of(example)}/{sample}: "
            f"{type(failure).__name__}: {failure}"
        ) from failure
    score, metric_error = score_of(metric, example, prediction)
    kept_sampling = {
        key: rollout_lm.kwargs.get(key) for key in ("temperature", "max_tokens", "rollout_id", "seed")
    }
    return Rollout(
        task_id=task_id_of(example),
        sample=sample,
        rollout_id=rollout_id,
        harness=program.source.name,
        adapter=program.adapter_name,
        inputs=to_jsonable(dict(example.inputs())),
        prediction=prediction_dict(prediction),
        score=score,
        error=error or metric_error,
        lm_calls=watch.lm_calls(rollout_lm.history, kept_sampling),
        tool_calls=tuple(recorder.calls),
        seconds=time.perf_counter() - started,
    )
