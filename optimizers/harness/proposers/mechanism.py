"""MechanismProposer: a small LM reads the traces and picks ONE mechanism; code applies it.

A whole harness file is more than a 0.5B model can write reliably. Here the LM
sees the parent's code, its scores and raw traces, and the mechanisms that apply
to that parent (the mutation catalogue, plus few-shot demos from the parent's own
successes), and answers with a name from that list (constrained to it where the
server decodes structured output) and, for new instructions, one sentence. The
edit itself is the catalogue's syntax-tree edit, so every proposal parses. The k
proposals of one iteration start from distinct parents where there are several;
a mechanism chosen once in an iteration, or one whose code the archive already
holds, is not offered.
"""

from __future__ import annotations

import logging
import random
from typing import Any, Literal

import dspy

from optimizers.harness.archive import HarnessArchive
from optimizers.harness.proposers.context import history_tokens, raw_trace, sample_traces, summary_line
from optimizers.harness.proposers.edits import EDITS, Edit, module_constant, set_constant, trace_edits
from optimizers.harness.proposers.usage import UsageMeter
from whale_dspy.defaults import PROPOSER_TEMPERATURE
from whale_dspy.harness import HarnessSource
from whale_dspy.records import ProposerUsage, Rollout
from whale_dspy.rollouts import raise_if_server_failed
from whale_dspy.seeding import derive_seed

log = logging.getLogger(__name__)

INSTRUCTIONS_EDIT = "instructions"
TRACE_CHARS = 1500
"""Per trace: a small model's context is short."""


class ChooseMechanism(dspy.Signature):
    """You improve an LLM agent's harness (the code around the model). Read the harness, its score and
    its traces, then choose the ONE mechanism from the list most likely to fix what the failing traces
    show. For "instructions", also write one short sentence to add to the task's instructions."""

    harness: str = dspy.InputField(desc="the parent harness's Python code")
    results: str = dspy.InputField(desc="the parent's score, then raw traces of failures and successes")
    mechanisms: str = dspy.InputField(desc="the mechanisms you may choose, one per line: name: what it does")
    mechanism: str = dspy.OutputField(desc="exactly one name from the list")
    sentence: str = dspy.OutputField(desc='for "instructions": the sentence to add; otherwise leave empty')


class MechanismProposer:
    label = "mechanism"

    def __init__(
        self,
        lm: dspy.BaseLM,
        *,
        seed: int = 0,
        parents: int = 3,
        traces: int = 3,
        temperature: float = PROPOSER_TEMPERATURE,
        prompt_only: bool = False,
    ):
        self.lm, self.seed, self.parents, self.traces = lm, seed, parents, traces
        self.prompt_only = prompt_only
        self.temperature = temperature
        self.meter = UsageMeter()

    def usage(self) -> ProposerUsage:
        return self.meter.usage()

    def propose(self, archive: HarnessArchive, k: int) -> list[HarnessSource]:
        parents = [meta.name for meta in archive.parents(self.parents)]
        seen = {meta.digest for meta in archive.run_candidates()}
        chosen: set[str] = set()
        out: list[HarnessSource] = []
        for index in range(k):
            if not parents:
                break
            parent = parents[index % len(parents)]
            rollout_id = derive_seed("mechanism", self.seed, len(archive), index)
            source = self._one(archive, parent, chosen, seen, rollout_id)
            if source is not None and source.digest not in seen:
                seen.add(source.digest)
                out.append(source)
        return out

    def _one(
        self, archive: HarnessArchive, parent: str, chosen: set[str], seen: set[str], rollout_id: int
    ) -> HarnessSource | None:
        """One LM choice among the mechanisms that apply to `parent` and give code not yet archived."""
        code = archive.source(parent).code
        traces = archive.traces(parent)  # read once: both the few-shot demos and the LM's context use it
        edits = self._edits(parent, traces, archive.labels())
        offered = {edit.name: edit for edit in edits if edit.name not in chosen}
        applicable: dict[str, tuple[Edit, str]] = {}
        for name, edit in offered.items():
            edited = edit.apply(code, random.Random(rollout_id))
            if edited is not None and HarnessSource(name, edited).digest not in seen:
                applicable[name] = (edit, edited)
        if not applicable:
            return None
        rng = random.Random(rollout_id)
        menu = {name: edit for name, (edit, _) in applicable.items()}
        answer = self._ask(code, self._results(archive, parent, traces, rng), menu, rollout_id)
        if answer is None:
            return None
        name, sentence = answer
        if name not in applicable:  # the schema forbids it; a server without structured output may not
            self.meter.failed(f"the LM chose {name!r}, not one of {sorted(applicable)}")
            return None
        chosen.add(name)
        edit, edited = applicable[name]
        if name == INSTRUCTIONS_EDIT and sentence:
            edited = self._instructions(code, sentence) or edited
        return HarnessSource(f"{parent}-{name}", edited, parent, edit.hypothesis)

    def _edits(self, parent: str, traces: list[Rollout], labels: dict[str, dict[str, Any]]) -> list[Edit]:
        if self.prompt_only:
            return [edit for edit in EDITS if edit.prompt_only]
        return [*EDITS, *trace_edits(traces, labels, random.Random(derive_seed("demos", self.seed, parent)))]

    def _results(
        self, archive: HarnessArchive, parent: str, traces: list[Rollout], rng: random.Random
    ) -> str:
        traces = sample_traces(traces, self.traces, rng)
        parts = [summary_line(archive.get(parent))]
        parts += [f"## trace: task {r.task_id}, score {r.score}\n{raw_trace(r, TRACE_CHARS)}" for r in traces]
        return "\n".join(parts)

    def _ask(
        self, code: str, results: str, edits: dict[str, Edit], rollout_id: int
    ) -> tuple[str, str] | None:
        names = tuple(edits)
        signature = ChooseMechanism.with_updated_fields("mechanism", type_=Literal[names])  # type: ignore[valid-type]
        lm = self.lm.copy(rollout_id=rollout_id, temperature=self.temperature)
        menu = "\n".join(f"{name}: {edit.hypothesis}" for name, edit in edits.items())
        try:
            with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):  # the choice decoded as the schema's enum
                prediction = dspy.Predict(signature)(harness=code, results=results, mechanisms=menu)
        except Exception as error:
            raise_if_server_failed(error, "mechanism proposer")
            self.meter.failed(f"{type(error).__name__}: {error}")
            log.warning("mechanism proposer: %s: %s", type(error).__name__, error)
            return None
        finally:
            self.meter.called(history_tokens(lm.history))
        return str(prediction.mechanism), str(prediction.sentence or "").strip()

    @staticmethod
    def _instructions(code: str, sentence: str) -> str | None:
        """INSTRUCTIONS with the LM's sentence appended (a constant edit on the syntax tree)."""
        node = module_constant(code, "INSTRUCTIONS")
        if node is None or not isinstance(node.value, str) or sentence in node.value:
            return None
        return set_constant(code, "INSTRUCTIONS", f"{node.value} {sentence[:300]}".strip())
