"""Benchmark one weight-phase step on the embedded model: where does the time of an RFT step go?

Splits a step that trained into rollout time, training time and adapter swap
time (the trained adapter on disk -> the server answering through it; goal
< 1 s), and prints each as a share of the step. A step that accepted nothing
trains nothing, so the benchmark runs steps until one trains (--max-steps).
The default task is the learning test's synthetic one (repeat a word, JSON
output), where the base model gets about one rollout in seven right; on the
real domains the base SmolLM2 accepts nothing, so no step would train.

    python bench/rft_step.py
    python bench/rft_step.py --domain squad --server-url http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dspy

ROOT = Path(__file__).resolve().parent.parent
ECHO = "echo"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domain", default=ECHO, help="echo (the learning test's task) or a real domain")
    parser.add_argument("--harness", default=None, help="seed harness name or file (default: the domain's)")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--server-url", dest="server_url", default=None)
    parser.add_argument("--output-format", dest="output_format", choices=("chat", "json"), default="json")
    parser.add_argument("--batch-size", dest="batch_size", type=int, default=8)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--max-tokens", dest="max_tokens", type=int, default=64)
    parser.add_argument(
        "--max-steps", dest="max_steps", type=int, default=3, help="steps to try for one that trains"
    )
    parser.add_argument("--run-dir", dest="run_dir", type=Path, default=None)
    return parser.parse_args()


def first_answer_seconds(backend: Any, adapter: str) -> float:
    """Latency of one 1-token request through the new adapter: the swap is done when this returns."""
    started = time.perf_counter()
    backend.lm(adapter=adapter, max_tokens=1, temperature=0.0)("ping")
    return time.perf_counter() - started


def task(args: argparse.Namespace) -> tuple[Any, Callable[..., float], list[dspy.Example]]:
    """(a program on the task's seed harness, its metric, its training tasks)."""
    from whale_dspy.harness import HarnessProgram, HarnessSource

    limit = args.batch_size * args.max_steps
    if args.domain == ECHO:
        sys.path.insert(0, str(ROOT / "tests"))
        from test_rft_learning import PLAIN_PREDICT, WORDS, Echo, echo_metric, echo_tasks

        program = HarnessProgram(HarnessSource("echo_h0", PLAIN_PREDICT), Echo)
        return program, echo_metric, echo_tasks(WORDS[:limit])
    from domains import get_domain
    from whale_dspy.cli.eval import resolve_harness

    domain = get_domain(args.domain)
    program = HarnessProgram(resolve_harness(args.harness, args.domain), domain.signature, domain.tools)
    return program, domain.metric, domain.load("train", limit, 0)


def run_steps(args: argparse.Namespace, backend: Any, run_path: Path) -> tuple[dict[str, Any], float]:
    """Run RFT steps until one trains; return its event and the first-answer latency through it."""
    from optimizers import RejectionSamplingFinetune, RFTConfig
    from whale_dspy.cli.eval import adapter_context
    from whale_dspy.models import resolve_model
    from whale_dspy.rundir import RunDir
    from whale_dspy.training import LoraTrainer

    student, metric, trainset = task(args)
    config = RFTConfig.cpu_embedded(batch_size=args.batch_size, k=args.k, max_tokens=args.max_tokens)
    rft = RejectionSamplingFinetune(
        backend=backend,
        trainer=LoraTrainer(config.training),
        metric=metric,
        config=config,
        run_dir=RunDir.open(run_path, {"bench": "rft_step", **vars(args), "rft": config.to_dict()}),
        base=resolve_model(args.model),
    )
    with adapter_context(args.output_format):
        for signal, _ in rft.steps(student, trainset):
            if signal.skipped is None:
                event = rft.run_dir.events("rft_step")[-1]
                return event, first_answer_seconds(backend, signal.adapter.name)
            if signal.step + 1 >= args.max_steps:
                break
    raise SystemExit(f"no step trained in {args.max_steps} steps (nothing accepted?): see {run_path}")


def report(event: dict[str, Any], first_answer: float) -> None:
    parts = {
        "rollouts": event["rollout_seconds"],
        "training": event["train_seconds"],
        "swap (load)": event["load_seconds"],
    }
    total = event["seconds"]
    print(
        f"RFT step {event['step']}: {event['rollouts']} rollouts, {event['accepted']} accepted, "
        f"{event['sft_examples']} SFT examples, {event['train_tokens']} completion tokens trained"
    )
    for name, seconds in parts.items():
        print(f"  {name:<12} {seconds:8.2f} s  {seconds / total:6.1%}")
    other = total - sum(parts.values())
    print(f"  {'other':<12} {other:8.2f} s  {other / total:6.1%}")
    print(f"  {'step':<12} {total:8.2f} s")
    swap = event["load_seconds"] + first_answer
    print(
        f"swap latency (adapter written -> first answer through it): {swap:.3f} s "
        f"(load {event['load_seconds']:.3f} s + first 1-token answer {first_answer:.3f} s)"
    )
    cores = len(os.sched_getaffinity(0))
    print(f"machine: {platform.machine()}, {cores} cores, load average {os.getloadavg()[0]:.1f}")


def main() -> None:
    from whale_dspy.cli.eval import open_backend

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    for noisy in ("httpx", "LiteLLM"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    args = parse_args()
    run_path = args.run_dir or Path("runs") / f"bench-rft-step-{time.strftime('%Y%m%d-%H%M%S')}"
    run_path.mkdir(parents=True, exist_ok=True)
    with open_backend(args, run_path) as backend:
        event, first_answer = run_steps(args, backend, run_path)
    report(event, first_answer)


if __name__ == "__main__":
    dspy.disable_logging()
    main()
