"""Scaling: evaluation throughput as concurrency and tasks per candidate grow, and where the time goes.

One embedded server, the domain's seed harness, greedy decoding and a small
max_tokens. Two sweeps in one run:
  - concurrency (evaluation threads) 1, 4, 16, 64 with max(8, threads) rollouts each;
  - tasks per candidate 2, 4, 8, 16 (x k) at fixed concurrency.
Each measurement uses its own tasks (disjoint slices of the test split) so the
server's prefix cache helps no measurement with an earlier one's prompts. Per
rollout, time is split into LM calls (as DSPy sees them: request building,
HTTP and the server; a callback on the LM), tool calls (the search tool,
wrapped and timed) and the rest (harness build, DSPy formatting and parsing,
metric, tracing: the framework).

`--tiny` runs both sweeps, the timers and the table on the shipped fake vLLM
(whale_dspy.testing.fake_vllm: real HTTP, one fixed JSON answer, no model) in
seconds (CI runs it). Its LM time is a server that answers at once, so the
split says where the framework's own time goes, not how a real model scales.

    python bench/scaling.py [--levels 1 4 16 64] [--task-counts 2 4 8 16] [--threads 8] [--max-tokens 24]
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import platform
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from dspy.utils.callback import BaseCallback


class LMTimer(BaseCallback):
    """Sums the wall time of every LM call (shared by the per-rollout copies of the LM)."""

    def __init__(self) -> None:
        self.started: dict[str, float] = {}
        self.seconds = 0.0
        self.lock = threading.Lock()

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        self.started[call_id] = time.perf_counter()

    def on_lm_end(self, call_id: str, outputs: Any, exception: Exception | None = None) -> None:
        elapsed = time.perf_counter() - self.started.pop(call_id, time.perf_counter())
        with self.lock:
            self.seconds += elapsed


class ToolTimer:
    """Wraps a domain's tools factory so every tool call's time is summed."""

    def __init__(self, factory) -> None:
        self.factory = factory
        self.seconds = 0.0
        self.lock = threading.Lock()

    def __call__(self, example) -> dict[str, Any]:
        return {name: self._timed(tool) for name, tool in self.factory(example).items()}

    def _timed(self, tool):
        @functools.wraps(tool)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return tool(*args, **kwargs)
            finally:
                with self.lock:
                    self.seconds += time.perf_counter() - started

        return timed


def measure(program, tasks, domain, lm, lm_timer: LMTimer, tool_timer: ToolTimer, threads: int, k: int):
    from whale_dspy.evaluation import EvalRequest, evaluate

    lm_timer.seconds = tool_timer.seconds = 0.0
    started = time.perf_counter()
    report, rollouts = evaluate(
        program,
        EvalRequest(
            tasks, metric=domain.metric, lm=lm, k=k, namespace="scaling", sampling={"temperature": 0.0}
        ),
        threads=threads,
    )
    wall = time.perf_counter() - started
    in_rollouts = sum(rollout.seconds for rollout in rollouts)
    n = len(rollouts)
    return {
        "threads": threads,
        "tasks": len(tasks),
        "rollouts": n,
        "calls": sum(rollout.turns for rollout in rollouts),
        "wall": wall,
        "rollouts_per_s": n / wall,
        "tokens_per_s": report.completion_tokens / wall,
        "latency": in_rollouts / n,
        "lm": lm_timer.seconds / n,
        "tool": tool_timer.seconds / n,
        "other": (in_rollouts - lm_timer.seconds - tool_timer.seconds) / n,
        "framework_share": (in_rollouts - lm_timer.seconds - tool_timer.seconds) / in_rollouts,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--domain", default="search")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument(
        "--min-rollouts", type=int, default=8, help="rollouts per concurrency level, at least"
    )
    parser.add_argument("--task-counts", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--threads", type=int, default=8, help="concurrency of the tasks sweep")
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--tiny", action="store_true", help="on the shipped fake vLLM, in seconds (CI)")
    args = parser.parse_args(argv)
    from whale_dspy.offline import local_only

    local_only()

    from domains import domain_entry, get_domain
    from harness_programs import seed_harness
    from whale_dspy.harness import HarnessProgram
    from whale_dspy.testing.fake_vllm import embedded_or_fake

    domain = get_domain(args.domain)
    pool = iter(domain.load("test", None, 0))
    tool_timer = ToolTimer(domain.tools)
    source = seed_harness(domain_entry(args.domain).seed_harness)
    program = HarnessProgram(source, domain.signature, tool_timer)
    lm_timer = LMTimer()

    def run(tasks: list, threads: int, k: int) -> dict[str, Any]:
        return measure(program, tasks, domain, lm, lm_timer, tool_timer, threads, k)

    def take(count: int) -> list:
        return [next(pool) for _ in range(count)]

    rows: list[tuple[str, dict[str, Any]]] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        embedded_or_fake(args.model, Path(tmp), fake=args.tiny) as server,
    ):
        lm = server.lm(max_tokens=args.max_tokens, temperature=0.0)
        lm.callbacks = [lm_timer]
        run(take(2), 2, 1)  # warm-up
        for level in args.levels:
            tasks = take(max(level, args.min_rollouts) // args.k or 1)
            rows.append(("concurrency", run(tasks, level, args.k)))
            print_row(*rows[-1])
        for count in args.task_counts:
            tasks = take(count)
            rows.append(("tasks", run(tasks, args.threads, args.k)))
            print_row(*rows[-1])
        dtype = server.dtype
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    model = "fake vLLM (--tiny)" if args.tiny else args.model
    print(
        f"\n{stamp}, {platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, "
        f"{model} ({dtype}), {source.name} on {args.domain} test tasks x k={args.k}, greedy, "
        f"max_tokens {args.max_tokens}\n"
    )
    print("| sweep | threads | tasks | rollouts | LM calls | wall s | rollouts/s | tok/s | s/rollout | "
          "LM s | tool s | other s | other share |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for sweep, r in rows:
        print(
            f"| {sweep} | {r['threads']} | {r['tasks']} | {r['rollouts']} | {r['calls']} | {r['wall']:.1f} | "
            f"{r['rollouts_per_s']:.2f} | {r['tokens_per_s']:.1f} | {r['latency']:.2f} | {r['lm']:.2f} | "
            f"{r['tool']:.3f} | {r['other']:.3f} | {100 * r['framework_share']:.1f} % |"
        )


def print_row(sweep: str, r: dict[str, Any]) -> None:
    print(
        f"{sweep}: threads {r['threads']}, {r['rollouts']} rollouts, {r['calls']} calls: {r['wall']:.1f} s, "
        f"{r['rollouts_per_s']:.2f} rollouts/s; per rollout {r['latency']:.2f} s = LM {r['lm']:.2f} "
        f"+ tool {r['tool']:.3f} + other {r['other']:.3f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
