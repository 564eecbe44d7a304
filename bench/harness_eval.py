"""Harness-step isolation benchmark: SandboxedEvaluator against InProcessEvaluator, in one run.

Both evaluate the same seed harness on the same tasks with the same LM (cache
off, temperature 0, so both do the same work), alternating in A-B-B-A rounds
so warm-up and other load on the machine hit both alike. It prints the
sandbox's overhead as a share of evaluation time (goal < 10 %), split into the
child's start-up (once per candidate) and the per-call proxying.

    python bench/harness_eval.py                     # the embedded vLLM server (real LM latency)
    python bench/harness_eval.py --scripted-latency-ms 300   # no server: a scripted LM that waits

With the scripted LM and no latency the LM costs nothing and the overhead
looks huge; it is the real server (or a realistic simulated latency) that
says what isolation costs during a search.

`--tiny` is the scripted LM (with no latency unless --scripted-latency-ms says
otherwise): the same rounds, sandbox and summary in seconds, no server (CI runs
it). It measures the sandbox's start-up and proxying against an LM that costs
nothing, so its overhead is not the figure the goal is about.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import platform
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import dspy
from dspy.utils.callback import BaseCallback

from domains.chess_puzzles import ChessDomain
from harness_programs import seed_harness
from whale_dspy.evaluation import EvalRequest, InProcessEvaluator
from whale_dspy.harness import HarnessProgram
from whale_dspy.sandbox import CandidateProgram, SandboxedEvaluator, SandboxLimits
from whale_dspy.testing.scripted_lm import ScriptedLM

RESULTS = Path(__file__).parent / "RESULTS.md"


class Latency(BaseCallback):
    """Makes every LM call of a scripted LM take as long as a served one would."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        time.sleep(self.seconds)


def make_lm(args: argparse.Namespace, stack: ExitStack) -> tuple[dspy.BaseLM, str]:
    if args.tiny or args.scripted_latency_ms is not None:
        latency_ms = args.scripted_latency_ms or 0.0
        lm = ScriptedLM({"": {"move": "e2e4"}})
        lm.callbacks = [Latency(latency_ms / 1000)]
        return lm, f"scripted LM, {latency_ms:g} ms per call"
    from whale_dspy.backends import embedded_server

    server = embedded_server(run_dir=Path(stack.enter_context(tempfile.TemporaryDirectory())))
    server.start()
    stack.callback(server.stop)
    return server.lm(
        max_tokens=args.max_tokens
    ), f"embedded vLLM (SmolLM2-135M, CPU), max_tokens {args.max_tokens}"


def timed(evaluator: Any, program: Any, tasks: list, domain: ChessDomain, lm: dspy.BaseLM, k: int):
    started = time.perf_counter()
    report, rollouts = evaluator.evaluate(
        program,
        EvalRequest(
            tasks, metric=domain.metric, lm=lm, k=k, namespace="bench", sampling={"temperature": 0.0}
        ),
    )
    return time.perf_counter() - started, report, rollouts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1, help="A-B-B-A rounds")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--scripted-latency-ms", type=float, default=None)
    parser.add_argument("--tiny", action="store_true", help="the scripted LM, no server, in seconds (CI)")
    parser.add_argument("--append", action="store_true", help=f"append the result to {RESULTS}")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    domain = ChessDomain()
    tasks = domain.load("search", limit=args.tasks, seed=0)
    source = seed_harness("chess_h0")
    programs = {
        "in-process": (
            InProcessEvaluator(threads=args.threads),
            HarnessProgram(source, domain.signature, domain.tools),
        ),
        "sandboxed": (
            SandboxedEvaluator(SandboxLimits(threads=args.threads)),
            CandidateProgram(source, domain.signature, domain.tools),
        ),
    }
    times: dict[str, list[float]] = {"in-process": [], "sandboxed": []}
    inner: dict[str, list[float]] = {"in-process": [], "sandboxed": []}
    with ExitStack() as stack:
        lm, lm_name = make_lm(args, stack)
        calls = 0
        for name in ["in-process", "sandboxed", "sandboxed", "in-process"] * args.rounds:
            evaluator, program = programs[name]
            seconds, report, rollouts = timed(evaluator, program, tasks, domain, lm, args.k)
            times[name].append(seconds)
            inner[name].append(report.seconds)
            calls = sum(rollout.turns for rollout in rollouts)
            print(f"{name:>10}: {seconds:6.2f} s total, {report.seconds:6.2f} s rollouts, {calls} LM calls")
    summary = summarize(times, inner)
    print(summary)
    if args.append:
        append_results(args, lm_name, len(tasks), calls, summary)


def summarize(times: dict[str, list[float]], inner: dict[str, list[float]]) -> str:
    base, boxed = statistics.median(times["in-process"]), statistics.median(times["sandboxed"])
    startup = boxed - statistics.median(inner["sandboxed"])
    proxy = statistics.median(inner["sandboxed"]) - statistics.median(inner["in-process"])
    return (
        f"in-process {base:.2f} s, sandboxed {boxed:.2f} s: overhead {100 * (boxed - base) / base:+.1f} % "
        f"of evaluation time (child start-up {startup:.2f} s, proxying {proxy:+.2f} s)"
    )


def append_results(args: argparse.Namespace, lm_name: str, tasks: int, calls: int, summary: str) -> None:
    lines = [
        "",
        f"## Harness step / isolation ({datetime.date.today().isoformat()})",
        "",
        f"`python bench/harness_eval.py {' '.join(sys.argv[1:])}`",
        f"on {platform.machine()} ({platform.processor() or 'cpu'}), {lm_name}; chess_h0 on {tasks} search "
        f"tasks x k={args.k}, {args.threads} threads, {calls} LM calls per evaluation, "
        f"A-B-B-A x {args.rounds}.",
        "",
        f"- {summary}",
        "",
    ]
    with open(RESULTS, "a", encoding="utf-8") as handle:
        handle.write("\n".join(lines))


if __name__ == "__main__":
    main()
