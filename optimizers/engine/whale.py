"""WhaleOptimizer: alternate weight phases (RFT) and harness phases (Meta-Harness) on one rollout budget.

The engine pulls one unit at a time from a phase's generator (a weight step or
a harness iteration) after asking the schedule whether the phase is over and
the budget whether the unit fits, records it as an event, checkpoints, and
evaluates on the held-out test tasks every `eval_every` rollouts. The
baselines are methods of this same engine (optimizers.engine.methods), so they share
its budget rule and its accounting.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import dspy
from dspy.teleprompt import Teleprompter

from optimizers.engine.auto import AutoRequest
from optimizers.engine.budget import Budget, Declared
from optimizers.engine.checkpoint import (
    EVALUATION,
    PHASE_ENDED,
    PHASE_STARTED,
    RUN_FINISHED,
    RUN_RESUMED,
    RUN_STARTED,
    Recorder,
    RunState,
    initial_state,
    load_harness,
    load_state,
)
from optimizers.engine.compile_sets import RunSets, fingerprint, run_sets
from optimizers.engine.methods import HARNESS, WEIGHT, Method, get_method
from optimizers.engine.phases import HarnessDriver, HarnessPhase, PhaseDriver, WeightDriver, WeightPhase
from optimizers.engine.report import report_from_state
from optimizers.engine.schedules import Schedule, as_recorded_schedule
from optimizers.engine.shared_evals import SharedEvaluations
from whale_dspy.defaults import DEFAULT_EVAL_K, DEFAULT_TEMPERATURE, DEFAULT_THREADS
from whale_dspy.errors import ConfigError
from whale_dspy.evaluation import EvalRequest
from whale_dspy.harness import HarnessProgram
from whale_dspy.jsonl import repair_jsonl
from whale_dspy.progress import heartbeat
from whale_dspy.progress import log as progress_log
from whale_dspy.protocols import CandidateEvaluator, InferenceBackend, ensure_served
from whale_dspy.provenance import environment
from whale_dspy.records import AdapterRef
from whale_dspy.rollouts import Metric
from whale_dspy.rundir import CONFIG_FILE, RunDir, sole_writer
from whale_dspy.sandbox import ContainedEvaluator
from whale_dspy.student import as_harness, check_metric

log = logging.getLogger(__name__)

EVAL_NAMESPACE = "whale"
"""One rollout-id namespace for every checkpoint's test evaluation: common random numbers."""


CHECKPOINT_SAMPLING = {"temperature": DEFAULT_TEMPERATURE}
"""What a checkpoint's mean@k is sampled under when the run's `sampling` does not say: k samples
of one task must differ (a served LM's own default is greedy)."""


class WhaleOptimizer(Teleprompter):
    """Joint harness-weight optimization; `compile` returns the final program with `.report`."""

    def __init__(
        self,
        *,
        metric: Metric,
        auto: str | None = None,
        backend: InferenceBackend | None = None,
        run_dir: str | Path | None = None,
        schedule: Schedule | None = None,
        budget: int | None = None,
        eval_every: int | None = None,
        weight_phase: WeightPhase | None = None,
        harness_phase: HarnessPhase | None = None,
        method: str | Method = "whale",
        eval_k: int = DEFAULT_EVAL_K,
        eval_threads: int = DEFAULT_THREADS,
        evaluator: CandidateEvaluator | None = None,
        config: dict[str, Any] | None = None,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        shared_evals: SharedEvaluations | None = None,
        sampling: dict[str, Any] | None = None,
        budget_unit: str = "rollouts",
    ):
        """Two forms, so a first try needs only a metric and a study can fix every part of the run.

        The short form, `WhaleOptimizer(metric=metric, auto="light")`, is built when `compile` finds
        the backend; it prints a line per weight step, harness decision and checkpoint, tracks the
        valset when no `track` is given, and ends with `report.summary()`. The explicit form gives
        the phases, schedule, budget and evaluation cadence (optimizers.engine.assembly builds them
        from a WhaleConfig, as the short form and `whale run` do).

        Args:
            metric: `metric(example, prediction, trace=None) -> float`, passed once: the phases get it.
            auto: "light", "medium" or "heavy" (optimizers.engine.auto): budget, schedule, phase
                sizes and sampling for this kind of machine; default None (the explicit form).
            backend: The server; default (short form only) the student's LM's WhaleProvider's.
            run_dir: Where config, events, checkpoints, adapters and the harness archive go; required
                in the explicit form; default (short form) `whale_runs/<program>-<time>` under the
                working directory, said at the start.
            schedule: When each phase runs (optimizers.engine.schedules); required in the explicit form.
            budget: The run's budget in `budget_unit`s; required in the explicit form.
            eval_every: A checkpoint evaluation every this many budget units; required in the
                explicit form.
            weight_phase: The weight phase, where `method` needs one.
            harness_phase: The harness phase, where `method` needs one ("whale" needs both;
                optimizers.engine.methods).
            method: A method name or a Method (default "whale"); explicit form only.
            eval_k: Samples per tracked task at each checkpoint (default 8); explicit form only.
            eval_threads: The default evaluator's threads (default 8); explicit form only.
            evaluator: Scores the checkpoints (default a contained evaluator with `eval_threads`);
                explicit form only.
            config: Extra fields recorded in the run's config.json; explicit form only.
            on_event: Called with each event recorded.
            shared_evals: Evaluations other runs already measured; explicit form only.
            sampling: LM request settings for every program the run binds and every checkpoint
                evaluation, so each checkpoint is measured under one completion budget; default the
                weight phase's own (`WeightPhase.sampling()`).
            budget_unit: What `budget` counts: "rollouts" (default), policy LM "calls" or
                completion "tokens"; explicit form only.

        Raises:
            ConfigError: `auto` given with any of schedule, budget, eval_every, weight_phase,
                harness_phase or sampling; the explicit form missing backend, schedule, budget,
                run_dir or eval_every; a bad method, budget, `eval_every` or `eval_k`; or no phase
                of a kind `method` needs.
        """
        super().__init__()
        self.metric, self.report = metric, None
        self.auto: AutoRequest | None = None
        if auto is not None:
            given = {"schedule": schedule, "budget": budget, "eval_every": eval_every}
            given |= {"weight_phase": weight_phase, "harness_phase": harness_phase, "sampling": sampling}
            chosen = sorted(name for name, value in given.items() if value is not None)
            if chosen:
                raise ConfigError(f"auto={auto!r} chooses {', '.join(chosen)}: give auto or them, not both")
            self.auto = AutoRequest(auto, backend, run_dir, on_event)
            return
        missing = [name for name, value in (("backend", backend), ("schedule", schedule), ("budget", budget),
                   ("run_dir", run_dir), ("eval_every", eval_every)) if value is None]  # fmt: skip
        if missing:
            raise ConfigError(f"the explicit form needs {', '.join(missing)} (or pass auto=...)")
        self._setup(
            backend=backend, metric=metric, schedule=schedule, budget=budget, run_dir=run_dir,
            eval_every=eval_every, weight_phase=weight_phase, harness_phase=harness_phase, method=method,
            eval_k=eval_k, evaluator=evaluator or ContainedEvaluator.for_long_evaluations(eval_threads),
            config=config, on_event=on_event, shared_evals=shared_evals, sampling=sampling,
            budget_unit=budget_unit,
        )  # fmt: skip

    def _setup(
        self,
        *,
        backend: InferenceBackend,
        metric: Metric,
        schedule: Schedule,
        budget: int,
        run_dir: str | Path,
        eval_every: int,
        weight_phase: WeightPhase | None,
        harness_phase: HarnessPhase | None,
        method: str | Method,
        eval_k: int,
        evaluator: CandidateEvaluator,
        config: dict[str, Any] | None,
        on_event: Callable[[dict[str, Any]], None] | None,
        shared_evals: SharedEvaluations | None,
        sampling: dict[str, Any] | None,
        budget_unit: str,
    ) -> None:
        self.method = get_method(method) if isinstance(method, str) else method
        # One sampling for every checkpoint: the weight phase's where the run names none.
        self.sampling = {**(weight_phase.sampling() if weight_phase else {}), **(sampling or {})}
        # Before anything is measured a rollout costs at most calls of the run's completion budget.
        self.budget = Budget(budget, budget_unit, **_first_tokens(self.sampling))
        if not (type(eval_every) is int and eval_every >= 1) or not (type(eval_k) is int and eval_k >= 1):
            raise ConfigError(f"eval_every and eval_k must be ints >= 1, got {eval_every!r}, {eval_k!r}")
        phases = {WEIGHT: weight_phase, HARNESS: harness_phase}
        missing = [kind for kind in sorted(self.method.needs) if phases[kind] is None]
        if missing:
            raise ConfigError(f"method {self.method.name!r} needs a {' and a '.join(missing)} phase")
        self.backend, self.metric, self.schedule = backend, metric, schedule
        for phase in (weight_phase, harness_phase):  # the metric is passed once: phases take it here
            if phase is not None and phase.metric is None:
                phase.metric = metric
        self.weight_phase, self.harness_phase = weight_phase, harness_phase
        self.run_dir, self.eval_every, self.eval_k = Path(run_dir), eval_every, eval_k
        # Searched harnesses are model-written code: checkpoint evaluations score them contained.
        self.evaluator = evaluator
        self.extra_config, self.on_event = dict(config or {}), on_event
        self.shared_evals = shared_evals  # base-weight evaluations other runs already measured

    def compile(
        self,
        student: dspy.Module,
        *,
        trainset: Sequence[dspy.Example],
        valset: Sequence[dspy.Example] | None = None,
        track: Sequence[dspy.Example] | None = None,
        track_name: str = "test",
        resume: bool = False,
        searchset: Sequence[dspy.Example] | None = None,
        testset: Sequence[dspy.Example] | None = None,
    ) -> HarnessProgram:
        """Run (or continue) the alternation until the budget is spent; the result is a HarnessProgram.

        Args:
            student: Any dspy.Module (see `whale_dspy.student`).
            trainset: The weight phase's tasks.
            valset: The harness search's tasks (default: half of `trainset`, chosen by task id, when
                the method searches harnesses).
            track: Held-out tasks scored every `eval_every` rollouts and at the end, the run's curve
                (default none; the short form then scores the valset at the start and the end).
            track_name: What the `track` split is called in the records (default "test"; "val" for
                the validation tasks a study selects on).
            resume: Continue the run recorded in `run_dir` (default False).
            searchset: Deprecated spelling of `valset` (see optimizers.engine.compile_sets).
            testset: Deprecated spelling of `track`.

        Returns:
            The final program, with the run's WhaleReport as `.report`.

        Raises:
            ConfigError: An empty `trainset` or `valset` the method needs; `resume` where `run_dir`
                holds no run; a run folder another process is writing or started with another
                configuration; or the short form finding no backend.
        """
        short, watch = self.auto is not None, contextlib.nullcontext()
        if short:  # the short form: built now that the student names its backend
            kwargs, progress = self.auto.optimizer_kwargs(student, self.metric)
            self._setup(**kwargs)
            self.auto, watch = None, heartbeat(progress.doing)
            if track is None and testset is None:  # a user asks whether the program got better:
                track, track_name = valset if valset is not None else searchset, "val"
                self.eval_every = max(self.eval_every, self.budget.amount)  # at the start and the end
        sets = run_sets(
            trainset, valset, track, track_name, searchset=searchset, testset=testset,
            searches=HARNESS in self.method.needs,
        )  # fmt: skip
        data = self._check_data(sets)
        student = as_harness(student, examples=[*data.trainset, *data.searchset])
        if resume and not (self.run_dir / CONFIG_FILE).exists():  # before the lock makes the folder
            raise ConfigError(f"nothing to resume: {self.run_dir} holds no run (no config.json)")
        with sole_writer(self.run_dir), watch, contextlib.ExitStack() as scope:
            recorder = self._open(student, data)
            if self.weight_phase is not None:  # harness-only methods have none
                scope.enter_context(self.weight_phase.writing_into(recorder.run))
            program = self._restore(student, recorder.run, recorder.state)
            self._evaluate(recorder, program, data, force=not recorder.state.curve)
            while not recorder.state.finished:
                program = self._run_phase(recorder, program, data)
            self._evaluate(recorder, program, data, force=True)
        self.report = report_from_state(recorder.state, self._config(student, data), recorder.run.path)
        program.report = self.report
        if short:
            progress_log.info("done:\n%s", self.report.summary().text())
        return program

    # -- setup ---------------------------------------------------------------------------------

    def _check_data(self, sets: RunSets) -> RunSets:
        check_metric(self.metric)
        if WEIGHT in self.method.needs and not sets.trainset:
            raise ConfigError(f"method {self.method.name!r} needs a non-empty trainset for the weight phase")
        if HARNESS in self.method.needs and not sets.searchset:
            raise ConfigError(
                f"method {self.method.name!r} needs a non-empty searchset (compile's valset) "
                "for the harness phase"
            )
        return sets

    def _config(self, student: HarnessProgram, data: RunSets) -> dict[str, Any]:
        """What a resumed run must share with the original; RunDir refuses any difference."""
        return {
            "method": self.method.to_dict(),
            "schedule": self.schedule.to_dict(),
            "budget": self.budget.amount,
            **({"budget_unit": self.budget.unit} if self.budget.unit != "rollouts" else {}),
            "eval_every": self.eval_every,
            "eval_k": self.eval_k,
            "sampling": self.sampling,
            "student": {"name": student.source.name, "digest": student.source.digest},
            "data": data.fingerprints(),
            **self.extra_config,
        }

    def _open(self, student: HarnessProgram, data: RunSets) -> Recorder:
        recorded = RunDir(Path(self.run_dir)).config()
        self.schedule = as_recorded_schedule(self.schedule, recorded and recorded.get("schedule"))
        run = RunDir.open(self.run_dir, self._config(student, data))
        repair_jsonl(run.events_path)  # a torn last line (kill -9) must not precede new events
        state = load_state(run, initial_state(run, student.source))
        if state.adapter_ref is not None:  # a run folder restored on another machine holds it elsewhere
            here = run.adapter_here(state.adapter_ref, self.backend.base_model)
            state = dataclasses.replace(state, adapter=dataclasses.asdict(here))
        recorder = Recorder(run, state, self.on_event)
        if recorder.state.finished:  # reopened for its program and report (a comparison passing over it)
            return recorder  # nothing runs, nothing is recorded
        recorder.record(
            RUN_RESUMED if recorder.state.events else RUN_STARTED,
            rollouts=recorder.state.spend.rollouts,
            spent=self.budget.spent(recorder.state.spend),  # in the budget's unit
            served_model=self.backend.served_model(),  # what ran, on this machine, this time
            serving=self.backend.serving(),
            environment=environment(),
        )
        return recorder

    def _restore(self, student: HarnessProgram, run: RunDir, state: RunState) -> HarnessProgram:
        """The current harness bound to the current adapter, re-served if this server lacks it."""
        return self._bind(student.with_source(load_harness(run, state.harness)), state.adapter_ref)

    def _bind(self, program: HarnessProgram, adapter: AdapterRef | None) -> HarnessProgram:
        if adapter is not None:
            ensure_served(self.backend, adapter)
        name = adapter.name if adapter else None
        return program.with_lm(self.backend.lm(name, **self.sampling), adapter_name=name)

    def _resampled(self, program: HarnessProgram) -> HarnessProgram:
        """A phase's program back under the run's sampling (a weight phase binds its own), so the
        checkpoint evaluation and the next phase see the same completion budget as the first."""
        return program.with_lm(program.bound_lm.copy(**self.sampling), adapter_name=program.adapter_name)

    # -- phases --------------------------------------------------------------------------------

    def _run_phase(self, recorder: Recorder, program: HarnessProgram, data: RunSets) -> HarnessProgram:
        """Open (or continue) the next phase, drive it unit by unit, and close it."""
        state = recorder.state
        kind = self.method.phase_at(state.position)
        if kind is None:
            recorder.record(RUN_FINISHED, reason="method complete")
            return program
        if _starved(state.phases, len(self.method.sequence)):
            # read from the state, so a run killed right after that phase ended finishes the same way
            recorder.record(RUN_FINISHED, reason="budget spent")
            return program
        cycle = self.method.cycle_of(state.position)
        if not state.phase_open:
            recorder.record(
                PHASE_STARTED, phase=kind, position=state.position, cycle=cycle, harness=state.harness
            )
        program, reason = self._drive(recorder, program, self._driver(kind, data, recorder.run), data)
        recorder.record(PHASE_ENDED, phase=kind, cycle=cycle, reason=reason)
        return program

    def _drive(
        self, recorder: Recorder, program: HarnessProgram, driver: PhaseDriver, data: RunSets
    ) -> tuple[HarnessProgram, str]:
        stream = None
        try:
            while (reason := self._stop_reason(recorder.state, driver)) is None:
                stream = stream or driver.units(program, recorder.state)
                item = next(stream, None)
                if item is None:
                    return program, "exhausted"
                signal, program = item[0], self._resampled(item[1])
                if driver.counted(signal, recorder.state):
                    continue  # replayed from the phase's own record on resume: already counted
                fields = driver.recorded_with(recorder.run, program)
                declared = self._declared(driver, recorder.state)
                recorder.record(driver.event, signal=signal.to_dict(), **declared, **fields)
                self._evaluate(recorder, program, data)
            return program, reason
        finally:
            if stream is not None:
                stream.close()

    def _declared(self, driver: PhaseDriver, state: RunState) -> dict[str, Any]:
        """What the budget let a unit in at: its worst-case rollouts and their cost in the budget's
        unit, so its overspend is counted in both."""
        rollouts = driver.unit_cost(state)
        cost = Declared(self.budget.unit, self.budget.cost(rollouts, state.spend))
        return {"declared": rollouts, "declared_cost": cost.to_dict()}

    def _stop_reason(self, state: RunState, driver: PhaseDriver) -> str | None:
        if driver.stalled(state):
            return "no candidates"
        if self.method.repeat and driver.done(state):
            return "schedule"
        cap = self.budget.cap(self.method.share_of(driver.kind))
        cost = self.budget.cost(driver.admission(state), state.spend)
        if not Budget.fits(self.budget.spent(state.spend), cost, cap):
            return "budget" if cap == self.budget.amount else "stage share"
        return None

    def _driver(self, kind: str, data: RunSets, run: RunDir) -> PhaseDriver:
        if kind == WEIGHT:
            return WeightDriver(self.weight_phase, data.trainset, self.schedule, self.method)
        return HarnessDriver(self.harness_phase, data.searchset, self.schedule, run)

    # -- evaluation ----------------------------------------------------------------------------

    def _evaluate(
        self, recorder: Recorder, program: HarnessProgram, data: RunSets, *, force: bool = False
    ) -> None:
        """Test mean@k at this many rollouts, when due; never charged to the optimization budget."""
        state = recorder.state
        spent = state.spend.rollouts
        if data.evalset is None or (not force and spent < state.next_eval):
            return
        if state.curve and state.curve[-1]["rollouts"] == spent:
            return
        trace = recorder.run.subdir("evals") / f"{data.eval_split}-{spent:08d}.jsonl"
        trace.unlink(missing_ok=True)  # an evaluation interrupted by a crash starts over
        namespace = f"{EVAL_NAMESPACE}-{data.eval_split}"
        key = self._shared_key(program, data, namespace)
        with self.shared_evals.claim(key) if key is not None else contextlib.nullcontext():
            fields = self.shared_evals.get(key, trace) if key is not None else None
            if fields is not None:  # measured by another run: this run spent no rollouts or time on it
                fields.update(eval_rollouts=0, eval_calls=0, eval_tokens=0, seconds=0.0, shared=key)
            else:
                fields = self._measure(program, data, namespace, trace)
                if key is not None:
                    self.shared_evals.put(key, fields, trace)
        recorder.record(EVALUATION, rollouts=spent, next_eval=self._next_eval(spent), **fields)

    def _measure(self, program: HarnessProgram, data: RunSets, namespace: str, trace: Path) -> dict[str, Any]:
        """Run the evaluation: the fields an evaluation event records."""
        result, _ = self.evaluator.evaluate(
            program,
            EvalRequest(
                data.evalset,
                metric=self.metric,
                lm=program.bound_lm,
                k=self.eval_k,
                namespace=namespace,
                trace_path=trace,
                sampling={**CHECKPOINT_SAMPLING, **self.sampling},
            ),
        )
        return dict(
            mean_at_k=result.mean_at_k,
            ci_low=result.ci_low,
            ci_high=result.ci_high,
            pass_at_k=result.pass_at_k,
            parse_rate=result.parse_rate,
            k=result.k,
            tasks=result.tasks,
            eval_rollouts=result.rollouts,
            eval_calls=round(result.mean_turns * result.rollouts),
            eval_tokens=result.completion_tokens,
            split=data.eval_split,
            per_task=result.per_task,
            seconds=result.seconds,
            truncated_calls=result.truncated_calls,
            harness=program.source.name,
            adapter=program.adapter_name,
        )

    def _shared_key(self, program: HarnessProgram, data: RunSets, namespace: str) -> str | None:
        """The shared-evaluation key of a base-weight program; None when nothing is shared."""
        if self.shared_evals is None or program.adapter_name is not None:
            return None
        return self.shared_evals.key(
            harness=program.source.digest,
            tasks=fingerprint(data.evalset),
            k=self.eval_k,
            namespace=namespace,
            lm=program.bound_lm,
        )

    def _next_eval(self, spent: int) -> int:
        return (spent // self.eval_every + 1) * self.eval_every


def _starved(phases: Sequence[dict[str, Any]], kinds: int) -> bool:
    """Whether the run can spend nothing more: the last phase of each kind got no unit, and the
    budget stopped at least one of them. A harness phase that cannot afford a decision (or cannot
    decide at all) leaves what is left to the next weight phase, which may still fit steps."""
    last = phases[-kinds:]
    empty = len(last) == kinds and all(p["units"] == 0 for p in last)
    return empty and any(p["reason"] == "budget" for p in last)


def _first_tokens(sampling: dict[str, Any]) -> dict[str, int]:
    """The completion budget per LM call the run binds its programs under, where it names one
    (else the served LM's own default holds, as Budget's does)."""
    return {"max_tokens": int(sampling["max_tokens"])} if sampling.get("max_tokens") else {}
