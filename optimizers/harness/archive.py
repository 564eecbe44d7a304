"""The Meta-Harness archive on disk: every candidate's code, scores, cost and raw traces.

People and proposers read the same files, so the layout is plain:

    <archive>/c0007/harness.py     the candidate's source
    <archive>/c0007/meta.json      name, parent, hypothesis, iteration, status (stage, reason), scores, cost
    <archive>/c0007/traces.jsonl   full rollout traces (smoke_traces.jsonl for the smoke run)
    <archive>/c0007/diff.patch     unified diff against its parent
    <archive>/archive.jsonl        one summary line per candidate (appended, flushed)
    <archive>/iterations.jsonl     one line per finished iteration (resume replays it)
    <archive>/proposals.jsonl      what the proposer answered each iteration, kept before any of it
                                   is evaluated (a resumed iteration replays it, never re-asks)
    <archive>/frontier.json        Pareto frontier of accuracy against tokens per rollout
    <archive>/labels.json          the search tasks' gold fields, by task id (for proposers only)
    <archive>/task_card.md         the task card: signature, tools, metric (for proposers)
    <archive>/sampling.json        the LM sampling its scores were drawn at (a resume must match)

A candidate is written into a hidden staging folder and renamed into place, so
a crash never leaves a half candidate; reopening drops stale staging folders and
reloads every committed candidate without re-evaluating it.
"""

from __future__ import annotations

import difflib
import json
import logging
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from whale_dspy.harness import HarnessSource
from whale_dspy.jsonl import append_jsonl, atomic_write_json, atomic_write_text, read_jsonl, repair_jsonl
from whale_dspy.records import ProposerUsage, Rollout
from whale_dspy.untrusted_files import read_untrusted_text

log = logging.getLogger(__name__)

STATUSES = ("valid", "invalid", "duplicate")
HARNESS_FILE, META_FILE, TRACES_FILE, SMOKE_FILE, DIFF_FILE = (
    "harness.py",
    "meta.json",
    "traces.jsonl",
    "smoke_traces.jsonl",
    "diff.patch",
)
SUMMARY_FILE, ITERATIONS_FILE, FRONTIER_FILE = "archive.jsonl", "iterations.jsonl", "frontier.json"
PROPOSALS_FILE = "proposals.jsonl"
LABELS_FILE, TASK_CARD_FILE, SAMPLING_FILE = "labels.json", "task_card.md", "sampling.json"
STAGING_PREFIX = ".staging-"
PHASE_PREFIX = "phase-"
"""A run's harness phases archive side by side as `phase-000`, `phase-001`, ... (by the run's
position): archives so named beside each other are one run's, and each phase reads the earlier ones."""


def phase_archive(harness_dir: Path, position: int) -> Path:
    """The archive of the harness phase at the run's `position`."""
    return harness_dir / f"{PHASE_PREFIX}{position:03d}"


def run_archives(path: Path) -> list[Path]:
    """The archives of `path`'s run up to and including `path`, in order: its earlier phases'
    (siblings named by the run's earlier positions) and its own. An archive not named as a phase is
    a search of its own."""
    position = _phase_position(path.name)
    if position is None:
        return [path]
    earlier = (
        sibling
        for sibling in path.parent.glob(f"{PHASE_PREFIX}*")
        if (other := _phase_position(sibling.name)) is not None and other < position
    )
    return [*sorted(earlier, key=lambda sibling: _phase_position(sibling.name)), path]


def _phase_position(name: str) -> int | None:
    digits = name.removeprefix(PHASE_PREFIX)
    return int(digits) if name.startswith(PHASE_PREFIX) and digits.isascii() and digits.isdecimal() else None


@dataclass(frozen=True)
class CandidateScores:
    mean: float = 0.0
    per_task: dict[str, float] = field(default_factory=dict)
    pass_rate: float = 0.0
    parse_rate: float = 0.0


@dataclass(frozen=True)
class CandidateCost:
    rollouts: int = 0
    lm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    mean_turns: float = 0.0
    seconds: float = 0.0

    @property
    def tokens_per_rollout(self) -> float:
        return (self.prompt_tokens + self.completion_tokens) / self.rollouts if self.rollouts else 0.0


@dataclass(frozen=True)
class CandidateMeta:
    """What the archive knows about one candidate.

    For an invalid one, `stage` names where it failed and `reason` why, when it was stopped or
    crashed (one of whale_dspy.sandbox.FAILURE_REASONS: timeout, memory, forbidden import,
    forbidden call, crash, output limit); its score is 0.
    """

    name: str
    iteration: int
    parent: str | None
    hypothesis: str
    proposer: str
    digest: str
    status: str
    stage: str | None = None
    error: str | None = None
    reason: str | None = None
    scores: CandidateScores = field(default_factory=CandidateScores)
    cost: CandidateCost = field(default_factory=CandidateCost)

    @property
    def valid(self) -> bool:
        return self.status == "valid"

    @property
    def rank_key(self) -> tuple[float, float, float]:
        """Higher is better: score first, then fewer turns, then fewer tokens per rollout."""
        return (self.scores.mean, -self.cost.mean_turns, -self.cost.tokens_per_rollout)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CandidateMeta:
        return cls(
            **{
                **data,
                "scores": CandidateScores(**data.get("scores", {})),
                "cost": CandidateCost(**data.get("cost", {})),
            }
        )


@dataclass(frozen=True)
class Proposal:
    """What the proposer answered in one iteration: its sources (possibly fewer than asked for),
    what answering cost, and its error when it raised. Kept before any source is evaluated, so an
    iteration resumed after a crash evaluates the same candidates and counts the same cost."""

    sources: tuple[HarnessSource, ...]
    usage: ProposerUsage
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        sources = [{k: getattr(s, k) for k in ("name", "code", "parent", "hypothesis")} for s in self.sources]
        return {"sources": sources, "usage": asdict(self.usage), "error": self.error}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Proposal:
        usage = data["usage"]
        return cls(
            sources=tuple(HarnessSource(**source) for source in data["sources"]),
            usage=ProposerUsage(usage["calls"], usage["tokens"], tuple(usage["failures"])),
            error=data["error"],
        )


def pareto_frontier(metas: list[CandidateMeta]) -> list[CandidateMeta]:
    """Valid candidates that no other beats on both accuracy (up) and tokens per rollout (down)."""
    frontier: list[CandidateMeta] = []
    for meta in sorted(
        (m for m in metas if m.valid), key=lambda m: (m.cost.tokens_per_rollout, -m.scores.mean)
    ):
        if not frontier or meta.scores.mean > frontier[-1].scores.mean:
            frontier.append(meta)
    return frontier


def committed(path: Path) -> list[CandidateMeta]:
    """The candidates committed to the archive at `path`, in name order, from their own meta files
    (read as untrusted files: an archive may be a copy from elsewhere); none where it is absent."""
    return [
        CandidateMeta.from_dict(json.loads(read_untrusted_text(path, str(meta.relative_to(path)))))
        for meta in sorted(path.glob(f"c*/{META_FILE}"))
    ]


class HarnessArchive:
    """Candidates of one harness phase, in the order they were archived."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._metas: dict[str, CandidateMeta] = {}
        self._reload()

    def _reload(self) -> None:
        for stale in self.path.glob(f"{STAGING_PREFIX}*"):
            log.warning("archive %s: dropping unfinished candidate %s", self.path, stale.name)
            shutil.rmtree(stale, ignore_errors=True)
        self._metas = {meta.name: meta for meta in committed(self.path)}
        for log_file in (SUMMARY_FILE, ITERATIONS_FILE, PROPOSALS_FILE):
            repair_jsonl(self.path / log_file)  # a torn last line (a kill) must not precede the next
        summarized = {record["name"] for record in read_jsonl(self.path / SUMMARY_FILE)}
        for name in self._metas.keys() - summarized:  # committed but not summarized before a crash
            append_jsonl(self.path / SUMMARY_FILE, self._metas[name].to_dict())

    # -- reading ---------------------------------------------------------------------------

    @property
    def candidates(self) -> list[CandidateMeta]:
        return list(self._metas.values())

    def __len__(self) -> int:
        return len(self._metas)

    def __contains__(self, name: object) -> bool:
        return name in self._metas

    def get(self, name: str) -> CandidateMeta:
        return self._metas[name]

    def folder(self, name: str) -> Path:
        return self.path / name

    def source(self, name: str) -> HarnessSource:
        meta = self._metas[name]
        code = self._read(f"{name}/{HARNESS_FILE}")
        return HarnessSource(name=name, code=code, parent=meta.parent, hypothesis=meta.hypothesis)

    def traces(self, name: str) -> list[Rollout]:
        folder = self.folder(name)
        path = folder / TRACES_FILE if (folder / TRACES_FILE).exists() else folder / SMOKE_FILE
        return [Rollout.from_dict(record) for record in read_jsonl(path)]

    def best(self, n: int = 1) -> list[CandidateMeta]:
        """The n best valid candidates (ties: fewer turns, fewer tokens, then archived first)."""
        order = {name: index for index, name in enumerate(self._metas)}
        valid = [m for m in self._metas.values() if m.valid]
        return sorted(valid, key=lambda m: (tuple(-x for x in m.rank_key), order[m.name]))[:n]

    def parents(self, n: int = 1) -> list[CandidateMeta]:
        """The best n valid candidates, or the first one (h0) while none is valid: a fix may start there."""
        return self.best(n) or self.candidates[:1]

    def parent_diff(self, name: str) -> str | None:
        return self._read_if_present(f"{name}/{DIFF_FILE}")

    def labels(self) -> dict[str, dict[str, Any]]:
        """The search tasks' gold fields by task id, as far as the phase recorded them."""
        text = self._read_if_present(LABELS_FILE)
        return json.loads(text) if text is not None else {}

    def task_card(self) -> str | None:
        return self._read_if_present(TASK_CARD_FILE)

    def _read(self, relative: str) -> str:
        """A file of the archive, read as an untrusted file: an archive may be a copy from elsewhere,
        and what it holds reaches proposers' prompts (and their remote APIs). UntrustedFileError for
        a link, a FIFO or an oversized file there."""
        return read_untrusted_text(self.path, relative)

    def _read_if_present(self, relative: str) -> str | None:
        try:
            return self._read(relative)
        except FileNotFoundError:
            return None

    def run_candidates(self) -> list[CandidateMeta]:
        """Every candidate the run archived so far (`run_archives`): its earlier harness phases',
        then this phase's. A phase's proposer offers nothing they already tried, and no edit that
        failed to build there."""
        earlier = [meta for path in run_archives(self.path)[:-1] for meta in committed(path)]
        return [*earlier, *self.candidates]

    def find_digest(self, digest: str) -> CandidateMeta | None:
        return next((m for m in self._metas.values() if m.digest == digest and m.status != "duplicate"), None)

    def iteration_records(self) -> list[dict[str, Any]]:
        return list(read_jsonl(self.path / ITERATIONS_FILE))

    def proposal(self, iteration: int) -> Proposal | None:
        """The proposer's recorded answer in `iteration`; None when it was not asked yet (or the
        archive predates these records)."""
        rows = [row for row in read_jsonl(self.path / PROPOSALS_FILE) if row["iteration"] == iteration]
        return Proposal.from_dict(rows[0]) if rows else None

    # -- writing ---------------------------------------------------------------------------

    def next_name(self) -> str:
        return f"c{len(self._metas):04d}"

    def staging(self, name: str) -> Path:
        """A hidden folder the evaluation writes traces into before the candidate is committed."""
        folder = self.path / f"{STAGING_PREFIX}{name}"
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def commit(self, source: HarnessSource, meta: CandidateMeta) -> None:
        """Write the candidate's files into its staging folder, then rename it into place."""
        if meta.name in self._metas:
            raise ValueError(f"candidate {meta.name} is already archived")
        staging = self.staging(meta.name)
        atomic_write_text(staging / HARNESS_FILE, source.code)
        if meta.parent in self._metas:
            atomic_write_text(staging / DIFF_FILE, self.diff(meta.parent, source.code, meta.name))
        atomic_write_json(staging / META_FILE, meta.to_dict())
        staging.rename(self.folder(meta.name))
        self._metas[meta.name] = meta
        append_jsonl(self.path / SUMMARY_FILE, meta.to_dict())
        atomic_write_json(self.path / FRONTIER_FILE, [self._frontier_row(m) for m in self.frontier()])

    def record_labels(self, labels: dict[str, dict[str, Any]]) -> None:
        """The search tasks' gold fields, so a proposer reads what a failing trace should have
        answered. A sandboxed candidate cannot read the archive (under --no-sandbox it could). A
        proposer may still copy gold into a candidate's code: that raises only its search score, so
        the phase may pick it, and only the held-out test split shows it."""
        atomic_write_json(self.path / LABELS_FILE, {**self.labels(), **labels})

    def sampling(self) -> dict[str, Any] | None:
        """The LM sampling the archive's scores were drawn at; None before it recorded one."""
        text = self._read_if_present(SAMPLING_FILE)
        return json.loads(text) if text is not None else None

    def record_sampling(self, sampling: dict[str, Any]) -> None:
        atomic_write_json(self.path / SAMPLING_FILE, sampling)

    def record_task(self, card: str) -> None:
        atomic_write_text(self.path / TASK_CARD_FILE, card)

    def record_proposal(self, iteration: int, proposal: Proposal) -> None:
        append_jsonl(self.path / PROPOSALS_FILE, {"iteration": iteration, **proposal.to_dict()})

    def record_iteration(self, record: dict[str, Any]) -> None:
        append_jsonl(self.path / ITERATIONS_FILE, record)

    def diff(self, parent: str, code: str, name: str) -> str:
        parent_code = self._read(f"{parent}/{HARNESS_FILE}")
        lines = difflib.unified_diff(
            parent_code.splitlines(keepends=True),
            code.splitlines(keepends=True),
            fromfile=f"{parent}/{HARNESS_FILE}",
            tofile=f"{name}/{HARNESS_FILE}",
        )
        return "".join(lines)

    def frontier(self) -> list[CandidateMeta]:
        return pareto_frontier(self.candidates)

    @staticmethod
    def _frontier_row(meta: CandidateMeta) -> dict[str, Any]:
        return {
            "name": meta.name,
            "mean": meta.scores.mean,
            "tokens_per_rollout": meta.cost.tokens_per_rollout,
            "mean_turns": meta.cost.mean_turns,
            "hypothesis": meta.hypothesis,
        }
