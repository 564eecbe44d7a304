"""Harnesses as data: Python source that builds a DSPy program from a signature and tools.

A harness file defines `build(signature, tools) -> dspy.Module`. The optimizer
stores, diffs, mutates and loads harness sources; `HarnessProgram` binds one to
a signature, a per-task tools factory and (optionally) an LM so it behaves as an
ordinary `dspy.Module` for `dspy.Evaluate` and teleprompters.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, replace
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

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.code.encode()).hexdigest()[:12]

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


def load_build(source: HarnessSource) -> Callable[..., dspy.Module]:
    """Execute the source in a fresh module namespace and return its `build` factory."""
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
    """The harness source behind a program: a HarnessProgram's own, else its class's module file."""
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
    return HarnessSource(name=module.__name__.rsplit(".", 1)[-1], code=code)


class HarnessProgram(dspy.Module):
    """A harness source bound to a signature, a per-task tools factory and an optional LM.

    The inner program is built per call because tools are per task (a chess
    puzzle's environment, for instance). `with_*` return new programs: optimizers
    never mutate their student.
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
        """Execute the harness module on first use only: a sandboxed evaluator never runs it here."""
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
        inner = self.build_for(example)
        if self.bound_lm is None:
            return inner(**inputs)
        with dspy.context(lm=self.bound_lm):
            return inner(**inputs)

    def with_source(self, source: HarnessSource) -> HarnessProgram:
        return HarnessProgram(source, self.signature, self.tools_factory, self.bound_lm, self.adapter_name)

    def with_lm(self, lm: dspy.BaseLM | None, adapter_name: str | None = None) -> HarnessProgram:
        return HarnessProgram(self.source, self.signature, self.tools_factory, lm, adapter_name)

    def describe(self) -> dict[str, Any]:
        return {"harness": self.source.name, "digest": self.source.digest, "adapter": self.adapter_name}


def rename(source: HarnessSource, name: str, parent: str | None = None) -> HarnessSource:
    """The same code under an archive name (candidates are named by the archive, not the proposer)."""
    return replace(source, name=name, parent=parent if parent is not None else source.parent)
