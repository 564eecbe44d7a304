"""Sandbox limits, the failure taxonomy and the child's environment.

A contained failure is raised inside the rollout as one of the exceptions
below, so the rollout's `error` reads "ForbiddenImport: module 'os' ..." in
the same "Type: message" shape as any harness error, and `classify_failure`
maps it to one of FAILURE_REASONS for the archive.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from whale_dspy.defaults import DEFAULT_THREADS
from whale_dspy.errors import ConfigError, HarnessError
from whale_dspy.sandbox.allowlist import ALLOWED_IMPORTS

FAILURE_REASONS = ("timeout", "memory", "forbidden import", "forbidden call", "crash", "output limit")

ENV_ALLOWLIST = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "LITELLM_LOCAL_MODEL_COST_MAP", "HF_HUB_OFFLINE")
"""Parent variables the child may inherit; nothing else (no *_KEY, *TOKEN*, AWS_*, proxies) passes."""

MiB = 1 << 20

LONG_EVALUATION_SECONDS = 6 * 3600.0
"""Wall-clock cap of a big contained evaluation (a checkpoint's k samples of every test task, or a
weight step's sampling, on a CPU); a spinning candidate is stopped earlier by its CPU limit."""


@dataclass(frozen=True)
class SandboxLimits:
    """What one candidate's child process may use; every limit is enforced even if the guard is bypassed.

    task_seconds / candidate_seconds: wall clock per rollout (less the time its LM calls wait on the
    server: a loaded server is not a hung harness) and per candidate (everything included),
    enforced by the parent, which kills the child's process group. cpu_seconds: the ceiling on the
    child's CPU time (RLIMIT_CPU); an evaluation of n rollouts gets at most
    startup_cpu_seconds + n * rollout_cpu_seconds of it (`sized_for`): LM calls run in the parent,
    so an honest child spends its CPU on imports and DSPy's prompt formatting (measured: 0.4 s to
    start and 2 ms per ChainOfThought rollout), and one that spins is stopped long before the wall
    clock would stop it. memory_mb: address space (RLIMIT_AS); with 8
    threads the idle child maps about 220 MB (70 MB resident).
    output_mb: what the child may write to stdout/stderr together (RLIMIT_FSIZE on the capture
    files). open_files: RLIMIT_NOFILE. threads: concurrent rollouts inside the child (the parent
    serves the same number, so the server still batches). startup_seconds: time to import DSPy and
    load the candidate. static_check: run the syntax-tree check before spawning (the runtime guard
    and the OS limits apply either way). isolate_network / drop_privileges: the OS-enforced parts
    that need root (or user namespaces); skipped with a log line where unavailable.
    max_tokens: the ceiling on the completion tokens one LM call of a candidate may ask for (a
    harness owns its budget up to here; the parent lowers a larger request to it).
    """

    task_seconds: float = 600.0
    candidate_seconds: float = 3600.0
    cpu_seconds: int = 1800
    startup_cpu_seconds: float = 10.0
    rollout_cpu_seconds: float = 0.5
    memory_mb: int = 2048
    output_mb: int = 8
    open_files: int = 64
    threads: int = DEFAULT_THREADS
    startup_seconds: float = 60.0
    allowed_imports: frozenset[str] = field(default=ALLOWED_IMPORTS)
    static_check: bool = True
    isolate_network: bool = True
    drop_privileges: bool = True
    max_tokens: int = 2048

    def __post_init__(self) -> None:
        numbers = {
            "task_seconds": self.task_seconds,
            "candidate_seconds": self.candidate_seconds,
            "cpu_seconds": self.cpu_seconds,
            "memory_mb": self.memory_mb,
            "output_mb": self.output_mb,
            "open_files": self.open_files,
            "threads": self.threads,
            "startup_seconds": self.startup_seconds,
            "startup_cpu_seconds": self.startup_cpu_seconds,
            "rollout_cpu_seconds": self.rollout_cpu_seconds,
            "max_tokens": self.max_tokens,
        }
        bad = {name: value for name, value in numbers.items() if value <= 0}
        if bad:
            raise ConfigError(f"sandbox limits must be positive; got {bad}")
        if self.memory_mb < 256:
            raise ConfigError(f"memory_mb={self.memory_mb} is below what importing DSPy needs (256 MB)")
        object.__setattr__(self, "allowed_imports", frozenset(self.allowed_imports))

    def sized_for(self, rollouts: int) -> SandboxLimits:
        """These limits with the CPU time an evaluation of `rollouts` rollouts may use."""
        budget = math.ceil(self.startup_cpu_seconds + rollouts * self.rollout_cpu_seconds)
        return replace(self, cpu_seconds=min(self.cpu_seconds, budget))


class SandboxFailure(HarnessError):
    """A contained misbehaviour of candidate code; `reason` is one of FAILURE_REASONS."""

    reason = "crash"


class SandboxTimeout(SandboxFailure):
    reason = "timeout"


class SandboxMemoryError(SandboxFailure):
    reason = "memory"


class ForbiddenImport(SandboxFailure):
    reason = "forbidden import"


class ForbiddenCall(SandboxFailure):
    reason = "forbidden call"


class SandboxCrash(SandboxFailure):
    reason = "crash"


class OutputLimitExceeded(SandboxFailure):
    reason = "output limit"


FAILURES: dict[str, type[SandboxFailure]] = {
    cls.reason: cls
    for cls in (
        SandboxTimeout,
        SandboxMemoryError,
        ForbiddenImport,
        ForbiddenCall,
        SandboxCrash,
        OutputLimitExceeded,
    )
}
_BY_NAME = {cls.__name__: cls.reason for cls in FAILURES.values()} | {"MemoryError": "memory"}


class RemoteError(Exception):
    """An exception raised by candidate code in the child, re-raised here under its type name."""


@functools.lru_cache(maxsize=256)
def remote_error(type_name: str) -> type[RemoteError]:
    """A RemoteError subclass named like the child's exception, so the trace reads as in process."""
    name = type_name if type_name.isidentifier() else "RemoteError"
    return type(name, (RemoteError,), {})


def failure_from(outcome: Mapping[str, Any]) -> Exception:
    """The exception a child's failed outcome stands for (a sandbox failure or the candidate's error)."""
    if "failure" in outcome:
        return FAILURES.get(outcome["failure"], SandboxCrash)(str(outcome.get("message", "")))
    error = outcome.get("error") or {}
    return remote_error(str(error.get("type", "RemoteError")))(str(error.get("message", "")))


def classify_failure(error: str | None) -> str | None:
    """The reason behind a rollout's `error` text: None when it succeeded, else one of FAILURE_REASONS.

    Errors raised by the harness itself (a parse failure, a KeyError) count as "crash".
    """
    if not error:
        return None
    return _BY_NAME.get(error.split(":", 1)[0].strip(), "crash")


def child_environment(home: str, parent: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child's whole environment: a few harmless parent variables plus fixed settings."""
    parent = os.environ if parent is None else parent
    env = {name: parent[name] for name in ENV_ALLOWLIST if name in parent}
    env.setdefault("PATH", "/usr/bin:/bin")
    env.update(
        HOME=home,
        TMPDIR=home,
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONNOUSERSITE="1",
        PYTHONHASHSEED="0",
        MALLOC_ARENA_MAX="2",  # glibc reserves 64 MB of address space per thread arena otherwise
        OPENBLAS_NUM_THREADS="1",
        OMP_NUM_THREADS="1",
    )
    return env
