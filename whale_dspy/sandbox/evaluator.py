"""`SandboxedEvaluator`: the CandidateEvaluator for untrusted harness code.

It runs `whale_dspy.evaluation.evaluate` unchanged (same seeds, same rollout
records, same trace file, same report) on a stand-in program whose inner
modules live in a contained child process; see `session` for the protocol and
`confine` / `guard` for what contains the child.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dspy

from whale_dspy.evaluation import EvalReport, evaluate
from whale_dspy.harness import HarnessSource, ToolsFactory
from whale_dspy.protocols import Tools
from whale_dspy.records import Rollout
from whale_dspy.rollouts import Metric
from whale_dspy.sandbox.limits import SandboxLimits
from whale_dspy.sandbox.session import CandidateSession


@dataclass(frozen=True)
class CandidateProgram:
    """An untrusted harness as the sandbox needs it: never loaded in this process.

    A `HarnessProgram` works too, but building one executes the source here;
    the harness search should hand the sandbox a CandidateProgram instead.
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
        self.adapter_name: str | None = getattr(program, "adapter_name", None)
        self.bound_lm: dspy.BaseLM | None = getattr(program, "bound_lm", None)
        self.session = session

    def build_for(self, example: dspy.Example, tools: Tools | None = None) -> Callable[..., Any]:
        tools = self.tools_factory(example) if tools is None else tools

        def inner(**inputs: Any) -> dspy.Prediction | None:
            return self.session.run(inputs, tools, dspy.settings.lm)

        return inner


class SandboxedEvaluator:
    """Evaluates each candidate in one fresh, contained child process; never raises for its misdeeds."""

    def __init__(self, limits: SandboxLimits | None = None):
        self.limits = limits or SandboxLimits()

    def evaluate(
        self,
        program: Any,
        examples: Sequence[dspy.Example],
        *,
        metric: Metric,
        lm: dspy.BaseLM,
        k: int,
        namespace: str,
        trace_path: Path | None = None,
        **sampling: Any,
    ) -> tuple[EvalReport, list[Rollout]]:
        with CandidateSession(program.source, program.signature, self.limits) as session:
            return evaluate(
                SandboxedProgram(program, session),  # type: ignore[arg-type]
                examples,
                metric=metric,
                lm=lm,
                k=k,
                threads=self.limits.threads,
                namespace=namespace,
                trace_path=trace_path,
                **sampling,
            )
