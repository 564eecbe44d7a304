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
import logging
import sys
import types
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import dspy

from whale_dspy.errors import HarnessError
from whale_dspy.harness_source import HarnessSource
from whale_dspy.predictor_state import StandInTools, Template
from whale_dspy.protocols import Tools
from whale_dspy.sandbox.session import run_contained

log = logging.getLogger(__name__)

BUILD_FUNCTION = "build"
TEMPLATE = "program"
"""Where a HarnessProgram's predictors appear in DSPy's names: `program.<name in the harness>`."""
SAVED_HARNESS = "whale_harness"
"""The key of a saved program's harness (code, adapter, model) beside DSPy's predictor states."""

ToolsFactory = Callable[[dspy.Example], Tools]


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


class HarnessProgram(dspy.Module):
    """A harness source bound to a signature, a per-task tools factory and an optional LM.

    The inner program is built per call because tools are per task (a chess
    puzzle's environment, for instance); its predictors as DSPy sees them
    (`named_predictors`, `dump_state`, `set_lm`) live on a template built once from
    vouched code (see `whale_dspy.predictor_state`), so DSPy optimizers, `save` and
    `load` work on it as on any program. `with_*` return new programs: optimizers
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
        self._template: Template | None = None
        self._pending_state: dict[str, Any] | None = None  # predictor states to apply once built

    def build_function(self) -> Callable[..., dspy.Module]:
        """Execute the (vouched) harness module on first use only; untrusted code never runs here."""
        if self._build is None:
            self._build = load_build(self.source)
        return self._build

    def build_for(self, example: dspy.Example, tools: Tools | None = None) -> dspy.Module:
        """A fresh inner program wired to this task's tools, with the template's demos and instructions
        (a rollout: its LM calls go to the rollout's own LM)."""
        return self._with_template(self._fresh(example, tools), share=False)

    def forward(self, **inputs: Any) -> dspy.Prediction:
        example = dspy.Example(**inputs).with_inputs(*inputs)
        with dspy.context(lm=self.bound_lm) if self.bound_lm is not None else contextlib.nullcontext():
            if not self.source.trusted:
                return run_contained(self, example)
            return self._with_template(self._fresh(example), share=True)(**inputs)

    def _fresh(self, example: dspy.Example, tools: Tools | None = None) -> dspy.Module:
        tools = self.tools_factory(example) if tools is None else tools
        build = self.build_function()
        try:
            return build(self.signature, tools)
        except Exception as error:
            raise HarnessError(
                f"harness {self.source.name}: build() failed: {type(error).__name__}: {error}"
            ) from error

    # -- the template: this program's predictors as DSPy sees them --------------------------------

    def template(self) -> Template | None:
        """The persistent predictors, built on first need from vouched code (None: not vouched, or its
        build fails, which every call then reports)."""
        if self._template is None and self.source.trusted:
            try:
                self._template = Template.of(self.build_function()(self.signature, StandInTools()))
            except Exception as error:
                log.debug("harness %s has no template: %s", self.source.name, error)
                return None
            if self._pending_state is not None:
                self._template.load(self._pending_state, self.bound_lm)
                self._pending_state = None
        return self._template

    def named_parameters(self) -> list[tuple[str, Any]]:
        template = self.template()
        return (
            [(f"{TEMPLATE}.{name}", p) for name, p in template.program.named_parameters()] if template else []
        )

    def _with_template(self, fresh: dspy.Module, *, share: bool) -> dspy.Module:
        template = self.template()
        return template.carry_into(fresh, share=share) if template is not None else fresh

    # -- new programs, copies, saving -------------------------------------------------------------

    def with_source(self, source: HarnessSource) -> HarnessProgram:
        """This program on other code; code identical to this program's vouched code stays vouched
        (a harness read back from an archive or checkpoint is the same code, not new code) and keeps
        this program's predictor state."""
        same = source.digest == self.source.digest
        if self.source.trusted and same:
            source = source.vouched()
        return self._copy(source, self.bound_lm, self.adapter_name, carry=same)

    def with_lm(self, lm: dspy.BaseLM | None, adapter_name: str | None = None) -> HarnessProgram:
        """This program on another LM; predictors that had an LM of their own get `lm` too."""
        return self._copy(self.source, lm, adapter_name, carry=True)

    def vouched(self) -> HarnessProgram:
        """This program with its code vouched for (you read it): it then runs here, and its predictors
        are visible to DSPy optimizers."""
        return self._copy(self.source.vouched(), self.bound_lm, self.adapter_name, carry=True)

    def __deepcopy__(self, memo: dict[int, Any]) -> HarnessProgram:
        return self._copy(self.source, self.bound_lm, self.adapter_name, carry=True, rebind=False)

    def _copy(
        self,
        source: HarnessSource,
        lm: dspy.BaseLM | None,
        adapter_name: str | None,
        *,
        carry: bool,
        rebind: bool = True,
    ) -> HarnessProgram:
        program = HarnessProgram(source, self.signature, self.tools_factory, lm, adapter_name)
        if carry:
            program._build = self._build if source.trusted else None
            template = self.template()
            program._template = template.copy(lm if rebind else None) if template and source.trusted else None
            program._pending_state = self._pending_state if program._template is None else None
        return program

    def dump_state(self, json_mode: bool = True) -> dict[str, Any]:
        """DSPy's state (predictors by name) plus the harness: its code, adapter and model."""
        return {**super().dump_state(json_mode=json_mode), SAVED_HARNESS: self.describe(code=True)}

    def load_state(self, state: dict[str, Any], **_: Any) -> HarnessProgram:
        """DSPy's `load_state`, in place; a saved harness's code replaces this one's (vouched only if it
        is this program's vouched code), and its adapter and model rebind this program's LM."""
        saved = state.get(SAVED_HARNESS)
        if saved is not None:
            code = HarnessSource(
                saved["harness"], saved["code"], saved.get("parent"), saved.get("hypothesis", "")
            )
            if self.source.trusted and code.digest == self.source.digest:
                code = code.vouched()
            self.source, self._build, self._template = code, None, None
            self.adapter_name = saved.get("adapter")
            if self.bound_lm is not None and saved.get("model") and saved["model"] != self.bound_lm.model:
                self.bound_lm = self.bound_lm.copy(model=saved["model"])
        prefix = f"{TEMPLATE}."
        self._pending_state = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
        self._template = None
        return self

    def __getstate__(self) -> dict[str, Any]:
        """For `save(..., save_program=True)`: the template's class lives in a harness module no other
        process has, so its predictors travel as state and the template is rebuilt on load."""
        state = super().__getstate__()
        template = state["_template"]
        state["_build"] = state["_template"] = None
        if template is not None:
            state["_pending_state"] = template.program.dump_state(json_mode=False)
        return state

    def describe(self, *, code: bool = False) -> dict[str, Any]:
        described = {"harness": self.source.name, "digest": self.source.digest, "adapter": self.adapter_name}
        if code:
            model = str(self.bound_lm.model) if self.bound_lm is not None else None
            described.update(
                code=self.source.code,
                parent=self.source.parent,
                hypothesis=self.source.hypothesis,
                model=model,
            )
        return described


def rename(source: HarnessSource, name: str, parent: str | None = None) -> HarnessSource:
    """The same code under an archive name (candidates are named by the archive, not the proposer)."""
    return replace(source, name=name, parent=parent if parent is not None else source.parent)
