"""LMProposer: any model DSPy can call reads the archive and writes one new harness per request.

The request carries the task card, the best candidates' code and diffs, every
candidate's score and a sample of raw failing (with the search task's gold) and
succeeding traces; the k requests of one iteration start from different parents
and ideas. An LM error or timeout is retried; after the last retry the proposer
returns fewer candidates and records why, so the iteration goes on (or is
recorded as empty) instead of crashing the search.
"""

from __future__ import annotations

import logging

import dspy

from optimizers.harness.archive import HarnessArchive
from optimizers.harness.proposers.context import archive_context, history_tokens, strip_code_fences, task_text
from optimizers.harness.proposers.usage import UsageMeter
from whale_dspy.defaults import PROPOSER_TEMPERATURE
from whale_dspy.errors import ConfigError
from whale_dspy.harness import HarnessSource
from whale_dspy.records import ProposerUsage
from whale_dspy.rollouts import raise_if_server_failed
from whale_dspy.seeding import derive_seed

log = logging.getLogger(__name__)


class WriteHarness(dspy.Signature):
    """Read the archive of harness candidates and write an improved harness with ONE new mechanism."""

    task: str = dspy.InputField(desc="what a harness is and the rules a new one must follow")
    archive: str = dspy.InputField(desc="all candidates' scores, the best ones' code and raw traces")
    parent: str = dspy.InputField(desc="the candidate to start from, and the ideas already taken")
    hypothesis: str = dspy.OutputField(desc="the one new mechanism and why it should raise the score")
    harness_code: str = dspy.OutputField(desc="the complete new harness module (Python source)")


class LMProposer:
    label = "lm"

    def __init__(
        self,
        lm: dspy.BaseLM,
        *,
        retries: int = 2,
        top: int = 3,
        traces: int = 4,
        prompt_only: bool = False,
        seed: int = 0,
        temperature: float = PROPOSER_TEMPERATURE,
    ):
        if retries < 0 or top < 1 or traces < 0:
            raise ConfigError("retries and traces must be >= 0 and top >= 1")
        self.lm = lm
        self.retries = retries
        self.top = top
        self.traces = traces
        self.prompt_only = prompt_only
        self.seed = seed
        self.temperature = temperature
        self.meter = UsageMeter()
        self.write = dspy.Predict(WriteHarness)

    def usage(self) -> ProposerUsage:
        return self.meter.usage()

    def propose(self, archive: HarnessArchive, k: int) -> list[HarnessSource]:
        """k candidates; the i-th starts from the i-th best parent (round robin over `top`), and each
        is told the hypotheses already proposed this iteration, so the k do not repeat one idea."""
        parents = [meta.name for meta in archive.parents(self.top)]
        if not parents:
            return []
        shared = {
            "task": task_text(self.prompt_only),
            "archive": archive_context(archive, top=self.top, traces=self.traces, seed=self.seed),
        }
        out: list[HarnessSource] = []
        for index in range(k):
            parent = parents[index % len(parents)]
            inputs = {**shared, "parent": self._parent(parent, out)}
            answer = self._ask(inputs, derive_seed("lm-proposer", self.seed, len(archive), index))
            if answer is not None:
                hypothesis, code = answer
                out.append(HarnessSource(f"lm-{index}", strip_code_fences(code), parent, hypothesis.strip()))
        return out

    @staticmethod
    def _parent(parent: str, proposed: list[HarnessSource]) -> str:
        if not proposed:
            return parent
        taken = "; ".join(source.hypothesis or "-" for source in proposed)
        return f"{parent}. Already proposed this iteration (choose a different mechanism): {taken}"

    def _ask(self, inputs: dict[str, str], rollout_id: int) -> tuple[str, str] | None:
        """One candidate, retried on LM errors; None (recorded in `failures`) when every try failed,
        unless the last failure was its server's (BackendError: not a proposal that found nothing)."""
        for attempt in range(self.retries + 1):
            lm = self.lm.copy(rollout_id=rollout_id + attempt, temperature=self.temperature)
            try:
                with dspy.context(lm=lm):
                    prediction = self.write(**inputs)
                return prediction.hypothesis or "", prediction.harness_code or ""
            except Exception as error:
                if attempt == self.retries:
                    raise_if_server_failed(error, "LM proposer")
                log.warning(
                    "LM proposer: attempt %d failed: %s: %s", attempt + 1, type(error).__name__, error
                )
                last = f"{type(error).__name__}: {error}"
            finally:
                self.meter.called(history_tokens(lm.history))
        self.meter.failed(last)
        return None
