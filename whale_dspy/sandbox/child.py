"""The sandbox child: `python -m whale_dspy.sandbox.child CONFIG_JSON`, one process per candidate.

Order matters: confine (network, limits) -> import DSPy and every allowed
module, warm DSPy's lazy paths up -> drop root -> start the worker threads ->
forbid new processes and threads -> arm the guard -> execute the candidate ->
serve jobs. The child receives only the harness source, the signature, each
task's input fields, tool descriptions and the LM's profile; every LM and tool
call goes back to the parent.
"""

from __future__ import annotations

import errno
import json
import sys

from whale_dspy.sandbox.confine import become_unprivileged, confine, forbid_new_tasks

MAX_MESSAGE_CHARS = 4000
OUT_OF_MEMORY = {"failure": "memory", "message": "MemoryError: the candidate hit the sandbox's memory limit"}
"""Prebuilt: at the memory limit, even describing the error could fail."""


def main() -> None:
    config = json.loads(sys.argv[1])
    notes = confine(config)
    # Heavy imports only after the limits hold.
    import importlib
    import queue
    import socket
    import sysconfig
    import threading

    import whale_dspy
    import whale_dspy.harness  # noqa: F401  Runner's own imports, loaded while root can still read
    import whale_dspy.rollouts  # noqa: F401  them: the dropped uid cannot read a private checkout
    from whale_dspy.sandbox.guard import Guard
    from whale_dspy.sandbox.proxy import Requests
    from whale_dspy.sandbox.specs import rebuild_signature
    from whale_dspy.sandbox.wire import Channel, WireError

    channel = Channel(socket.socket(fileno=int(config["fd"])))
    setup = channel.recv()
    guard = Guard(setup["allowed_imports"])
    modules = [importlib.import_module(name) for name in _importable(guard.allowed)]
    signature = rebuild_signature(setup["signature"])
    _warm_up(signature)
    notes.append(become_unprivileged(config))

    runner = Runner(channel, Requests(channel), guard, signature, setup["name"])
    jobs: queue.Queue = queue.Queue()
    for index in range(int(setup["threads"])):
        threading.Thread(target=runner.work, args=(jobs,), name=f"job-{index}", daemon=True).start()
    notes.append(forbid_new_tasks())

    read_roots = {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    read_roots |= {_package_dir(module) for module in (whale_dspy, *modules)}
    loaded = runner.load(setup["source"], read_roots, set(sys.path))
    channel.send({"type": "ready" if loaded is None else "load_error", "notes": notes, **(loaded or {})})
    while loaded is None:
        try:
            message = channel.recv()
        except WireError:
            break
        if message["type"] == "job":
            jobs.put(message)
        elif message["type"] == "reply":
            runner.requests.deliver(message)


def _importable(allowed: frozenset[str]) -> list[str]:
    """Allowed modules that exist here (a missing optional one is simply not importable later)."""
    import importlib.util

    names = []
    for name in sorted(allowed):
        try:
            found = importlib.util.find_spec(name) is not None
        except ImportError:
            found = False
        if found:
            names.append(name)
    return names


def _package_dir(module: object) -> str:
    """The folder a module (or package) was loaded from: its lazy submodules live there."""
    import os

    return os.path.dirname(getattr(module, "__file__", None) or "")


def _warm_up(signature: object) -> None:
    """Run DSPy's common paths once with a canned LM so their lazy imports happen before the guard."""
    import dspy

    from whale_dspy.dspy_lm_seam import AnsweringLM

    class Canned(AnsweringLM):
        supports_response_schema = True  # takes JSONAdapter's structured-output path too
        supported_params = {"response_format"}

        def answer(self, messages, **kwargs):
            return ["[[ ## reasoning ## ]]\nx\n\n[[ ## answer ## ]]\nx\n\n[[ ## completed ## ]]"]

    inputs = {name: "x" for name in signature.input_fields}  # type: ignore[attr-defined]
    for adapter in (dspy.ChatAdapter(), dspy.JSONAdapter()):
        for module in (dspy.Predict(signature), dspy.ChainOfThought(signature)):
            try:
                with dspy.context(lm=Canned(model="warm-up"), adapter=adapter):
                    module(**inputs)
            except Exception:  # only the imports matter here
                pass
    dspy.Tool(lambda query: query)


class Runner:
    """Loads the candidate and runs its jobs; one instance, many worker threads."""

    def __init__(self, channel, requests, guard, signature, name: str):
        self.channel, self.requests, self.guard = channel, requests, guard
        self.signature, self.name = signature, name
        self.build = None

    def load(self, source: str, read_roots: set[str], list_roots: set[str]) -> dict | None:
        """Execute the candidate module under the guard; None on success, else the failure message."""
        import types

        from whale_dspy.harness import BUILD_FUNCTION, HarnessSource, check_syntax

        harness = HarnessSource(name=self.name, code=source)
        module = types.ModuleType(f"whale_harness_{harness.name}_{harness.digest}")
        module.__file__ = f"<harness {harness.name}>"
        module.__dict__["__builtins__"] = self.guard.candidate_builtins()
        sys.modules[module.__name__] = module
        self.guard.arm(module.__name__, read_roots, list_roots)
        try:
            tree = check_syntax(harness)
            exec(compile(tree, module.__file__, "exec"), module.__dict__)
            self.build = module.__dict__[BUILD_FUNCTION]
        except BaseException as error:  # the candidate may raise anything, SystemExit included
            found = describe_error(error)
            if "error" in found:
                cause = f"{found['error']['type']}: {found['error']['message']}"
                message = f"harness {harness.name} failed to load: {cause}"
                found = {"error": {"type": "HarnessError", "message": message}}
            return self._violation_or(self.guard.load_violation(), found)
        return self._violation_or(self.guard.load_violation(), None)

    @staticmethod
    def _violation_or(violation: tuple[str, str] | None, outcome: dict | None) -> dict | None:
        return {"failure": violation[0], "message": violation[1]} if violation else outcome

    def work(self, jobs) -> None:
        while True:
            job = jobs.get()
            try:
                outcome = self.run(job)
            except MemoryError:  # raised while reporting; the candidate's memory is released by now
                outcome = OUT_OF_MEMORY
            self.channel.send({"type": "result", "job": job["job"], **outcome})

    def run(self, job: dict) -> dict:
        """One rollout's harness part: build, call, and report the prediction or the failure."""
        import dspy

        from whale_dspy.records import GROUP_SETTING
        from whale_dspy.rollouts import prediction_dict
        from whale_dspy.sandbox.proxy import ParseReporter, ProxyLM
        from whale_dspy.sandbox.specs import ADAPTERS, tool_stub

        self.guard.begin_job()
        number = job["job"]
        tools = {spec["name"]: tool_stub(spec, self._tool_caller(number)) for spec in job["tools"]}
        try:
            try:
                inner = self.build(self.signature, tools)
            except Exception as error:
                message = f"harness {self.name}: build() failed: {type(error).__name__}: {error}"
                raise _Named("HarnessError", message) from error
            adapter = ADAPTERS[job["adapter"]]() if job.get("adapter") else None
            with dspy.context(
                lm=ProxyLM(self.requests, number, job["lm"]),
                adapter=adapter,
                callbacks=[ParseReporter(self.channel, number)],
                **{GROUP_SETTING: job.get("group")},
            ):
                outcome = {"prediction": prediction_dict(inner(**job["inputs"]))}
        except MemoryError:  # leave the handler at once: its traceback keeps the candidate's memory alive
            outcome = OUT_OF_MEMORY
        except BaseException as error:  # SystemExit and KeyboardInterrupt from candidate code too
            outcome = describe_error(error)
        return self._violation_or(self.guard.end_job(), outcome)

    def _tool_caller(self, job: int):
        def call(name: str, args: list, kwargs: dict):
            return self.requests.ask(job, "tool", name=name, args=args, kwargs=kwargs)

        return call


class _Named(Exception):
    """An error to report under a given type name (the in-process harness loader's HarnessError)."""

    def __init__(self, type_name: str, message: str):
        super().__init__(message)
        self.type_name = type_name


def describe_error(error: BaseException) -> dict:
    """The wire form of an exception: a sandbox failure reason, or the type name and message."""
    from whale_dspy.sandbox.guard import Refused

    message = str(error)[:MAX_MESSAGE_CHARS]
    if isinstance(error, Refused):
        return {"failure": error.reason, "message": message}
    if isinstance(error, MemoryError):
        return OUT_OF_MEMORY
    if isinstance(error, OSError) and error.errno == errno.EFBIG:  # RLIMIT_FSIZE (Python ignores SIGXFSZ)
        return {"failure": "output limit", "message": "the candidate wrote past the sandbox's output limit"}
    return {"error": {"type": getattr(error, "type_name", type(error).__name__), "message": message}}


if __name__ == "__main__":
    main()
