"""MetaHarness: the harness phase. Propose new harness code, validate it, score it, archive it.

Meta-Harness (arXiv 2603.28052) searches over harness *code* with a proposer
that reads an archive of every prior candidate's source, scores and raw
traces. `iterations()` is the phase API the WHALE alternation drives (the
caller decides when to stop); `compile()` runs the config's patience rule.

Every candidate of a phase runs on the same feedback tasks with the same rollout
ids (common random numbers), so score differences come from the code, not the
draw; identical sources are deduplicated by digest instead of re-evaluated.
Proposers read those tasks' traces and answers; the decision to adopt a
candidate is made on other tasks (the selection slice, optimizers.harness.selection)
by a race against the incumbent under the acceptance rule (optimizers.harness.racing),
and the phase's harness is the incumbent, not the best mean on what proposers saw.

Candidate code is untrusted. The parent only parses it (syntax, allowlist,
prompt-only checks on the syntax tree); loading it, building it from the
task's tools, the smoke tasks and the evaluation all happen in the
evaluator, by default a `SandboxedEvaluator` that runs each candidate in one
contained child process. A candidate that breaks a limit, the allowlist or
simply crashes is archived invalid with its stage and reason, scores 0, and
the search goes on.
"""

from __future__ import annotations

import functools
import itertools
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import dspy
import numpy as np
from dspy.teleprompt import Teleprompter

from optimizers.harness.archive import (
    SMOKE_FILE,
    TRACES_FILE,
    CandidateCost,
    CandidateMeta,
    CandidateScores,
    HarnessArchive,
    Proposal,
)
from optimizers.harness.config import MetaHarnessConfig, MetaHarnessReport, stop_reason
from optimizers.harness.decision import (
    decide,
    decision_record,
    record_iteration,
    recorded_iterations,
)
from optimizers.harness.racing import Decision, size_race
from optimizers.harness.selection import (
    DECISIONS_FILE,
    Slices,
    selection_folder,
    slice_sizes,
    split_search_tasks,
)
from optimizers.harness.sizing import expected_spread
from optimizers.harness.task_card import task_card
from optimizers.harness.validation import (
    CandidateRejected,
    check_evaluation,
    check_smoke,
    check_static,
    run_with_timeout,
)
from optimizers.signals import HarnessIteration
from whale_dspy.errors import BackendError, ConfigError
from whale_dspy.evaluation import EvalReport, EvalRequest
from whale_dspy.harness import HarnessProgram, HarnessSource, rename
from whale_dspy.jsonl import read_jsonl, repair_jsonl, to_jsonable
from whale_dspy.protocols import CandidateEvaluator, HarnessProposer
from whale_dspy.records import ProposerUsage, Rollout, add_counts
from whale_dspy.rollouts import task_id_of
from whale_dspy.sandbox import ALLOWED_IMPORTS, SandboxedEvaluator, SandboxLimits
from whale_dspy.seeding import derive_seed
from whale_dspy.student import as_harness, check_metric

log = logging.getLogger(__name__)

ROOT = "c0000"
"""The archive name of the incoming harness h0 (iteration 0)."""

TASK_SECONDS = 300.0
"""The default sandbox's wall clock per rollout, LM waits excluded: it catches a hung harness."""

STAGE_GRACE_S = 30.0
"""Extra seconds the parent waits past a sandbox's own limits, so the sandbox records the reason."""


def sandbox_limits(config: MetaHarnessConfig, **changes: Any) -> SandboxLimits:
    """The search's sandbox limits, sized by the config; `changes` override single limits."""
    limits = {"task_seconds": TASK_SECONDS, "candidate_seconds": config.timeout_s, "threads": config.threads}
    return SandboxLimits(**{**limits, **changes})


def sandboxed_evaluator(config: MetaHarnessConfig, **changes: Any) -> SandboxedEvaluator:
    """The default evaluator: one contained child per candidate and stage, sized by the config."""
    return SandboxedEvaluator(sandbox_limits(config, **changes))


def _scores_and_cost(report: EvalReport, rollouts: list[Rollout], smoke: list[Rollout]) -> tuple:
    per_task = {task: float(np.mean(scores)) for task, scores in report.per_task.items()}
    solved = [max(scores) >= 1.0 for scores in report.per_task.values()]
    scores = CandidateScores(
        mean=report.mean_at_k,
        per_task=per_task,
        pass_rate=float(np.mean(solved)) if solved else 0.0,
        parse_rate=report.parse_rate,
    )
    cost = CandidateCost(
        rollouts=report.rollouts + len(smoke),
        lm_calls=sum(r.turns for r in [*smoke, *rollouts]),
        prompt_tokens=report.prompt_tokens,
        completion_tokens=report.completion_tokens,
        mean_turns=report.mean_turns,
        seconds=report.seconds,
    )
    return scores, cost


SAMPLED = ("temperature", "max_tokens", "max_completion_tokens")
"""The LM settings an archive's scores depend on, beyond the harness's own (DSPy keeps an OpenAI
reasoning model's budget as max_completion_tokens)."""


def lm_sampling(lm: Any) -> dict[str, Any]:
    """The SAMPLED settings `lm` samples at, those it sets (an LM without `kwargs` sets none)."""
    kwargs = getattr(lm, "kwargs", None) or {}
    return {key: kwargs[key] for key in SAMPLED if kwargs.get(key) is not None}


def _check_sampling(archive: HarnessArchive, lm: Any) -> None:
    """An archive's scores and cached race chunks hold for the sampling they were drawn at: a search
    resumed at another completion budget or temperature would rank and race across the two, so it
    is refused. An archive with no candidate yet (a first start that failed early), or from before
    this record, takes the sampling it is resumed at."""
    sampling = lm_sampling(lm)
    recorded = archive.sampling()
    if recorded is None or not len(archive):
        archive.record_sampling(sampling)
    elif recorded != sampling:
        raise ConfigError(
            f"archive {archive.path} was sampled at {recorded}; this search samples at {sampling}: "
            "use a new archive directory for other sampling"
        )


class MetaHarness(Teleprompter):
    def __init__(
        self,
        *,
        proposer: HarnessProposer,
        metric: Callable[..., float] | None = None,
        archive_dir: str | Path | None = None,
        config: MetaHarnessConfig | None = None,
        lm: dspy.BaseLM | None = None,
        evaluator: CandidateEvaluator | None = None,
    ):
        """The harness phase: search the harness code, so a program improves without new weights.

        Used alone or as WhaleOptimizer's `harness_phase`.

        Args:
            proposer: Writes candidate harnesses from the archive (optimizers.harness.proposers).
            metric: `metric(example, prediction, trace=None) -> float`: scores each rollout
                (required alone; inside WhaleOptimizer default the optimizer's).
            archive_dir: Holds every candidate, its scores and traces (required alone; inside
                WhaleOptimizer each phase archives in the run folder's `harness/phase-NNN`).
            config: Sizes and the decision rule (default `MetaHarnessConfig()`).
            lm: The policy LM candidates run on (default the student's bound LM, else DSPy's
                configured one).
            evaluator: Scores candidates (default a sandboxed one: candidates are model-written code).
        """
        super().__init__()
        self.proposer = proposer
        self.metric = metric
        self.archive_dir = Path(archive_dir) if archive_dir is not None else None
        self.config = config or MetaHarnessConfig()
        self.lm = lm
        self.evaluator = evaluator if evaluator is not None else sandboxed_evaluator(self.config)
        self.report: MetaHarnessReport | None = None

    # -- compile: the patience rule over the phase ------------------------------------------

    def compile(self, student: dspy.Module, *, trainset: list, valset: list | None = None):
        """Search harnesses on `trainset` (the harness-search tasks); valset is not used here."""
        history: list[HarnessIteration] = []
        best, reason = None, "cannot decide"  # the search ends by itself only when it cannot decide
        for signal, program in self.iterations(student, trainset):
            history.append(signal)
            best = program
            stopped = stop_reason(history, self.config)
            if stopped:
                reason = stopped
                break
        archive = HarnessArchive(self._archive_dir(None))
        incumbent = history[-1].best_name if history else ROOT
        self.report = MetaHarnessReport(
            iterations=tuple(history),
            best=archive.get(incumbent) if incumbent in archive else None,
            h0_score=archive.get(ROOT).scores.mean if ROOT in archive else 0.0,
            archive_dir=str(archive.path),
            rollouts=sum(s.rollouts for s in history),
            proposer_calls=sum(s.proposer_calls for s in history),
            proposer_tokens=functools.reduce(add_counts, (s.proposer_tokens for s in history), 0),
            stopped=reason,
        )
        best = best or as_harness(student, examples=trainset)
        best.report = self.report
        return best

    # -- the phase API ----------------------------------------------------------------------

    def rollouts_per_iteration(self, searchset: Sequence[dspy.Example], iteration: int) -> int:
        """Worst-case rollouts of one iteration: each candidate's smoke and feedback rollouts, and
        the racers' and the incumbent's selection rollouts; iteration 0 scores the incoming harness
        (the engine lets it in only with the first decision's cost beside it)."""
        config = self.config
        feedback, selection = slice_sizes(
            len(searchset), feedback=config.tasks, selection=config.selection_tasks, least=config.smoke_tasks
        )
        racers = config.racing(config.candidates, selection=bool(selection))
        scored = config.smoke_tasks + feedback * config.rollouts_per_task
        if iteration == 0:
            return scored
        return scored * config.candidates + selection * (racers + 1) * config.rollouts_per_task

    def iterations(
        self, program: dspy.Module, searchset: Sequence[dspy.Example], *, archive_dir: Path | None = None
    ) -> Iterator[tuple[HarnessIteration, HarnessProgram]]:
        """Iteration 0 scores the incoming harness; each later one archives M new candidates and
        decides, in a race on the selection slice, whether one replaces the incumbent.

        Reopening an archive replays its recorded iterations (same signals, no
        re-evaluation) and continues where it stopped. `archive_dir` overrides the
        constructor's, so the alternation gives every harness phase its own archive.
        """
        folder = self._archive_dir(archive_dir)  # refused before any work when there is none
        student, lm, slices = self._check_inputs(program, searchset)
        archive = HarnessArchive(folder)
        self._check_root(archive, student.source)
        _check_sampling(archive, lm)
        selection_folder(archive.path).mkdir(parents=True, exist_ok=True)
        repair_jsonl(selection_folder(archive.path) / DECISIONS_FILE)  # a kill's torn last row
        slices = slices.as_recorded(selection_folder(archive.path), searchset)
        slices.record(selection_folder(archive.path))
        tasks = slices.feedback
        archive.record_labels({task_id_of(task): gold_fields(task) for task in tasks})
        archive.record_task(task_card(student.signature, student.tools_factory(tasks[0]), self.metric))
        records = recorded_iterations(archive)
        incumbent = ROOT
        for signal in records:
            incumbent = signal.best_name
            yield signal, self._program(student, archive, incumbent)
        for iteration in itertools.count(len(records)):
            if not self._can_decide(archive, iteration, slices):
                return
            started = time.perf_counter()
            sources, spent, error = self._sources(archive, student.source, iteration)
            for source in sources:
                self._add_candidate(archive, source, iteration, student, lm, tasks)
            measure = functools.partial(self._measure, archive, student, lm)
            decision, race_cost = decide(archive, iteration, incumbent, slices, self.config, measure)
            if decision is not None and decision.adopted is not None:
                incumbent = decision.adopted
            signal = self._signal(archive, iteration, incumbent, decision, race_cost, spent, started)
            record_iteration(archive, signal, [*spent.failures, *([error] if error else [])])
            yield signal, self._program(student, archive, incumbent)

    def _archive_dir(self, given: Path | None) -> Path:
        folder = given if given is not None else self.archive_dir
        if folder is None:
            raise ConfigError(
                "MetaHarness needs archive_dir= when it runs alone (a WhaleOptimizer gives its own)"
            )
        return Path(folder)

    def _check_inputs(self, student: dspy.Module, searchset: Sequence[dspy.Example]):
        if self.metric is None:
            raise ConfigError("MetaHarness needs metric= when it runs alone (a WhaleOptimizer gives its own)")
        check_metric(self.metric)
        program = as_harness(student, examples=searchset)
        lm = self.lm or program.bound_lm or dspy.settings.lm
        if lm is None:
            raise ConfigError("no LM: pass lm=, bind one to the program, or dspy.configure(lm=...)")
        if len(searchset) < self.config.smoke_tasks or not searchset:
            raise ConfigError(
                f"need at least one search task and smoke_tasks={self.config.smoke_tasks}; "
                f"got {len(searchset)}"
            )
        config = self.config
        slices = split_search_tasks(
            searchset,
            feedback=config.tasks,
            selection=config.selection_tasks,
            seed=config.seed,
            least=config.smoke_tasks,
        )
        if config.selection_tasks and len(slices.selection) < config.selection_tasks:
            log.info(
                "the search set has %d tasks: %d for feedback, %d to decide on (%d asked for)",
                len(searchset),
                len(slices.feedback),
                len(slices.selection),
                config.selection_tasks,
            )
        return program, lm, slices

    def _can_decide(self, archive: HarnessArchive, iteration: int, slices: Slices) -> bool:
        """Whether the phase's next race could adopt anything: a slice on which no lead within the
        score range [0, 1] could clear the rule (a search set of a few tasks) ends the phase before
        its proposals spend a rollout, so the run's budget goes elsewhere."""
        config, rule = self.config, self.config.decision_rule()
        deciding = slices.selection if config.selection_tasks else slices.feedback
        racers = config.racing(config.candidates, selection=bool(config.selection_tasks))
        spread = expected_spread(archive.path, config.spread_prior, iteration=iteration)
        size = size_race(
            rule, len(deciding), racers, start=config.race_start, spread=spread.value, source=spread.source
        )
        if size.adoptable < 1.0:
            return True
        log.warning(
            "the harness phase ends: %s; give more search tasks (compile's valset) for harness decisions",
            size.said(),
        )
        return False

    def _check_root(self, archive: HarnessArchive, source: HarnessSource) -> None:
        if ROOT in archive and archive.get(ROOT).digest != source.digest:
            raise ConfigError(
                f"archive {archive.path} was started from another harness than {source.name!r}; "
                "use a new archive directory for a new phase"
            )

    def _sources(
        self, archive: HarnessArchive, root: HarnessSource, iteration: int
    ) -> tuple[list[HarnessSource], ProposerUsage, str | None]:
        """What this iteration still has to evaluate, what proposing it cost, and the proposer's
        error. The proposer's answer is recorded before any of it is evaluated, so a resumed
        iteration replays it (even one shorter than asked for) instead of asking again; a proposer
        that raises yields an empty iteration, unless its server died (BackendError ends the search)."""
        done = sum(1 for meta in archive.candidates if meta.iteration == iteration)
        if iteration == 0:
            return ([] if done else [root]), ProposerUsage(0, 0), None
        proposal = archive.proposal(iteration)
        if proposal is None:
            wanted = self.config.candidates - done  # `done` > 0 only in an archive without proposals
            if wanted <= 0:
                return [], ProposerUsage(0, 0), None
            proposal = self._propose(archive, wanted, iteration)
            archive.record_proposal(iteration, proposal)
        return list(proposal.sources[done:]), proposal.usage, proposal.error

    def _propose(self, archive: HarnessArchive, wanted: int, iteration: int) -> Proposal:
        """Ask the proposer for `wanted` sources; one that raises answers none, with its error."""
        before = self.proposer.usage()
        try:
            sources, error = list(self.proposer.propose(archive, wanted))[:wanted], None
        except BackendError:
            raise  # its server died: an empty iteration would record a search that found nothing
        except Exception as failure:
            log.exception("iteration %d: the proposer failed; the iteration is empty", iteration)
            sources, error = [], f"{type(failure).__name__}: {failure}"
        return Proposal(tuple(sources), self.proposer.usage().since(before), error)

    # -- one candidate ----------------------------------------------------------------------

    def _add_candidate(self, archive, source, iteration, student, lm, tasks) -> CandidateMeta:
        name = archive.next_name()
        source = rename(source if iteration == 0 else source.unvouched(), name)  # a proposal is model-written
        base = CandidateMeta(
            name=name,
            iteration=iteration,
            parent=source.parent,
            hypothesis=source.hypothesis or ("incoming harness" if iteration == 0 else ""),
            proposer="incoming" if iteration == 0 else self.proposer.label,
            digest=source.digest,
            status="valid",
        )
        duplicate = archive.find_digest(source.digest)
        if duplicate is not None:
            meta = replace(
                base, status="duplicate", stage="duplicate", error=f"same code as {duplicate.name}"
            )
        else:
            meta = self._validate_and_evaluate(archive, base, source, student, lm, tasks)
        archive.commit(source, meta)
        log.info(
            "%s (%s): %s%s %.3f %s",
            name,
            meta.proposer,
            meta.status,
            f" ({meta.reason})" if meta.reason else "",
            meta.scores.mean,
            meta.error or "",
        )
        return meta

    def _validate_and_evaluate(self, archive, base, source, student, lm, tasks) -> CandidateMeta:
        """Static checks here (syntax tree only); loading, building and running in the evaluator."""
        staging = archive.staging(base.name)
        try:
            check_static(
                source, prompt_only_parent=self._prompt_parent(archive, source), allowed=self._allowed()
            )
            program = student.with_source(source)  # lazy: nothing of the candidate runs here
            smoke = []
            if self.config.smoke_tasks:
                smoke = self._run(program, tasks[: self.config.smoke_tasks], lm, 1, staging / SMOKE_FILE)[1]
            check_smoke(smoke)
            report, rollouts = self._run(
                program, tasks, lm, self.config.rollouts_per_task, staging / TRACES_FILE
            )
            check_evaluation(rollouts)
        except CandidateRejected as rejected:
            spent = [
                Rollout.from_dict(row) for f in (SMOKE_FILE, TRACES_FILE) for row in read_jsonl(staging / f)
            ]
            return replace(
                base,
                status="invalid",
                stage=rejected.stage,
                reason=rejected.reason,
                error=str(rejected),
                cost=CandidateCost(
                    rollouts=len(spent),
                    lm_calls=sum(r.turns for r in spent),
                    completion_tokens=sum(r.completion_tokens for r in spent),
                ),
            )
        scores, cost = _scores_and_cost(report, rollouts, smoke)
        return replace(base, scores=scores, cost=cost)

    def _prompt_parent(self, archive: HarnessArchive, source: HarnessSource) -> str | None:
        if not self.config.prompt_only or ROOT not in archive:
            return None
        parent = source.parent if source.parent in archive else ROOT
        return archive.source(parent).code

    def _limits(self) -> SandboxLimits | None:
        return self.evaluator.limits

    def _allowed(self) -> frozenset[str]:
        """The sandbox's allowlist when the evaluator has one, else the project's."""
        limits = self._limits()
        return limits.allowed_imports if limits is not None else ALLOWED_IMPORTS

    def _stage_timeout(self) -> float:
        """The parent's guard per evaluator call; a sandbox's own limits fire first and say why."""
        limits = self._limits()
        if limits is None:
            return self.config.timeout_s
        return max(self.config.timeout_s, limits.candidate_seconds) + limits.startup_seconds + STAGE_GRACE_S

    def _run(self, program, examples, lm, k: int, trace_path: Path, namespace: str | None = None):
        """One guarded evaluator call; the namespace is shared so candidates see the same draws."""

        def call():
            try:
                return self.evaluator.evaluate(
                    program,
                    EvalRequest(
                        examples,
                        metric=self.metric,
                        lm=lm,
                        k=k,
                        namespace=namespace or f"meta-harness/{derive_seed(self.config.seed)}",
                        trace_path=trace_path,
                        sampling={"temperature": self.config.temperature},
                    ),
                )
            except (ConfigError, BackendError):
                raise  # the caller's setup (the signature, the LM) or a dead server, not the candidate
            except Exception as error:
                message = f"{type(error).__name__}: {error}"
                raise CandidateRejected("evaluation", message, "crash") from error

        return run_with_timeout(call, self._stage_timeout(), f"evaluation of {program.source.name}")

    def _measure(self, archive, student, lm, name, examples, trace, namespace) -> list[Rollout]:
        """One contender of a race (optimizers.harness.decision.Measure)."""
        program = self._program(student, archive, name)
        return self._run(program, examples, lm, self.config.rollouts_per_task, trace, namespace)[1]

    # -- signals ----------------------------------------------------------------------------

    def _signal(self, archive, iteration, incumbent, decision: Decision | None, race_cost, spent, started):
        metas = [m for m in archive.candidates if m.iteration == iteration]
        valid = [m.scores.mean for m in metas if m.valid]
        return HarnessIteration(
            iteration=iteration,
            best_name=incumbent,
            best_score=archive.get(incumbent).scores.mean if incumbent in archive else 0.0,
            iteration_best_score=max(valid, default=0.0),
            candidates=len(metas),
            valid=len(valid),
            rollouts=sum(m.cost.rollouts for m in metas) + (race_cost.rollouts if race_cost else 0),
            proposer_calls=spent.calls,
            proposer_tokens=spent.tokens,
            seconds=time.perf_counter() - started,
            lm_calls=sum(m.cost.lm_calls for m in metas) + (race_cost.lm_calls if race_cost else 0),
            completion_tokens=sum(m.cost.completion_tokens for m in metas)
            + (race_cost.completion_tokens if race_cost else 0),
            decision=None if decision is None else decision_record(decision, race_cost),
        )

    @staticmethod
    def _program(student: HarnessProgram, archive: HarnessArchive, name: str) -> HarnessProgram:
        """A candidate as a program; the incoming harness keeps its own (vouched) source."""
        source = student.source if name == ROOT or name not in archive else archive.source(name)
        return student.with_source(source)


def gold_fields(task: dspy.Example) -> dict[str, Any]:
    """What a task's verifier knows and its harness does not: every field but the inputs and the id."""
    return to_jsonable({key: value for key, value in task.labels().items() if key != "task_id"})


__all__ = [
    "ROOT",
    "MetaHarness",
    "MetaHarnessConfig",
    "MetaHarnessReport",
    "sandbox_limits",
    "sandboxed_evaluator",
    "stop_reason",
]
