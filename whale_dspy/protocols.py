"""The seams between layers: small protocols, one to three methods each.

Optimizers see only these; domains, harness programs and backends implement
them without importing each other.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from whale_dspy.errors import BackendError
from whale_dspy.records import AdapterRef, ProposerUsage, SFTExample, TrainResult

if TYPE_CHECKING:
    import dspy

    from whale_dspy.eval_request import EvalRequest
    from whale_dspy.harness_source import HarnessSource
    from whale_dspy.sandbox.limits import SandboxLimits

logger = logging.getLogger(__name__)

Tools = dict[str, Callable[..., Any]]
"""The tools a harness receives: name -> plain Python callable (fresh per rollout)."""

STATEFUL_TOOL = "stateful"
"""The attribute (True) of a tool that holds one episode's state, like chess's board: a harness block
that re-runs the harness (a vote, a retry) refuses such tools, since every run would play on in the
same episode. Sandboxed candidates see the mark on their tool stubs."""

ToolFn = TypeVar("ToolFn", bound=Callable[..., Any])


def stateful_tool(tool: ToolFn) -> ToolFn:
    """Mark `tool` (a function; its bound methods carry the mark too) as holding an episode's state."""
    setattr(tool, STATEFUL_TOOL, True)
    return tool


def is_stateful(tool: Callable[..., Any]) -> bool:
    return getattr(tool, STATEFUL_TOOL, False) is True


SPLITS = ("train", "search", "val", "test")
"""WHALE's task roles: weight training, harness search, validation (studies), held-out test."""


@runtime_checkable
class Domain(Protocol):
    """Data splits, a verifier metric and per-task tools for one task family."""

    name: str
    signature: type[dspy.Signature]

    def load(self, split: str, limit: int | None = None, seed: int = 0) -> list[dspy.Example]: ...

    def metric(self, example: dspy.Example, pred: Any, trace: Any = None) -> float: ...

    def tools(self, example: dspy.Example) -> Tools: ...


@runtime_checkable
class InferenceBackend(Protocol):
    """Serves the base model plus named LoRA adapters over the OpenAI API.

    `base_model`: the base weights' folder or id that a trainer loads (None until known: a remote
    server's, say); `served_model()`: the model the server itself says it serves, and `serving()`:
    how it serves it (dtype, prefill, how adapters are served), both for the records. `shared`:
    others may sample from it while this run trains (a `--server-url` server), not a run's own.
    """

    base_model: str | None
    shared: bool

    def start(self) -> None: ...

    def served_model(self) -> str: ...

    def serving(self) -> dict[str, Any]: ...

    def stop(self) -> None: ...

    def load_adapter(self, ref: AdapterRef) -> None: ...

    def lm(self, adapter: str | None = None, **sampling: Any) -> dspy.LM: ...


@runtime_checkable
class HealthChecked(Protocol):
    """A backend that can say whether it still serves (an embedded server: its process and /health),
    so a caller can tell a dead server from a refused request before it starts a new one."""

    def healthy(self) -> bool: ...


def reports_down(backend: object) -> bool:
    """True when `backend` can say whether it still serves and says it does not: an error then is
    the server's death, not a refused request, and no step may be recorded as done with it."""
    return isinstance(backend, HealthChecked) and not backend.healthy()


@runtime_checkable
class AdoptsAdapters(Protocol):
    """A server that lists what it holds, each adapter with the folder it was loaded from, and can
    take a listed adapter as loaded (a `--server-url` server that outlived the run: loading the name
    again would be refused)."""

    def listed_adapters(self) -> Mapping[str, str]: ...

    def adopt_adapter(self, ref: AdapterRef) -> None: ...


def ensure_served(backend: InferenceBackend, adapter: AdapterRef) -> None:
    """Serve `adapter` from `backend` unless it already does: a resumed run continues from an
    adapter trained before a restart, which a fresh server lacks and a shared one may still hold."""
    try:
        backend.lm(adapter.name)
    except BackendError:
        if isinstance(backend, AdoptsAdapters) and adapter.name in backend.listed_adapters():
            logger.info("adopting adapter %s, which the server still holds (resumed run)", adapter.name)
            backend.adopt_adapter(adapter)
        else:
            logger.info("re-loading adapter %s into the server (resumed run)", adapter.name)
            backend.load_adapter(adapter)


@runtime_checkable
class WeightTrainer(Protocol):
    """Turns accepted rollouts (as SFT examples) into a new adapter under a new name."""

    def train(
        self,
        examples: Sequence[SFTExample],
        *,
        base: str,
        parent: AdapterRef | None,
        name: str,
        out_dir: Path,
    ) -> TrainResult: ...


@runtime_checkable
class ServingProvider(Protocol):
    """A DSPy LM provider that serves and trains its own model (`whale_dspy.LM`'s): the short form
    takes the run's backend, trainer and base model from the student's LM through it."""

    backend: InferenceBackend
    trainer: WeightTrainer
    base: str


@runtime_checkable
class HarnessProposer(Protocol):
    """Writes new harness sources after reading the archive of prior candidates, and says what
    proposing has cost so far (`usage`: calls, tokens or unknown, the failures it recorded).
    `label` names the kind in the archive ("mutation", "lm", "command", ...)."""

    label: str

    def propose(self, archive: Any, k: int) -> list[HarnessSource]: ...

    def usage(self) -> ProposerUsage: ...


@runtime_checkable
class CandidateEvaluator(Protocol):
    """Runs a (possibly untrusted) harness on tasks and returns its report and traces.

    `whale_dspy.evaluation.InProcessEvaluator` runs it in this process; the
    sandboxed evaluator runs the harness code in a contained child process.
    `limits`: what contains the code (its import allowlist, time limits), None in process.
    The request (`whale_dspy.eval_request.EvalRequest`) says what to run, and which rollouts an
    interrupted call of the same evaluation already recorded.
    """

    limits: SandboxLimits | None

    def evaluate(self, program: Any, request: EvalRequest) -> tuple[Any, list[Any]]: ...
