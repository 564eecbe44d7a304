"""The evaluators that keep untrusted harness code contained.

`SandboxedEvaluator` runs `whale_dspy.evaluation.evaluate` unchanged (same
seeds, same rollout records, same trace file, same report) on a stand-in
program whose inner modules live in a contained child process; see `session`
for the protocol and `confine` / `guard` for what contains the child.
`ContainedEvaluator` is the default everywhere a harness runs: code nobody
vouched for goes to the sandbox, vouched code (shipped, the user's own) runs
in process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dspy

from whale_dspy.evaluation import EvalReport, EvalRequest, InProcessEvaluator, evaluate
from whale_dspy.harness import HarnessSource, ToolsFactory
from whale_dspy.protocols import Tools
from whale_dspy.records import Rollout
from whale_dspy.sandbox.limits import LONG_EVALUATION_SECONDS, SandboxLimits
from whale_dspy.sandbox.session import CandidateSession
from whale_dspy.sandbox.specs import adapter_name


@dataclass(frozen=True)
class CandidateProgram:
    """An untrusted harness as the sandbox needs it: never loaded in this process.

    A `HarnessProgram` works too: it loads its source only for in-process
    rollouts, and refuses to unless the source is vouched for.
    """

    source: HarnessSource
    signature: type[dspy.Signature]
    tools_factory: ToolsFactory = lambda example: {}  # noqa: E731
    adapter_name: str | None = None
    bound_lm: dspy.BaseLM | None = None


class SandboxedProgram:
    """What `run_rollout` needs of a program, with the harness itself running in the session's child."""

    def __init__(self, program: Any, session: CandidateSession):
        self.source: HarnessSource = program.source
        self.tools_factory: ToolsFactory = program.tools_factory
        self.adapter_name: str | None = program.adapter_name
        self.bound_lm: dspy.BaseLM | None = program.bound_lm
        self.session = session

    def build_for(self, example: dspy.Example, tools: Tools | None = None) -> Callable[..., Any]:
        tools = self.tools_factory(example) if tools is None else tools

        def inner(**inputs: Any) -> dspy.Prediction | None:
            return self.session.run(inputs, tools, dspy.settings.lm)

        return inner


class SandboxedEvaluator:
    """Evaluates each candidate in one fresh, contained child process; never raises for its misdeeds.

    The child's CPU time is sized to the evaluation (`SandboxLimits.sized_for`), so a candidate that
    spins is stopped after about what an honest one of that size could use.
    """

    def __init__(self, limits: SandboxLimits | None = None):
        self.limits = limits or SandboxLimits()

    def evaluate(self, program: Any, request: EvalRequest) -> tuple[EvalReport, list[Rollout]]:
        adapter_name(dspy.settings.adapter)  # a ConfigError now, not one per rollout
        limits = self.limits.sized_for(len(request.examples) * request.k)
        with CandidateSession(program.source, program.signature, limits) as session:
            return evaluate(SandboxedProgram(program, session), request, threads=limits.threads)  # type: ignore[arg-type]


class ContainedEvaluator:
    """The default CandidateEvaluator: unvouched (model-written) code in the sandbox, vouched code in
    process. Both give the same rollouts for the same code, so the choice changes cost, not scores."""

    def __init__(self, limits: SandboxLimits | None = None):
        self.limits = limits or SandboxLimits()
        self._sandboxed = SandboxedEvaluator(self.limits)
        self._in_process = InProcessEvaluator(threads=self.limits.threads)

    @classmethod
    def for_long_evaluations(cls, threads: int) -> ContainedEvaluator:
        """Default limits with `threads` rollouts at a time and room for hours of wall clock (a
        checkpoint's or a weight step's sampling); the CPU limit still stops a spinning candidate."""
        return cls(SandboxLimits(threads=threads, candidate_seconds=LONG_EVALUATION_SECONDS))

    def evaluate(self, program: Any, request: EvalRequest) -> tuple[EvalReport, list[Rollout]]:
        """`CandidateEvaluator.evaluate`, by the evaluator this program's code calls for."""
        chosen = self._in_process if program.source.trusted else self._sandboxed
        return chosen.evaluate(program, request)
