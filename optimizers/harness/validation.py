"""Cheap checks a candidate harness must pass before it is evaluated on search tasks.

Order: it parses and defines `build`; it imports only allowed modules and
names no forbidden builtin or attribute (the sandbox's own syntax-tree check,
`whale_dspy.sandbox.check_imports`, with the project's one allowlist); in
prompt-only mode it changes nothing but prompt text. These run on the syntax
tree in the parent and never execute the candidate. Loading it, building it
from the given tools and answering the smoke tasks happen inside the
evaluator (a sandboxed evaluator's child process). Every failure names its
stage, and a contained failure its reason, so the archive says where and why
a candidate broke.
"""

from __future__ import annotations

import ast
import builtins
import contextvars
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from whale_dspy.errors import HarnessError
from whale_dspy.harness import HarnessSource, check_syntax
from whale_dspy.records import Rollout
from whale_dspy.sandbox import ALLOWED_IMPORTS, check_imports, classify_failure
from whale_dspy.sandbox.limits import FAILURES

T = TypeVar("T")

STAGES = (
    "parse",
    "imports",
    "calls",
    "prompt_only",
    "load",
    "build",
    "smoke",
    "timeout",
    "evaluation",
    "duplicate",
)

CONTAINED_ERRORS = frozenset(cls.__name__ for cls in FAILURES.values()) | {"MemoryError"}
"""Rollout error types that mean the candidate was stopped (sandbox limit, guard, crash of its process)."""


class CandidateRejected(HarnessError):
    """A candidate failed at `stage`; the archive records it with score 0 and, when known, the
    `reason` (one of whale_dspy.sandbox.FAILURE_REASONS)."""

    def __init__(self, stage: str, message: str, reason: str | None = None):
        super().__init__(message)
        self.stage = stage
        self.reason = reason


def check_static_imports(source: HarnessSource, allowed: Iterable[str] = ALLOWED_IMPORTS) -> None:
    """Raise CandidateRejected (stage imports or calls) when the syntax tree breaks the allowlist."""
    violations = [v for v in check_imports(source.code, allowed) if "syntax error" not in v]
    if not violations:
        return
    if any("forbidden import" in v for v in violations):
        raise CandidateRejected("imports", "; ".join(violations), "forbidden import")
    raise CandidateRejected("calls", "; ".join(violations), "forbidden call")


class _BlankStrings(ast.NodeTransformer):
    def visit_Constant(self, node: ast.Constant) -> ast.Constant:
        return ast.Constant(value="") if isinstance(node.value, str) else node


def structure_of(code: str) -> str:
    """The syntax tree with every string constant blanked: equal iff only prompt text differs."""
    return ast.dump(_BlankStrings().visit(ast.parse(code)), annotate_fields=False)


def prompt_only_violation(parent_code: str, code: str) -> str | None:
    """Why `code` changes more than prompt text relative to `parent_code`, or None if it does not."""
    if structure_of(parent_code) == structure_of(code):
        return None
    return (
        "prompt-only mode: the change goes beyond prompt text (string constants, docstrings, "
        "instructions, field descriptions); code structure differs from the parent"
    )


def check_static(
    source: HarnessSource,
    *,
    prompt_only_parent: str | None = None,
    allowed: Iterable[str] = ALLOWED_IMPORTS,
) -> None:
    """Parse, allowlist and (optionally) prompt-only checks; raise CandidateRejected naming the stage."""
    if not source.code.strip():
        raise CandidateRejected("parse", "the proposer returned no code")
    try:
        check_syntax(source)
    except HarnessError as error:
        raise CandidateRejected("parse", str(error)) from error
    check_static_imports(source, allowed)
    if prompt_only_parent is not None:
        reason = prompt_only_violation(prompt_only_parent, source.code)
        if reason:
            raise CandidateRejected("prompt_only", reason)


def is_harness_bug(error: str | None) -> bool:
    """True for errors the harness code caused (build failures, Python built-in exceptions).

    Library errors such as DSPy's AdapterParseError or an LM timeout are the model's
    or the server's doing, so a weak model that cannot follow the format still
    passes the smoke test and is simply scored low.
    """
    if not error:
        return False
    kind = error.split(":", 1)[0].strip()
    if kind == "HarnessError":
        return True
    exception = getattr(builtins, kind, None)
    return isinstance(exception, type) and issubclass(exception, Exception)


def contained_failure(error: str | None) -> str | None:
    """The reason a rollout's candidate was stopped (timeout, memory, forbidden import/call, output
    limit, crash of its process), or None when the error is not a contained failure."""
    if not error or error.split(":", 1)[0].strip() not in CONTAINED_ERRORS:
        return None
    return classify_failure(error)


def failure_reason(error: str | None) -> str | None:
    """Why a rollout's error disqualifies the candidate: a contained failure's reason, "crash" for a
    harness bug, None for everything else (a model-format error such as AdapterParseError)."""
    return contained_failure(error) or ("crash" if is_harness_bug(error) else None)


def _stage_of(error: str) -> str:
    if "failed to load" in error:
        return "load"
    return "build" if "build() failed" in error else "smoke"


def check_smoke(rollouts: Sequence[Rollout]) -> None:
    """Raise CandidateRejected (stage load, build or smoke) when a smoke rollout hit a harness bug
    or a contained failure; the reason says which."""
    for rollout in rollouts:
        reason = failure_reason(rollout.error)
        if reason:
            stage = _stage_of(str(rollout.error))
            raise CandidateRejected(stage, f"task {rollout.task_id}: {rollout.error}", reason)


def check_evaluation(rollouts: Sequence[Rollout]) -> None:
    """Raise CandidateRejected (stage evaluation) when the candidate was stopped during its evaluation.

    A harness bug on some tasks only costs those tasks' scores; a contained failure (a limit, the
    guard) stops the candidate, so it scores 0 with the reason."""
    for rollout in rollouts:
        reason = contained_failure(rollout.error)
        if reason:
            raise CandidateRejected("evaluation", f"task {rollout.task_id}: {rollout.error}", reason)


def run_with_timeout(function: Callable[[], T], timeout_s: float, what: str) -> T:
    """Run `function` in a daemon thread; raise CandidateRejected("timeout") past the deadline.

    An in-process thread cannot be killed: a hanging candidate's thread is left
    behind (daemon) while the search goes on. The sandboxed evaluator kills its child.
    """
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = function()
        except BaseException as error:  # re-raised in the caller's thread
            outcome["error"] = error

    context = contextvars.copy_context()  # the caller's dspy.context settings apply inside
    thread = threading.Thread(target=context.run, args=(target,), name=f"candidate-{what}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise CandidateRejected("timeout", f"{what} did not finish within {timeout_s:g} s", "timeout")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
