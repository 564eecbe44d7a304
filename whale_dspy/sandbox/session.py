"""The parent's side of one candidate: spawn the child, serve its LM and tool calls, stop it.

Each rollout thread of `evaluate` sends one job and serves that job's requests
itself, inside the rollout's `dspy.context`, so LM calls run on the rollout's
own LM copy (its history is the trace) and tool calls run on its recorded
tools. A reader thread routes the child's messages to the waiting rollouts.
Any failure (a task past its wall clock, the child's death, a broken message)
stops the child's whole process group; the rollouts in flight and all later
ones then fail with that reason. `run_contained` is one call of an unvouched program in a
session of its own: what `HarnessProgram.forward` does with code nobody vouched for.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
import uuid
from typing import Any

import dspy

from whale_dspy.dspy_lm_seam import replay_adapter_call
from whale_dspy.errors import HarnessError
from whale_dspy.harness_source import HarnessSource
from whale_dspy.jsonl import to_jsonable
from whale_dspy.protocols import Tools
from whale_dspy.records import GROUP_SETTING
from whale_dspy.sandbox.allowlist import check_imports
from whale_dspy.sandbox.limits import (
    ForbiddenCall,
    ForbiddenImport,
    OutputLimitExceeded,
    SandboxCrash,
    SandboxLimits,
    SandboxTimeout,
    failure_from,
)
from whale_dspy.sandbox.spawn import Child, exit_failure, log_tail, spawn_child
from whale_dspy.sandbox.specs import (
    adapter_name,
    describe_signature,
    describe_tools,
    lm_profile,
    sampling_kwargs,
)
from whale_dspy.sandbox.wire import MessageTooLarge, WireError

log = logging.getLogger(__name__)

STOPPED = {"type": "stopped"}


class CandidateSession:
    """One child process serving one candidate's evaluation; use as a context manager."""

    def __init__(self, source: HarnessSource, signature: type[dspy.Signature], limits: SandboxLimits):
        self.source, self.signature, self.limits = source, signature, limits
        self.failure: Exception | None = None
        self.notes: list[str] = []
        self.proc: subprocess.Popen | None = None
        self._inboxes: dict[int, queue.Queue] = {}
        self._job_ids = itertools.count()
        self._lock = threading.Lock()
        self._stopping = False
        self.child: Child | None = None
        self._threads: list[threading.Thread] = []
        self._timer: threading.Timer | None = None

    def __enter__(self) -> CandidateSession:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Check, spawn and handshake; on any failure, record it (every rollout will report it)."""
        signature = describe_signature(self.signature)  # a ConfigError is the caller's, not the candidate's
        if self.limits.static_check and self._static_failure():
            return
        try:
            self.child = spawn_child(self.limits)
            self.proc, self.channel = self.child.proc, self.child.channel
            self._handshake(signature)
        except (OSError, WireError) as error:
            self._fail(SandboxCrash(f"the sandbox did not start: {type(error).__name__}: {error}"))
        if self.failure is not None:
            return
        self._timer = threading.Timer(
            self.limits.candidate_seconds,
            self._fail,
            args=(SandboxTimeout(f"the candidate ran past its {self.limits.candidate_seconds:g} s limit"),),
        )
        self._timer.daemon = True
        self._timer.start()
        reader = threading.Thread(target=self._read, name="sandbox-reader", daemon=True)
        reader.start()
        self._threads.append(reader)

    def _static_failure(self) -> bool:
        violations = check_imports(self.source.code, self.limits.allowed_imports)
        if not violations:
            return False
        detail = "; ".join(violations)
        if "syntax error" in violations[0]:
            self.failure = HarnessError(f"harness {self.source.name} does not parse: {violations[0]}")
        elif any("forbidden import" in v for v in violations):
            self.failure = ForbiddenImport(detail)
        else:
            self.failure = ForbiddenCall(detail)
        return True

    def _handshake(self, signature: dict[str, Any]) -> None:
        self.channel.send(
            {
                "type": "setup",
                "name": self.source.name,
                "source": self.source.code,
                "signature": signature,
                "allowed_imports": sorted(self.limits.allowed_imports),
                "threads": self.limits.threads,
            }
        )
        self.channel.sock.settimeout(self.limits.startup_seconds)
        try:
            message = self.channel.recv()
        except TimeoutError:
            self._fail(SandboxTimeout(f"the sandbox did not start within {self.limits.startup_seconds:g} s"))
            return
        except WireError:
            self._fail(self._exit_failure())
            return
        self.channel.sock.settimeout(None)
        self.notes = [str(note) for note in message.get("notes", [])]
        log.debug("sandbox for %s: %s", self.source.name, "; ".join(self.notes))
        if message["type"] != "ready":
            self._fail(failure_from(message))

    def close(self) -> None:
        """Kill the child's process group, reap it, and remove its files (idempotent)."""
        self._stopping = True
        if self._timer is not None:
            self._timer.cancel()
        self._kill()
        if hasattr(self, "channel"):
            self.channel.close()
        for thread in self._threads:
            thread.join(timeout=5)
        for directory in self.child.dirs if self.child else ():
            shutil.rmtree(directory, ignore_errors=True)

    def _kill(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def _fail(self, failure: Exception) -> None:
        """Record the first failure, stop the child, and wake every waiting rollout."""
        with self._lock:
            if self.failure is not None:
                return
            self.failure = failure
            inboxes = list(self._inboxes.values())
        if not self._stopping:
            log.info("sandbox for %s stopped: %s: %s", self.source.name, type(failure).__name__, failure)
        self._kill()
        for inbox in inboxes:
            inbox.put(STOPPED)

    def _read(self) -> None:
        while True:
            try:
                message = self.channel.recv()
            except MessageTooLarge as error:
                self._fail(OutputLimitExceeded(str(error)))
                return
            except (WireError, OSError) as error:
                dead = self._dead()
                self._fail(
                    self._exit_failure() if dead else SandboxCrash(f"the sandbox broke the protocol: {error}")
                )
                return
            inbox = self._inboxes.get(message.get("job")) if isinstance(message.get("job"), int) else None
            if inbox is not None:
                inbox.put(message)

    def _exit_failure(self) -> Exception:
        return exit_failure(self.proc.wait(), log_tail(self.child.log_path), self.limits)

    def _dead(self) -> bool:
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return False
        return True

    # -- one rollout ------------------------------------------------------------------------

    def run(self, inputs: dict[str, Any], tools: Tools, lm: dspy.BaseLM) -> dspy.Prediction | None:
        """Run the candidate on one task in the child, serving its LM and tool calls from here; the
        child gets the adapter and the task's group key (GROUP_SETTING) of this thread's dspy settings."""
        job, inbox = next(self._job_ids), queue.Queue()
        with self._lock:
            if self.failure is None:
                self._inboxes[job] = inbox
        try:
            if job not in self._inboxes:
                raise self._failure_copy()
            self._send(
                {
                    "type": "job",
                    "job": job,
                    "inputs": to_jsonable(inputs),
                    "tools": describe_tools(tools),
                    "lm": lm_profile(lm),
                    "adapter": adapter_name(dspy.settings.adapter),
                    "group": dspy.settings.get(GROUP_SETTING),
                }
            )
            return self._serve(inbox, tools, lm)
        finally:
            with self._lock:
                self._inboxes.pop(job, None)

    def _serve(self, inbox: queue.Queue, tools: Tools, lm: dspy.BaseLM) -> dspy.Prediction | None:
        """Answer one rollout's LM and tool calls until its result; the task limit catches a hung
        harness, not a slow server, so each LM call's time moves the deadline back."""
        deadline = time.monotonic() + self.limits.task_seconds
        while True:
            try:
                message = inbox.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self._fail(SandboxTimeout(f"a task ran past its {self.limits.task_seconds:g} s limit"))
                raise self._failure_copy() from None
            kind = message["type"]
            if kind == "stopped":
                raise self._failure_copy()
            if kind == "lm":
                started = time.monotonic()
                self._reply(message, functools.partial(self._lm_call, lm, message))
                deadline += time.monotonic() - started
            elif kind == "tool":
                self._reply(message, functools.partial(self._tool_call, tools, message))
            elif kind == "parse":
                replay_parse(message)
            elif kind == "result":
                return self._prediction(message)

    def _send(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):  # the child is gone; the reader records why and wakes us
            self.channel.send(message)

    def _reply(self, request: dict[str, Any], serve: Any) -> None:
        try:
            reply = {"value": serve()}
        except Exception as error:  # the LM's or tool's error goes back to the candidate
            reply = {"error": {"type": type(error).__name__, "message": str(error)}}
        self._send({"type": "reply", "id": request.get("id"), **reply})

    def _lm_call(self, lm: dspy.BaseLM, request: dict[str, Any]) -> Any:
        messages = request.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise ValueError("messages must be a list of objects")
        kwargs = sampling_kwargs(request.get("kwargs") if isinstance(request.get("kwargs"), dict) else {})
        for budget in ("max_tokens", "max_completion_tokens"):  # the harness's own budget, capped
            if isinstance(kwargs.get(budget), int):
                kwargs[budget] = min(kwargs[budget], self.limits.max_tokens)
        return to_jsonable(replay_adapter_call(lm, messages, **kwargs))  # the child adapter's own call

    @staticmethod
    def _tool_call(tools: Tools, request: dict[str, Any]) -> Any:
        name, args, kwargs = request.get("name"), request.get("args"), request.get("kwargs")
        if name not in tools:
            raise KeyError(f"no tool named {name!r}; tools: {sorted(tools)}")
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise TypeError("tool arguments must be a list and an object")
        return to_jsonable(tools[name](*args, **kwargs))

    def _prediction(self, message: dict[str, Any]) -> dspy.Prediction | None:
        if "prediction" not in message:
            raise failure_from(message)
        prediction = message["prediction"]
        if prediction is None:
            return None
        if not isinstance(prediction, dict):
            raise SandboxCrash("the child returned a prediction that is not an object")
        return dspy.Prediction(**prediction)

    def _failure_copy(self) -> Exception:
        """A fresh exception per rollout (raising one instance from many threads tangles tracebacks)."""
        failure = self.failure or SandboxCrash("the sandbox stopped")
        return type(failure)(*failure.args)


class ContainedParseError(Exception):
    """The child's adapter could not parse a completion (its own error stays in the child)."""


def replay_parse(message: dict[str, Any]) -> None:
    """Tell this rollout's DSPy callbacks what the child's adapter parsed, as if it had parsed here:
    the rollout's watch marks the LM calls whose completion failed, so the weight phase gets the
    same `LMCall.parsed` as in process. The callbacks get no adapter instance (it lives in the child)."""
    completion, ok = message.get("completion"), message.get("ok")
    if not isinstance(completion, str) or not isinstance(ok, bool):
        return
    call_id = uuid.uuid4().hex
    error = None if ok else ContainedParseError("the adapter could not parse the completion")
    for callback in dspy.settings.callbacks:
        try:  # as DSPy does: a failing callback is logged, never raised into the program
            callback.on_adapter_parse_start(call_id=call_id, instance=None, inputs={"completion": completion})
            callback.on_adapter_parse_end(call_id=call_id, outputs=None if error else {}, exception=error)
        except Exception as failure:
            log.warning("callback %s failed on a replayed parse: %s", type(callback).__name__, failure)


def run_contained(program: Any, example: dspy.Example, limits: SandboxLimits | None = None) -> Any:
    """One call of `program` on `example`'s inputs in a fresh sandbox child, on the current LM."""
    limits = (limits or SandboxLimits(threads=1)).sized_for(1)
    with CandidateSession(program.source, program.signature, limits) as session:
        return session.run(dict(example.inputs()), program.tools_factory(example), dspy.settings.lm)
