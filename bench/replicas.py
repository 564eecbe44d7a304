"""Replica benchmark: one evaluation on one replica against the same evaluation on two, in one run.

Three servers of the model start (runtime LoRA): A, a lone server as `--replicas 1` starts it
(vLLM's own core binding), and B, two replicas as `--replicas 2` starts them (each bound to its
half of the cores, `split_cores`, reading one adapter store). The same echo-task evaluation
(whale_dspy.testing.echo: tasks x k rollouts, DSPy's path) runs through A and through B's replica
set in A-B-B-A rounds, so warm-up and other load hit both alike; it prints rollouts per second of
each and B/A. It also times a fresh adapter from written to served on both of B's replicas
(published to the store, loaded on each, first answer from each).

On 2 cores each of B's replicas computes on one core, as A's lone server does (vLLM reserves the
other for its scheduler), so B/A says what splitting the machine buys, overhead included.
`--tiny` runs the same on the shipped fake vLLM (CI runs it).

    python bench/replicas.py [--model smollm2-135m] [--tasks 24] [--k 2] [--threads 8]
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import platform
import subprocess
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

from whale_dspy.backends import AdapterStore, RemoteServer, ReplicaSet, VLLMServer
from whale_dspy.backends.vllm_server import split_cores
from whale_dspy.evaluation import EvalRequest, evaluate
from whale_dspy.harness import HarnessProgram
from whale_dspy.offline import local_only
from whale_dspy.records import AdapterRef
from whale_dspy.testing import fake_vllm
from whale_dspy.testing.echo import PLAIN_PREDICT, WORDS, Echo, echo_metric, echo_tasks
from whale_dspy.testing.random_adapter import make_random_adapter


def servers(args: argparse.Namespace, folder: Path, store: AdapterStore) -> list[VLLMServer]:
    """A's lone server and B's two replicas (fake vLLMs with --tiny), not started."""
    options: dict[str, Any] = {"kv_cache_gib": 1.0, "max_loras": 2}

    def make(log: str, **more: Any) -> VLLMServer:
        if args.tiny:
            return fake_vllm.server(folder / "model", folder / log, delay=0.01, **options, **more)
        return VLLMServer(args.model, log_path=folder / log, **options, **more)

    lone = make("lone.log")
    cores = split_cores(2) if lone.cpu_build and not args.tiny else [None, None]
    pair = [make(f"replica-{i}.log", adapter_store=store.root, cpu_cores=c) for i, c in enumerate(cores)]
    return [lone, *pair]


def adapter(args: argparse.Namespace, base: str, folder: Path) -> AdapterRef:
    if args.tiny:
        (folder / "adapter").mkdir()
        (folder / "adapter" / "adapter_config.json").write_text('{"peft_type": "LORA"}')
        return AdapterRef("bench-replicas-r00", str(folder / "adapter"), base)
    return make_random_adapter(base, folder / "adapter", name="bench-replicas-r00")


def rollouts_per_second(replicas: ReplicaSet, args: argparse.Namespace, tag: str) -> float:
    program = HarnessProgram(PLAIN_PREDICT, Echo)
    tasks = echo_tasks(WORDS[: args.tasks])
    started = time.perf_counter()
    lm = replicas.lm(max_tokens=args.max_tokens, temperature=1.0)
    _, rollouts = evaluate(
        program,
        EvalRequest(tasks, metric=echo_metric, lm=lm, k=args.k, namespace=f"bench-{tag}"),
        threads=args.threads,
    )
    return len(rollouts) / (time.perf_counter() - started)


def written_to_served(replicas: ReplicaSet, ref: AdapterRef) -> float:
    """Seconds from an adapter on disk to an answer under it from every replica."""
    started = time.perf_counter()
    replicas.load_adapter(ref)
    for replica in replicas.replicas:
        body = {"model": ref.name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        httpx.post(f"{replica.api_base}/chat/completions", json=body, timeout=300).raise_for_status()
    return time.perf_counter() - started


def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        folder = Path(tmp)
        store = AdapterStore(folder / "store")
        started = servers(args, folder, store)
        for server in started:
            server.start()
            stack.callback(server.stop)
        clients = [RemoteServer(server.url, base_model=server.base_model) for server in started]
        one, two = ReplicaSet(clients[:1]), ReplicaSet(clients[1:], store=store)
        for replicas in (one, two):
            replicas.start()
            stack.callback(replicas.stop)
            rollouts_per_second(replicas, args, "warm-up")
        a1, b1, b2, a2 = (rollouts_per_second(s, args, f"r{i}") for i, s in enumerate((one, two, two, one)))
        a, b = (a1 + a2) / 2, (b1 + b2) / 2
        load = written_to_served(two, adapter(args, started[0].base_model, folder))
        answered = [row["answered"] for row in two.stats()]
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    model = "fake vLLM (--tiny)" if args.tiny else args.model
    print(f"\n{stamp}, commit {commit}, {platform.machine()}, {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f}, {model}, {args.tasks} tasks x k={args.k}, {args.threads} threads, "
          "A-B-B-A rounds\n")  # fmt: skip
    print("| replicas | rollouts/s (rounds) | mean |")
    print("|---|---|---|")
    print(f"| 1 (A) | {a1:.2f}, {a2:.2f} | {a:.2f} |")
    print(f"| 2 (B) | {b1:.2f}, {b2:.2f} | {b:.2f} |")
    print(f"\nB/A {b / a:.2f}; calls answered per replica in B: {answered}")
    print(f"B's replicas bound to cores {[server.cpu_cores or 'auto' for server in started[1:]]}")
    print(f"adapter written -> served on both replicas: {load:.3f} s")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tasks", type=int, default=24)
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--tiny", action="store_true", help="on the shipped fake vLLM, in seconds (CI)")
    args = parser.parse_args(argv)
    local_only()
    logging.getLogger("dspy").setLevel(logging.ERROR)
    run(args)


if __name__ == "__main__":
    main()
