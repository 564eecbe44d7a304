"""The weight phase: online rejection-sampling fine-tuning (RFT) of a LoRA adapter under a harness.

Each step samples k rollouts per task with the current harness and adapter,
keeps the ones the verifier scores above the threshold, trains a new adapter
on every LM call of those rollouts (starting from the current adapter), loads
it into the server under a new versioned name, and rebinds the harness to it.

Failure policy: a step with no accepted rollout trains nothing and is recorded
as skipped. A failed training (TrainingError) or a failed load (BackendError)
is recorded with its error, the previous adapter stays served and bound, and
the loop goes on: one crash should not throw away an alternation's progress.
A load on a server that reports itself down is raised instead: the run resumes on a new server.
After `max_failures` such failures in a row the error is raised, because a
trainer that keeps failing is broken, and retrying it only burns rollouts.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import secrets
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import dspy
from dspy.teleprompt import Teleprompter

from optimizers.signals import WeightStep
from optimizers.weights.config import RFTConfig
from optimizers.weights.epochs import EpochBatches
from optimizers.weights.sft_from_rollouts import accepted, sft_examples
from whale_dspy.errors import BackendError, ConfigError, TrainingError
from whale_dspy.evaluation import EvalRequest
from whale_dspy.harness import HarnessProgram
from whale_dspy.protocols import (
    CandidateEvaluator,
    InferenceBackend,
    WeightTrainer,
    ensure_served,
    reports_down,
)
from whale_dspy.provenance import environment
from whale_dspy.records import AdapterRef, Rollout, TrainResult
from whale_dspy.rollouts import Metric
from whale_dspy.rundir import RunDir
from whale_dspy.sandbox import ContainedEvaluator
from whale_dspy.student import as_harness, check_metric

log = logging.getLogger(__name__)

STEP_EVENT = "rft_step"
STARTED_EVENT, RESUMED_EVENT = "rft_started", "rft_resumed"


@dataclass(frozen=True)
class RFTReport:
    """What `compile` did: one signal record per step and the adapter the program ends on."""

    steps: tuple[WeightStep, ...]
    final_adapter: AdapterRef | None
    rollouts: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": [s.to_dict() for s in self.steps],
            "final_adapter": None if self.final_adapter is None else vars(self.final_adapter),
            "rollouts": self.rollouts,
            "seconds": self.seconds,
        }


@dataclass(frozen=True)
class _Outcome:
    """A step's training result, or why nothing new is served."""

    result: TrainResult | None = None
    skipped: str | None = None
    error: Exception | None = None
    load_seconds: float = 0.0


def with_task_ids(examples: Sequence[dspy.Example]) -> list[dspy.Example]:
    """Give examples without a `task_id` one from their position, so rollout ids stay distinct."""
    return [
        e if e.get("task_id") is not None else e.copy(task_id=f"train-{i}") for i, e in enumerate(examples)
    ]


class RejectionSamplingFinetune(Teleprompter):
    """Online RFT: `steps()` is the step-level API the alternation drives; `compile` runs `config.steps`."""

    def __init__(
        self,
        *,
        backend: InferenceBackend,
        trainer: WeightTrainer,
        metric: Metric | None = None,
        config: RFTConfig | None = None,
        run_dir: RunDir | None = None,
        base: str | None = None,
        evaluator: CandidateEvaluator | None = None,
    ):
        """The weight phase: train on the policy's own passing rollouts, so the weights learn the task.

        Args:
            backend: The server that samples and serves each adapter.
            trainer: Trains each step's LoRA adapter (LoraTrainer; FakeTrainer in tests).
            metric: `metric(example, prediction, trace=None) -> float`: a rollout is trained on when
                it scores above `config.accept_threshold` (required alone; inside WhaleOptimizer
                default the optimizer's).
            config: Sizes and sampling (default `RFTConfig()`).
            run_dir: Where adapters, traces and step events are written (default: the folder of the
                WhaleOptimizer run it is part of; alone, a temporary folder).
            base: The base model path the trainer loads (default the backend's `base_model`).
            evaluator: Runs the sampling (default a ContainedEvaluator with `config.threads`, so a
                harness the search wrote samples in the sandbox and its rollouts are what gets
                trained on).
        """
        super().__init__()
        self.backend = backend
        self.trainer = trainer
        self.metric = metric
        self.config = config or RFTConfig()
        self.run_dir = run_dir
        self.base = base
        self.evaluator = evaluator or ContainedEvaluator.for_long_evaluations(self.config.threads)
        self.run_tag = self.config.run_tag or secrets.token_hex(2)
        self.report: RFTReport | None = None
        self._used_names: set[str] = set()
        self._trained: dict[str, AdapterRef] = {}  # what a later compile on its own result continues from
        self._scratch: Path | None = None

    @contextlib.contextmanager
    def writing_into(self, run_dir: RunDir) -> Iterator[None]:
        """For one WhaleOptimizer run: write into its folder unless this phase was given its own, so a
        phase built without one keeps its adapters with the run, not in a temporary folder; after the
        run the phase is as it was built (a second optimizer's run gets its own folder)."""
        given = self.run_dir
        self.run_dir = given or run_dir
        try:
            yield
        finally:
            self.run_dir = given

    def epoch(self, trainset: Sequence[dspy.Example]) -> EpochBatches[dspy.Example]:
        """The batch schedule over `trainset`: `.steps_per_epoch`, `.tasks_per_epoch`, `.batch(step)`."""
        return self.check_trainset(self.config, trainset)

    def rollouts_per_step(self, trainset: Sequence[dspy.Example]) -> int:
        """The rollouts one step spends (what the alternation's budget checks before a step)."""
        return self.config.batch_size * self.config.k

    @staticmethod
    def check_trainset(config: RFTConfig, trainset: Sequence[dspy.Example]) -> EpochBatches[dspy.Example]:
        """The batches, or ConfigError when `trainset` cannot fill one (callable before serving starts)."""
        return EpochBatches(with_task_ids(trainset), config.batch_size, config.seed)

    def compile(
        self,
        student: dspy.Module,
        *,
        trainset: Sequence[dspy.Example],
        valset: Sequence[dspy.Example] | None = None,
        parent: AdapterRef | None = None,
        resume: bool = False,
    ) -> HarnessProgram:
        """Run `config.steps` steps and return the rebound program; `valset` is not read by this phase.

        `student` is any dspy.Module (see `whale_dspy.student`), so this works as the weight step of
        `dspy.BetterTogether(metric=..., p=<a prompt optimizer>, w=RejectionSamplingFinetune(...))`;
        a student on an adapter this optimizer trained continues from it. `resume`: continue the
        steps `run_dir` recorded (a run stopped by a crash or a session's end) from the adapter its
        last step served, for the steps it still lacks; the report holds every step."""
        if self.metric is None:
            raise ConfigError(
                "RejectionSamplingFinetune needs metric= when it runs alone (a WhaleOptimizer gives its own)"
            )
        check_metric(self.metric)
        student = as_harness(student, examples=trainset)
        done = self._recorded_steps() if resume else []
        remaining = max(0, self.config.steps - len(done))
        if self.run_dir is not None:  # what ran, on this machine, in this sitting (before it can fail)
            self.run_dir.log_event(
                RESUMED_EVENT if done else STARTED_EVENT,
                served_model=self.backend.served_model(),
                serving=self.backend.serving(),
                environment=environment(),
                steps_left=remaining,
            )
        if done and done[-1].adapter is not None:  # the adapter the run served when it stopped
            parent = self.run_dir.adapter_here(done[-1].adapter, self.base or self.backend.base_model)
            ensure_served(self.backend, parent)
            self._trained[parent.name] = parent
        parent = parent or self._trained.get(student.adapter_name or "")
        started = time.perf_counter()
        start = done[-1].step + 1 if done else 0
        stream = itertools.islice(self.steps(student, trainset, start_step=start, parent=parent), remaining)
        program, signals = self._bind(student, parent), list(done)
        for signal, stepped in stream:
            program = stepped
            signals.append(signal)
        final = signals[-1].adapter if signals else parent
        self.report = RFTReport(
            steps=tuple(signals),
            final_adapter=final,
            rollouts=sum(s.rollouts for s in signals),
            seconds=time.perf_counter() - started,
        )
        program.report = self.report
        return program

    def steps(
        self,
        program: HarnessProgram,
        trainset: Sequence[dspy.Example],
        *,
        start_step: int = 0,
        parent: AdapterRef | None = None,
    ) -> Iterator[tuple[WeightStep, HarnessProgram]]:
        """Yield (signals, program bound to the adapter now served) after every step, without end."""
        batches = self.epoch(trainset)
        current, adapter, failures = self._bind(as_harness(program, examples=trainset), parent), parent, 0
        for step in itertools.count(start_step):
            started = time.perf_counter()
            rollouts = self._sample(current, batches.batch(step), step)
            sampled = time.perf_counter() - started
            outcome = self._train_and_load(step, rollouts, adapter)
            if outcome.result is not None:
                adapter = outcome.result.adapter
                self._trained[adapter.name] = adapter
                current = self._bind(current, adapter)
            failures = failures + 1 if outcome.error is not None else 0
            signal = self._signal(step, rollouts, outcome, adapter, time.perf_counter() - started)
            self._record(signal, outcome, epoch=batches.epoch_of(step), rollout_seconds=sampled)
            _log_step(signal)
            if failures >= self.config.max_failures:
                raise outcome.error
            yield signal, current

    def _recorded_steps(self) -> list[WeightStep]:
        """The steps `run_dir` recorded, in order (a step cut off before its event is run again)."""
        if self.run_dir is None:
            raise ConfigError("resuming the weight phase needs the run_dir its steps were recorded in")
        known = {field.name for field in fields(WeightStep)}
        done = [
            WeightStep.from_dict({key: value for key, value in event.items() if key in known})
            for event in self.run_dir.events(STEP_EVENT)
        ]
        numbers = [step.step for step in done]
        if numbers != list(range(len(done))):  # a folder two runs wrote into: which step is last?
            raise ConfigError(f"{self.run_dir.path} records steps {numbers}, not 0 to {len(done) - 1} once")
        return done

    def _bind(self, program: HarnessProgram, adapter: AdapterRef | None) -> HarnessProgram:
        """A new program on the server's LM for `adapter` (None: the base model)."""
        if adapter is None and program.adapter_name is not None:
            raise ConfigError(
                f"the program is bound to adapter {program.adapter_name!r}: pass parent=AdapterRef for it"
            )
        name = adapter.name if adapter else None
        return program.with_lm(self.backend.lm(adapter=name, **self.sampling()), adapter_name=name)

    def sampling(self) -> dict[str, Any]:
        """The LM request settings this phase samples under: a run without its own `sampling`
        evaluates every checkpoint (its start included) under these."""
        return {"temperature": self.config.temperature, "max_tokens": self.config.max_tokens}

    def _sample(self, program: HarnessProgram, batch: list[dspy.Example], step: int) -> list[Rollout]:
        """k rollouts per task, ordered by (batch position, sample) so the SFT data is deterministic."""
        traces = self.run_dir.subdir("traces", "rft") / f"step-{step:04d}.jsonl" if self.run_dir else None
        if traces is not None and traces.exists():
            _set_aside(traces)
        _, rollouts = self.evaluator.evaluate(
            program,
            EvalRequest(
                batch,
                metric=self.metric,
                lm=program.bound_lm,
                k=self.config.k,
                namespace=f"rft/{self.config.seed}/{step}",
                trace_path=traces,
                sampling={"temperature": self.config.temperature},
            ),
        )
        position = {str(e.get("task_id")): i for i, e in enumerate(batch)}
        return sorted(rollouts, key=lambda r: (position[r.task_id], r.sample))

    def _train_and_load(self, step: int, rollouts: list[Rollout], parent: AdapterRef | None) -> _Outcome:
        """Train a new adapter from the accepted rollouts and serve it; on failure serve the old one."""
        keep = accepted(rollouts, self.config.accept_threshold)
        if not keep:
            return _Outcome(skipped=f"no rollout scored above {self.config.accept_threshold}")
        name, base = self._new_name(step), self._base()
        try:
            out_dir = self._adapters_dir() / name
            result = self.trainer.train(
                sft_examples(keep), base=base, parent=parent, name=name, out_dir=out_dir
            )
            written = time.perf_counter()
            self.backend.load_adapter(result.adapter)
        except (TrainingError, BackendError) as error:
            if isinstance(error, BackendError) and reports_down(self.backend):
                raise  # a dead server, not a refused adapter: the step must not be recorded as done
            stage = "training" if isinstance(error, TrainingError) else "loading"
            log.error("RFT step %d: %s %s failed, keeping %s: %s", step, stage, name, _name(parent), error)
            return _Outcome(skipped=f"{stage} {name} failed: {type(error).__name__}", error=error)
        load_seconds = time.perf_counter() - written
        log.info("RFT step %d: serving %s (loaded in %.3f s)", step, name, load_seconds)
        return _Outcome(result=result, load_seconds=load_seconds)

    def _base(self) -> str:
        """The base the trainer loads: given, else what the server serves (known once it started)."""
        base = self.base or self.backend.base_model
        if not base:
            raise ConfigError("RejectionSamplingFinetune needs base= (the base model the trainer loads)")
        return base

    def _new_name(self, step: int) -> str:
        """A name never used by this optimizer nor present on disk (a retried step gets a suffix)."""
        stem = f"{self.config.adapter_prefix}-r{self.run_tag}-s{step:04d}"
        for attempt in itertools.count():
            name = stem if attempt == 0 else f"{stem}-{attempt}"
            if name not in self._used_names and not (self._adapters_dir() / name).exists():
                self._used_names.add(name)
                return name
        raise AssertionError("unreachable")

    def _adapters_dir(self) -> Path:
        if self.run_dir is not None:
            return self.run_dir.subdir("adapters")
        if self._scratch is None:
            self._scratch = Path(tempfile.mkdtemp(prefix="whale-rft-"))
            log.info("no run directory: adapters go to %s", self._scratch)
        return self._scratch

    def _signal(
        self,
        step: int,
        rollouts: list[Rollout],
        outcome: _Outcome,
        adapter: AdapterRef | None,
        seconds: float,
    ) -> WeightStep:
        count = len(rollouts)
        keep = accepted(rollouts, self.config.accept_threshold)
        return WeightStep(
            step=step,
            adapter=adapter,
            mean_reward=sum(r.score for r in rollouts) / count if count else 0.0,
            accept_rate=len(keep) / count if count else 0.0,
            accepted=len(keep),
            train_loss=outcome.result.loss if outcome.result else None,
            tokens=sum(r.prompt_tokens + r.completion_tokens for r in rollouts),
            rollouts=count,
            seconds=seconds,
            skipped=outcome.skipped,
            lm_calls=sum(r.turns for r in rollouts),
            completion_tokens=sum(r.completion_tokens for r in rollouts),
        )

    def _record(self, signal: WeightStep, outcome: _Outcome, *, epoch: int, rollout_seconds: float) -> None:
        """One event per step: the signals plus the time split the benchmark reads."""
        if self.run_dir is None:
            return
        result = outcome.result
        self.run_dir.log_event(
            STEP_EVENT,
            **signal.to_dict(),
            epoch=epoch,
            sft_examples=result.examples if result else 0,
            train_tokens=result.tokens if result else 0,
            rollout_seconds=rollout_seconds,
            train_seconds=result.seconds if result else 0.0,
            load_seconds=outcome.load_seconds,
            error=str(outcome.error) if outcome.error else None,
        )


def _set_aside(traces: Path) -> None:
    """Keep an earlier sampling of this step number (a step cut off before its event, or an earlier
    compile into this folder) under its own name, so the step's file holds one sampling only."""
    for n in itertools.count(1):
        earlier = traces.with_suffix(f".earlier-{n}.jsonl")
        if not earlier.exists():
            traces.replace(earlier)
            return


def _log_step(signal: WeightStep) -> None:
    loss = "-" if signal.train_loss is None else f"{signal.train_loss:.4f}"
    log.info(
        "RFT step %d: reward %.3f, accepted %d/%d (%.0f%%), loss %s, serving %s%s",
        signal.step,
        signal.mean_reward,
        signal.accepted,
        signal.rollouts,
        100 * signal.accept_rate,
        loss,
        _name(signal.adapter),
        f" (skipped: {signal.skipped})" if signal.skipped else "",
    )


def _name(adapter: AdapterRef | None) -> str:
    return adapter.name if adapter else "the base model"
