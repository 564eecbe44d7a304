"""Harnesses as data: Python source that builds a DSPy program from a signature and tools.

A harness file defines `build(signature, tools) -> dspy.Module`. The optimizer
stores, diffs, mutates and loads harness sources; `HarnessProgram` binds one to
a signature, a per-task tools factory and (optionally) an LM so it behaves as an
ordinary `dspy.Module` for `dspy.Evaluate` and teleprompters.

Trust is part of a source, bound to its exact code: only code someone vouched
for (the shipped seed harnesses, code the user wrote) may execute in this
process. Everything else, above all what a proposer wrote, is refused here and
runs in the sandbox (`whale_dspy.sandbox`); editing vouched code drops the
vouch, because the digest it names no longer matches.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import inspect
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import dspy

from whale_dspy.errors import HarnessError
from whale_dspy.protocols import Tools

BUILD_FUNCTION = "build"

ToolsFactory = Callable[[dspy.Example], Tools]


@dataclass(frozen=True)
class HarnessSource:
    """A harness's code plus where it came from (the archive keeps all of this)."""

    name: str
    code: str
    parent: str | None = None
    hypothesis: str = ""
    vouched_digest: str | None = field(default=None, compare=False, repr=False)
    """The digest of the code someone vouched for; see `trusted`. Set only through `vouched()`."""

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.code.encode()).hexdigest()[:12]

    @property
    def trusted(self) -> bool:
        """Whether this exact code was vouched for and so may run in this process."""
        return self.vouched_digest == self.digest

    def vouched(self) -> HarnessSource:
        """The named opt-in to run this code in process: for shipped code and code you wrote yourself,
        never for what a proposer wrote (that runs in the sandbox)."""
        return replace(self, vouched_digest=self.digest)

    def unvouched(self) -> HarnessSource:
        """The same code with no vouch: what the harness search does to every proposed candidate."""
        return replace(self, vouched_digest=None)

    @classmethod
    def from_path(cls, path: str | Path) -> HarnessSource:
        path = Path(path)
        try:
            return cls(name=path.stem, code=path.read_text())
        except OSError as error:
            raise HarnessError(f"cannot read harness file {path}: {error}") from error


def check_syntax(source: HarnessSource) -> ast.Module:
    """Parse the source and check it defines `build`; raise HarnessError saying what is wrong."""
    try:
        tree = ast.parse(source.code, filename=f"<harness {source.name}>")
    except SyntaxError as error:
        raise HarnessError(
            f"harness {source.name} does not parse: line {error.lineno}: {error.msg}"
        ) from error
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    if BUILD_FUNCTION not in defined:
        raise HarnessError(
            f"harness {source.name} defines no top-level `def {BUILD_FUNCTION}(signature, tools)`"
        )
    return tree


class UntrustedHarness(HarnessError):
    """Code nobody vouched for was about to execute in this process."""


def refuse_untrusted(source: HarnessSource) -> None:
    """Raise UntrustedHarness unless `source` may run in this process."""
    if not source.trusted:
        raise UntrustedHarness(
            f"harness {source.name} ({source.digest}) is not vouched for, so it runs only in the sandbox: "
            "evaluate it with whale_dspy.sandbox.ContainedEvaluator (or SandboxedEvaluator); "
            "if you wrote this code yourself, HarnessSource.vouched() lets it run in process"
        )


def load_build(source: HarnessSource) -> Callable[..., dspy.Module]:
    """Execute vouched source in a fresh module namespace and return its `build` factory."""
    refuse_untrusted(source)
    tree = check_syntax(source)
    module = types.ModuleType(f"whale_harness_{source.name}_{source.digest}")
    module.__file__ = f"<harness {source.name}>"
    # Registered so dataclasses, pickling and inspect can find the module while it runs.
    sys.modules[module.__name__] = module
    try:
        exec(compile(tree, module.__file__, "exec"), module.__dict__)
    except Exception as error:
        raise HarnessError(
            f"harness {source.name} failed to load: {type(error).__name__}: {error}"
        ) from error
    return module.__dict__[BUILD_FUNCTION]


def source_of(program: dspy.Module) -> HarnessSource:
    """The harness source behind a program: a HarnessProgram's own, else its class's module file
    (vouched: that module is already running in this process)."""
    if isinstance(program, HarnessProgram):
        return program.source
    module = inspect.getmodule(type(program))
    try:
        code = inspect.getsource(module)
    except (TypeError, OSError) as error:
        raise HarnessError(
            f"cannot find the source of {type(program).__name__}; wrap it in a HarnessProgram"
        ) from error
    if f"def {BUILD_FUNCTION}(" not in code:
        raise HarnessError(f"module {module.__name__} has no `{BUILD_FUNCTION}(signature, tools)` factory")
    return HarnessSource(name=module.__name__.rsplit(".", 1)[-1], code=code).vouched()


class HarnessProgram(dspy.Module):
    """A harness source bound to a signature, a per-task tools factory and an optional LM.

    The inner program is built per call because tools are per task (a chess
    puzzle's environment, for instance). `with_*` return new programs: optimizers
    never mutate their student. Called directly, a program whose source is not
    vouched for runs each call in a fresh sandbox child (slow, contained).
    """

    def __init__(
        self,
        source: HarnessSource,
        signature: type[dspy.Signature],
        tools_factory: ToolsFactory | None = None,
        lm: dspy.BaseLM | None = None,
        adapter_name: str | None = None,
    ):
        super().__init__()
        self.source = source
        self.signature = signature
        self.tools_factory = tools_factory or (lambda example: {})
        self.bound_lm = lm
        self.adapter_name = adapter_name
        check_syntax(source)
        self._build: Callable[..., dspy.Module] | None = None

    def load(self) -> Callable[..., dspy.Module]:
        """Execute the (vouched) harness module on first use only; untrusted code never runs here."""
        if self._build is None:
            self._build = load_build(self.source)
        return self._build

    def build_for(self, example: dspy.Example, tools: Tools | None = None) -> dspy.Module:
        """A fresh inner program wired to this task's tools."""
        tools = self.tools_factory(example) if tools is None else tools
        build = self.load()
        try:
            return build(self.signature, tools)
        except Exception as error:
            raise HarnessError(
                f"harness {self.source.name}: build() failed: {type(error).__name__}: {error}"
            ) from error

    def forward(self, **inputs: Any) -> dspy.Prediction:
        example = dspy.Example(**inputs).with_inputs(*inputs)
        with dspy.context(lm=self.bound_lm) if self.bound_lm is not None else contextlib.nullcontext():
            if not self.source.trusted:
                from whale_dspy.sandbox.evaluator import run_contained

                return run_contained(self, example)
            return self.build_for(example)(**inputs)

    def with_source(self, source: HarnessSource) -> HarnessProgram:
        """This program on other code; code identical to this program's vouched code stays vouched
        (a harness read back from an archive or checkpoint is the same code, not new code)."""
        if self.source.trusted and source.digest == self.source.digest:
            source = source.vouched()
        return HarnessProgram(source, self.signature, self.tools_factory, self.bound_lm, self.adapter_name)

    def with_lm(self, lm: dspy.BaseLM | None, adapter_name: str | None = None) -> HarnessProgram:
        return HarnessProgram(self.source, self.signature, self.tools_factory, lm, adapter_name)

    def describe(self) -> dict[str, Any]:
        return {"harness": self.source.name, "digest": self.source.digest, "adapter": self.adapter_name}


def rename(source: HarnessSource, name: str, parent: str | None = None) -> HarnessSource:
    """The same code under an archive name (candidates are named by the archive, not the proposer)."""
    return replace(source, name=name, parent=parent if parent is not None else source.parent)
