"""Honest evaluation: k samples per task, mean@k and pass@k with a bootstrap CI, full traces.

Rollouts run in threads (the server batches concurrent requests); each one is
appended to the trace file as soon as it finishes, so an interrupted
evaluation keeps what it did, and a later call given those rollouts (`done`)
measures only the rest: rollout ids derive from (namespace, task, sample), so
the finished evaluation is the one an uninterrupted call would have made.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from typing import Any

import dspy
import numpy as np

from whale_dspy.defaults import DEFAULT_THREADS
from whale_dspy.errors import ConfigError
from whale_dspy.eval_request import EvalRequest
from whale_dspy.harness import HarnessProgram, refuse_untrusted
from whale_dspy.jsonl import append_jsonl
from whale_dspy.records import Rollout
from whale_dspy.rollouts import run_rollout, task_id_of
from whale_dspy.seeding import derive_seed
from whale_dspy.stats import task_mean_ci

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvalReport:
    """Scores of one (harness, adapter) pair on a task set."""

    k: int
    tasks: int
    rollouts: int
    mean_at_k: float
    ci_low: float
    ci_high: float
    pass_at_k: float
    parse_rate: float
    mean_turns: float
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    per_task: dict[str, list[float]]
    truncated_calls: int = 0
    """LM calls whose completion hit its max_tokens (counted here instead of DSPy's warnings)."""
    resumed: int = 0
    """Rollouts carried over from an interrupted evaluation: scored here, not timed by `seconds`."""

    @property
    def rollouts_per_second(self) -> float:
        return (self.rollouts - self.resumed) / self.seconds if self.seconds else 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(rollouts: Sequence[Rollout], *, k: int, seconds: float, resumed: int = 0) -> EvalReport:
    """Aggregate rollouts into mean@k (mean over tasks of the mean over samples) and pass@k;
    `seconds` timed all but the first `resumed` of them."""
    per_task: dict[str, list[float]] = defaultdict(list)
    for rollout in sorted(rollouts, key=lambda r: (r.task_id, r.sample)):
        per_task[rollout.task_id].append(rollout.score)
    mean, low, high = task_mean_ci(per_task)
    count = max(len(rollouts), 1)
    return EvalReport(
        k=k,
        tasks=len(per_task),
        rollouts=len(rollouts),
        mean_at_k=mean,
        ci_low=low,
        ci_high=high,
        pass_at_k=float(np.mean([max(s) for s in per_task.values()])) if per_task else 0.0,
        parse_rate=sum(r.parsed for r in rollouts) / count,
        mean_turns=sum(r.turns for r in rollouts) / count,
        prompt_tokens=sum(r.prompt_tokens for r in rollouts),
        completion_tokens=sum(r.completion_tokens for r in rollouts),
        seconds=seconds,
        per_task=dict(per_task),
        truncated_calls=sum(r.truncated_calls for r in rollouts),
        resumed=resumed,
    )


def measured(
    done: Sequence[Rollout], examples: Sequence[dspy.Example], k: int
) -> dict[tuple[str, int], Rollout]:
    """The rollouts of `done` that k samples of `examples` would run, by (task, sample): what an
    interrupted call of this evaluation already measured."""
    wanted = {(task_id_of(example), sample) for example in examples for sample in range(k)}
    return {(r.task_id, r.sample): r for r in done if (r.task_id, r.sample) in wanted}


def evaluate(
    program: HarnessProgram, request: EvalRequest, *, threads: int = DEFAULT_THREADS
) -> tuple[EvalReport, list[Rollout]]:
    """Run k samples of every task in `threads` threads; the report and every rollout.

    A HarnessProgram runs here only when its source is vouched for (UntrustedHarness otherwise):
    evaluate model-written code with `whale_dspy.sandbox.ContainedEvaluator`.
    """
    examples, k, metric, sampling = request.examples, request.k, request.metric, request.sampling
    if k < 1 or threads < 1:
        raise ConfigError(f"k and threads must be >= 1 (got k={k}, threads={threads})")
    if isinstance(program, HarnessProgram):
        refuse_untrusted(program.source)
    lm = request.lm or program.bound_lm or dspy.settings.lm
    if lm is None:
        raise ConfigError("no LM: pass lm=, bind one to the program, or dspy.configure(lm=...)")
    kept = measured(request.done, examples, k)
    jobs = [
        (example, sample)
        for example in examples
        for sample in range(k)
        if (task_id_of(example), sample) not in kept
    ]
    started = time.perf_counter()
    rollouts: list[Rollout] = list(kept.values())
    pool = ThreadPoolExecutor(max_workers=threads)
    futures = []
    wait_for_running = True
    try:
        for example, sample in jobs:
            futures.append(
                pool.submit(
                    contextvars.copy_context().run,
                    run_rollout,
                    program,
                    example,
                    lm=lm,
                    metric=metric,
                    sample=sample,
                    rollout_id=derive_seed(request.namespace, task_id_of(example), sample),
                    **sampling,
                )
            )
        for future in as_completed(futures):
            rollout = future.result()
            rollouts.append(rollout)
            if request.trace_path is not None:
                append_jsonl(request.trace_path, rollout.to_dict())
            if request.on_rollout is not None:
                request.on_rollout(rollout)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: unwind now, so the caller stops the server
        wait_for_running = False
        running = sum(future.running() for future in futures)
        log.warning("interrupted: not waiting for %d rollouts in flight (their results are dropped)", running)
        raise
    finally:  # e.g. BackendError (the server is gone): start none of the rest
        pool.shutdown(wait=wait_for_running, cancel_futures=True)
    report = summarize(rollouts, k=k, seconds=time.perf_counter() - started, resumed=len(kept))
    return report, rollouts


class InProcessEvaluator:
    """The CandidateEvaluator for vouched harnesses: `evaluate` in this process.

    `run_unvouched_in_process=True` is the named opt-in to run any code here (`whale search
    --no-sandbox`): for harnesses you trust, since nothing then contains them.
    """

    limits = None  # nothing contains the code here

    def __init__(self, *, threads: int = DEFAULT_THREADS, run_unvouched_in_process: bool = False):
        self.threads = threads
        self.run_unvouched_in_process = run_unvouched_in_process

    def evaluate(self, program: HarnessProgram, request: EvalRequest) -> tuple[EvalReport, list[Rollout]]:
        if self.run_unvouched_in_process:
            program = program.with_source(program.source.vouched())
        return evaluate(program, request, threads=self.threads)
