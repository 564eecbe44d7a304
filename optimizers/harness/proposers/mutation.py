"""MutationProposer: structural edits from a fixed catalogue, no LM needed.

It picks a parent among the archive's best (seeded by the archive's size, so
a resumed search draws the same edits) and applies one applicable edit: one
from the catalogue, few-shot demos drawn from that parent's own accepted
search rollouts, or labeled demos of the search tasks it ran on. With no API
key this is the search that runs, and it is the random-search baseline that LM
proposers must beat. Guided (`--proposer guided`), it draws half its edits from
those the parent's failing traces call for (`diagnosis.py`: a tool rejecting the
answer, truncated completions, parse failures, empty or wrong answers) and says
so in the hypothesis. Composed (`--proposer composed`), each candidate carries
`depth` different edits applied in turn, guided: one random edit rarely moves a
small model, where a longer search found gains in pairs (chain of thought with
labeled demos on GSM8K). In prompt-only mode it uses only prompt edits.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable

from optimizers.harness.archive import CandidateMeta, HarnessArchive
from optimizers.harness.proposers.diagnosis import indicated_edits
from optimizers.harness.proposers.edits import EDITS, Edit, trace_edits
from whale_dspy.errors import ConfigError
from whale_dspy.harness import HarnessSource
from whale_dspy.records import ProposerUsage
from whale_dspy.seeding import derive_seed

log = logging.getLogger(__name__)

ATTEMPTS_PER_CANDIDATE = 20
COMPOSED = "; then "
"""Joins a composed candidate's edits' hypotheses."""
TRANSIENT = frozenset({"timeout", "memory"})
"""Sandbox failure reasons (whale_dspy.sandbox.FAILURE_REASONS) that say nothing of the edit itself."""
GUIDED_SHARE = 0.5
"""The share of a guided proposer's draws taken from the edits the traces call for (the rest explore)."""


def refused_at_build(candidates: Iterable[CandidateMeta]) -> set[str]:
    """The hypotheses of candidates that failed to build. An edit's build failure says what the
    task's tools cannot support (answers from a listing tool where none lists, a vote over an
    episode's tools), which fails the same way on every parent: such an edit is not drawn again.
    A composed candidate's failure ("A; then B") names no one edit, so it bans none, and nor does
    one stopped by a limit (TRANSIENT: a busy machine may pass next time)."""
    return {
        meta.hypothesis
        for meta in candidates
        if meta.stage == "build" and meta.reason not in TRANSIENT and COMPOSED not in meta.hypothesis
    }


def clashes(edit: Edit, other: Edit) -> bool:
    """Whether two edits cannot make one composed candidate: the same edit, or two that decide one
    thing (`Edit.settings`: together they would be one of them)."""
    return edit.name == other.name or bool(edit.settings & other.settings)


class MutationProposer:
    def __init__(
        self,
        seed: int = 0,
        *,
        prompt_only: bool = False,
        parents: int = 3,
        edits: tuple[Edit, ...] = EDITS,
        guided: bool = False,
        depth: int = 1,
    ):
        if parents < 1:
            raise ConfigError(f"parents must be >= 1, got {parents}")
        if depth < 1:
            raise ConfigError(f"depth (edits a candidate) must be >= 1, got {depth}")
        self.label = "composed" if depth > 1 else "guided" if guided else "mutation"
        self.guided = guided
        self.depth = depth
        self.seed = seed
        self.parents = parents
        self.prompt_only = prompt_only
        self.edits = tuple(edit for edit in edits if edit.prompt_only or not prompt_only)
        if not self.edits:
            raise ConfigError("no edit left: prompt-only mode needs at least one prompt edit")

    def propose(self, archive: HarnessArchive, k: int) -> list[HarnessSource]:
        """Up to k new sources, each `depth` edits away from one of the best candidates, none of
        them a candidate the run tried before: in a run's later harness phase (same draws, same
        parents while the incumbent stands) the earlier phases' candidates are passed over, so
        each phase races something new, and edits that failed to build there are not drawn."""
        rng = random.Random(derive_seed("mutation", self.seed, len(archive)))
        parents = [archive.source(meta.name) for meta in archive.parents(self.parents)]
        tried = archive.run_candidates()
        refused, labels = refused_at_build(tried), archive.labels()
        edits = {
            parent.name: tuple(
                edit
                for edit in (*self.edits, *self._from_traces(archive, parent.name, labels))
                if not any(hypothesis.startswith(edit.hypothesis) for hypothesis in refused)
            )
            for parent in parents
        }
        called_for = {parent.name: self._called_for(archive, parent.name) for parent in parents}
        seen = {meta.digest for meta in tried}
        out: list[HarnessSource] = []
        for _ in range(k * ATTEMPTS_PER_CANDIDATE):
            if len(out) == k or not parents:
                break
            parent = rng.choice(parents)
            if not edits[parent.name]:
                continue
            applied = self._compose(parent, edits[parent.name], called_for[parent.name], rng)
            if applied is None:
                continue
            code, chosen = applied
            source = HarnessSource(
                name="-".join([parent.name, "+".join(edit.name for edit in chosen)]),
                code=code,
                parent=parent.name,
                hypothesis=COMPOSED.join(self._hypothesis(edit, called_for[parent.name]) for edit in chosen),
            )
            if source.digest not in seen:
                seen.add(source.digest)
                out.append(source)
        if len(out) < k:
            log.info("mutation: %d of %d candidates (no other edit applies to the best parents)", len(out), k)
        return out

    def _compose(
        self, parent: HarnessSource, edits: tuple[Edit, ...], called_for: dict[str, str], rng: random.Random
    ) -> tuple[str, list[Edit]] | None:
        """The parent's code after up to `depth` edits that do not clash, each drawn as `guided`
        says, or None when a drawn edit does not apply (the caller draws again, from a parent: at
        depth 1 this draws exactly as one edit a candidate did before composing, so recorded searches
        replay, except where c706b76 made an edit inapplicable to a parent that votes, retries or
        decodes greedily)."""
        code, chosen = parent.code, []
        for _ in range(self.depth):
            left = [edit for edit in edits if not any(clashes(edit, done) for done in chosen)]
            if not left:  # fewer edits than `depth` can compose here (prompt-only mode has one)
                break
            indicated = [edit for edit in left if edit.name in called_for]
            edit = rng.choice(indicated if indicated and rng.random() < GUIDED_SHARE else left)
            code = edit.apply(code, rng)
            if code is None:
                return None
            chosen.append(edit)
        return code, chosen

    @staticmethod
    def _hypothesis(edit: Edit, called_for: dict[str, str]) -> str:
        why = called_for.get(edit.name)
        return f"{edit.hypothesis} (called for by the traces: {why})" if why else edit.hypothesis

    def usage(self) -> ProposerUsage:
        """No LM, no cost: edits are applied by code."""
        return ProposerUsage()

    def _called_for(self, archive: HarnessArchive, parent: str) -> dict[str, str]:
        """The edits the parent's failing search traces call for, with why (none unguided)."""
        return indicated_edits(archive.traces(parent)) if self.guided else {}

    def _from_traces(
        self, archive: HarnessArchive, parent: str, labels: dict[str, dict[str, object]]
    ) -> tuple[Edit, ...]:
        """Edits drawn from the parent's own search rollouts: few-shot demos of its accepted calls,
        and labeled demos of the search tasks it ran on."""
        if self.prompt_only:
            return ()
        rng = random.Random(derive_seed("demos", self.seed, len(archive), parent))
        return trace_edits(archive.traces(parent), labels, rng)
