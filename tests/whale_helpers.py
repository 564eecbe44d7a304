"""Scripted phases for the WhaleOptimizer tests: the two generator APIs without LMs or training.

`FakeWeightPhase` yields one WeightStep per step with scripted rewards and
serves a new adapter name per step on a FakeBackend. `FakeHarnessPhase` keeps
an archive on disk (iterations.jsonl plus candidate sources) and replays it
when reopened, as Meta-Harness does. Both can crash at a scripted unit, before
or after doing that unit's work, once per `Crashes` object.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import dspy

from optimizers.engine.whale import WhaleOptimizer
from optimizers.signals import HarnessIteration, WeightStep
from whale_dspy.evaluation import InProcessEvaluator
from whale_dspy.harness import HarnessProgram, HarnessSource
from whale_dspy.records import AdapterRef
from whale_dspy.testing.fake_backend import FakeBackend
from whale_dspy.testing.scripted_lm import ScriptedLM

SEED_HARNESS = """
import dspy

def build(signature, tools):
    return dspy.Predict(signature)
"""

HARNESS_CALLS_PER_ROLLOUT = 2
"""The fake harness phase's candidates call the LM twice a rollout (a vote); weight steps once."""


class QA(dspy.Signature):
    question: str = dspy.InputField()
    answer: str = dspy.OutputField()


class Crash(RuntimeError):
    """A scripted crash inside a phase."""


@dataclass
class Crashes:
    """Crash points `(kind, global unit index, "before"|"after")`, each fired once."""

    points: set[tuple[str, int, str]] = field(default_factory=set)

    def check(self, kind: str, index: int, when: str) -> None:
        if (kind, index, when) in self.points:
            self.points.discard((kind, index, when))
            raise Crash(f"scripted crash {when} {kind} unit {index}")


def exact_match(example: dspy.Example, pred: Any, trace: Any = None) -> float:
    return float(str(pred.answer).strip() == example.answer)


def tasks(prefix: str, count: int) -> list[dspy.Example]:
    return [
        dspy.Example(task_id=f"{prefix}{i}", question=f"{prefix} question {i}", answer="4").with_inputs(
            "question"
        )
        for i in range(count)
    ]


def backend() -> FakeBackend:
    """Every model answers "4", so the test curve is real but constant."""
    return FakeBackend(ScriptedLM({"": {"answer": "4"}}))


def student(server: FakeBackend) -> HarnessProgram:
    return HarnessProgram(HarnessSource("h0", SEED_HARNESS).vouched(), QA, lm=server.lm())


class FakeWeightPhase:
    metric = None  # a phase's metric: the engine gives it its own

    def __init__(
        self,
        server: FakeBackend,
        rewards: Callable[[int], float] = lambda step: 0.1 * step,
        *,
        batch_size: int = 2,
        k: int = 2,
        crashes: Crashes | None = None,
        adapter_dir: Path = Path("/nonexistent/adapters"),
        delay: float = 0.0,
    ):
        self.server, self.rewards, self.batch_size, self.k = server, rewards, batch_size, k
        self.crashes, self.adapter_dir, self.delay = crashes or Crashes(), adapter_dir, delay
        self.started: list[int] = []

    def epoch(self, trainset: Sequence[dspy.Example]) -> Any:
        return SimpleNamespace(steps_per_epoch=len(trainset) // self.batch_size)

    def rollouts_per_step(self, trainset: Sequence[dspy.Example]) -> int:
        return self.batch_size * self.k

    def writing_into(self, run_dir: Any) -> contextlib.AbstractContextManager[None]:
        """Scripted steps write nothing."""
        return contextlib.nullcontext()

    def sampling(self) -> dict[str, Any]:
        """None of its own: its checkpoints keep the run's (or the backend's) sampling."""
        return {}

    def steps(
        self,
        program: HarnessProgram,
        trainset: Sequence[dspy.Example],
        *,
        start_step: int = 0,
        parent: AdapterRef | None = None,
    ) -> Iterator[tuple[WeightStep, HarnessProgram]]:
        for step in itertools.count(start_step):
            self.crashes.check("weight", step, "before")
            self.started.append(step)
            time.sleep(self.delay)
            adapter = AdapterRef(
                f"fake-s{step:04d}", str(self.adapter_dir / f"s{step}"), "base", parent and parent.name
            )
            self.server.load_adapter(adapter)
            self.crashes.check("weight", step, "after")
            signal = WeightStep(
                step=step,
                adapter=adapter,
                mean_reward=self.rewards(step),
                accept_rate=0.5,
                accepted=1,
                train_loss=1.0 / (step + 1),
                tokens=10,
                rollouts=self.batch_size * self.k,
                seconds=0.0,
                lm_calls=self.batch_size * self.k,
            )
            parent = adapter
            yield signal, program.with_lm(self.server.lm(adapter.name), adapter.name)


class FakeHarnessPhase:
    """M candidates per iteration; candidate scores come from `scores(phase_dir_name, iteration)`."""

    metric = None

    def __init__(
        self,
        scores: Callable[[str, int], float] = lambda phase, iteration: 0.1 * iteration,
        *,
        candidates: int = 2,
        k: int = 2,
        crashes: Crashes | None = None,
        delay: float = 0.0,
        calls_per_rollout: int = HARNESS_CALLS_PER_ROLLOUT,
        tokens_per_call: int | None = None,
    ):
        """`tokens_per_call`: completion tokens each LM call reports (None: not counted)."""
        self.scores, self.m, self.k, self.crashes = scores, candidates, k, crashes or Crashes()
        self.delay, self.calls_per_rollout, self.tokens_per_call = delay, calls_per_rollout, tokens_per_call
        self.calls: list[tuple[str, str]] = []
        self.done = 0  # global iteration counter for crash points (counts new work only)

    def rollouts_per_iteration(self, searchset: Sequence[dspy.Example], iteration: int) -> int:
        return len(searchset) * self.k * (1 if iteration == 0 else self.m)

    def iterations(
        self, program: HarnessProgram, searchset: Sequence[dspy.Example], *, archive_dir: Path
    ) -> Iterator[tuple[HarnessIteration, HarnessProgram]]:
        archive_dir.mkdir(parents=True, exist_ok=True)
        self.calls.append((archive_dir.name, program.source.digest))
        log = archive_dir / "iterations.jsonl"
        records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        for record in records:  # replay what the archive already holds, at no cost
            yield HarnessIteration(**record), program.with_source(_source(archive_dir, record["best_name"]))
        best = max(records, key=lambda r: r["best_score"], default=None)
        for iteration in itertools.count(len(records)):
            self.crashes.check("harness", self.done, "before")
            time.sleep(self.delay)
            name = f"{archive_dir.name}-i{iteration}"
            score = self.scores(archive_dir.name, iteration)
            code = program.source.code if iteration == 0 else f"{program.source.code}\n# {name}\n"
            (archive_dir / f"{name}.py").write_text(code)
            if best is None or score > best["best_score"]:
                best = {"best_name": name, "best_score": score}
            record = HarnessIteration(
                iteration=iteration,
                best_name=best["best_name"],
                best_score=best["best_score"],
                iteration_best_score=score,
                candidates=1 if iteration == 0 else self.m,
                valid=1,
                rollouts=self.rollouts_per_iteration(searchset, iteration),
                proposer_calls=0 if iteration == 0 else 1,
                proposer_tokens=0 if iteration == 0 else 100,
                seconds=0.0,
                lm_calls=self.calls_per_rollout * self.rollouts_per_iteration(searchset, iteration),
            )
            if self.tokens_per_call is not None:
                record = replace(record, completion_tokens=self.tokens_per_call * record.lm_calls)
            with log.open("a") as handle:
                handle.write(json.dumps(record.to_dict()) + "\n")
            self.crashes.check("harness", self.done, "after")
            self.done += 1
            yield record, program.with_source(_source(archive_dir, best["best_name"]))


def _source(archive_dir: Path, name: str) -> HarnessSource:
    return HarnessSource(name=name, code=(archive_dir / f"{name}.py").read_text())


def toy_evaluator() -> InProcessEvaluator:
    """The checkpoint evaluator for these tests' own toy harnesses: in process, since a sandbox start
    (a second or two each, three per run) dominated the engine tests' time; containment has its own
    tests (test_contained_everywhere.py runs a WhaleOptimizer on its default evaluators)."""
    return InProcessEvaluator(threads=2, run_unvouched_in_process=True)


def optimizer(
    run_dir: Path,
    server: FakeBackend,
    *,
    weight: FakeWeightPhase | None = None,
    harness: FakeHarnessPhase | None = None,
    **options: Any,
) -> WhaleOptimizer:
    from optimizers.engine.schedules import Fixed

    settings = {
        "schedule": Fixed(0.6, 3),
        "budget": 100,
        "eval_every": 20,
        "eval_k": 2,
        "evaluator": toy_evaluator(),
    }
    return WhaleOptimizer(
        backend=server,
        metric=exact_match,
        run_dir=run_dir,
        weight_phase=weight,
        harness_phase=harness,
        **{**settings, **options},
    )


def compile_run(opt: WhaleOptimizer, server: FakeBackend, **options: Any) -> HarnessProgram:
    return opt.compile(
        student(server),
        trainset=tasks("train", 10),
        valset=tasks("search", 3),
        track=tasks("test", 2),
        **options,
    )


def scripted_data() -> Any:
    """The scripted domain's RunData, as `whale run` loads a domain: seed harness, train, search, test."""
    from whale_cli.wiring import RunData

    domain = SimpleNamespace(signature=QA, tools=lambda example: {}, metric=exact_match)
    return RunData(
        domain,
        HarnessSource("h0", SEED_HARNESS).vouched(),
        tasks("train", 10),
        tasks("search", 3),
        tasks("test", 2),
    )


def scripted_run(
    run_dir: Path,
    *,
    budget: int = 60,
    delay: float = 0.0,
    console: Any = None,
    make_server: Callable[[], FakeBackend] | None = None,
    restarts: int = 0,
) -> dict[str, Any]:
    """`whale run`'s CLI path (progress, outputs, resume, a dead server started anew) on scripted
    phases: the test entry point."""
    from whale_cli.run import execute
    from whale_cli.run_settings import RunSettings
    from whale_cli.wiring import RestartingServer, RunData

    settings = RunSettings(domain="scripted", schedule="fixed:0.6,3", budget=budget, eval_every=20, eval_k=2)
    data = scripted_data()

    def build(
        settings: RunSettings,
        run_dir: Path,
        server: FakeBackend,
        data: RunData,
        on_event: Any,
        shared_evals: Any,
    ) -> Any:
        from optimizers.engine.schedules import parse_schedule

        return WhaleOptimizer(
            backend=server,
            metric=exact_match,
            schedule=parse_schedule(settings.schedule),
            budget=settings.budget,
            run_dir=run_dir,
            eval_every=settings.every,
            eval_k=settings.eval_k,
            evaluator=toy_evaluator(),
            weight_phase=FakeWeightPhase(server, delay=delay),
            harness_phase=FakeHarnessPhase(delay=delay),
            method=settings.method,
            config={"cli": asdict(settings)},
            on_event=on_event,
            shared_evals=shared_evals,
        )

    with RestartingServer(make_server or backend, restarts=restarts) as server:  # backend: as patched now
        return server.run(
            lambda served: execute(settings, run_dir, served, data, console=console, build=build)
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="a scripted `whale run` for the resume-after-kill test")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--budget", type=int, default=60)
    options = parser.parse_args()
    scripted_run(options.run_dir, budget=options.budget, delay=options.delay)
    sys.exit(0)
