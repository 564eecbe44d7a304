"""Cheap checks a candidate harness must pass before it is evaluated on search tasks.

Order: it parses and defines `build`; it imports only allowed modules; in
prompt-only mode it changes nothing but prompt text; it loads; and it answers
the smoke tasks without a harness bug. Every failure names its stage so the
archive says where a candidate broke. `check_imports` is the one place the
sandbox's stricter allowlist plugs in.
"""

from __future__ import annotations

import ast
import builtins
import contextvars
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from whale_dspy.errors import HarnessError
from whale_dspy.harness import HarnessSource, check_syntax
from whale_dspy.records import Rollout

T = TypeVar("T")

ALLOWED_IMPORTS = frozenset(
    {
        "__future__",
        "chess",
        "collections",
        "dataclasses",
        "dspy",
        "enum",
        "functools",
        "harness_programs",
        "itertools",
        "json",
        "math",
        "pydantic",
        "random",
        "re",
        "statistics",
        "string",
        "textwrap",
        "typing",
    }
)
"""Top-level packages a harness may import (a minimal check until the sandbox's allowlist lands)."""

STAGES = ("parse", "imports", "prompt_only", "load", "build", "smoke", "timeout", "evaluation", "duplicate")


class CandidateRejected(HarnessError):
    """A candidate failed validation at `stage`; the archive records it with score 0."""

    def __init__(self, stage: str, message: str):
        super().__init__(message)
        self.stage = stage


def check_imports(tree: ast.Module, allowed: frozenset[str] = ALLOWED_IMPORTS) -> None:
    """Raise CandidateRejected when the source imports a module outside the allowlist."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] if node.level == 0 else []
        else:
            continue
        for name in names:
            if name.split(".")[0] not in allowed:
                raise CandidateRejected(
                    "imports",
                    f"line {node.lineno}: import of {name!r} is not allowed; allowed: "
                    + ", ".join(sorted(allowed)),
                )


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


def check_static(source: HarnessSource, *, prompt_only_parent: str | None = None) -> None:
    """Parse, import and (optionally) prompt-only checks; raise CandidateRejected naming the stage."""
    if not source.code.strip():
        raise CandidateRejected("parse", "the proposer returned no code")
    try:
        tree = check_syntax(source)
    except HarnessError as error:
        raise CandidateRejected("parse", str(error)) from error
    check_imports(tree)
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


def check_smoke(rollouts: Sequence[Rollout]) -> None:
    """Raise CandidateRejected (stage build or smoke) when a smoke rollout hit a harness bug."""
    for rollout in rollouts:
        if is_harness_bug(rollout.error):
            stage = "build" if "build() failed" in str(rollout.error) else "smoke"
            raise CandidateRejected(stage, f"task {rollout.task_id}: {rollout.error}")


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
        raise CandidateRejected("timeout", f"{what} did not finish within {timeout_s:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
