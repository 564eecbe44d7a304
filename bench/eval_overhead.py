"""Evaluation overhead: `whale_dspy.evaluation.evaluate` against the same LM calls sent straight to vLLM.

One embedded server. A warm-up evaluation of the seed harness writes its
traces; every later round replays those exact messages (each rollout's calls in
order, rollouts at the same concurrency) with httpx, or re-runs the framework
evaluation (traces written), in A-B-B-A rounds so warm-up, the prefix cache
and the load of other work on the machine hit both alike. Greedy decoding and
a fixed max_tokens make both sides generate the same tokens. The framework's
share of time is 1 - framework/direct in rollouts per second (goal < 10 %).

    python bench/eval_overhead.py [--domain search] [--tasks 8] [--k 2] [--threads 8] [--max-tokens 32]

The harness's tool (BM25 search on the search domain) runs on the framework
side only; its time is measured separately and printed, since it is the
domain's work, not the framework's.

`--tiny` runs the same rounds, replay, tool timing and table on the shipped fake
vLLM (whale_dspy.testing.fake_vllm: real HTTP, one fixed JSON answer, no model),
in seconds (CI runs it). It measures the framework's own cost against a server
that answers at once, so the ratio there says nothing about the goal, which
needs a real model's latency.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx


def response_format_of(signature) -> dict[str, Any]:
    """The json_schema body DSPy sends for JSONAdapter calls on `signature` (as its request layer does).

    The trace keeps a call's `response_format` only as the repr of DSPy's pydantic class, so the
    replay rebuilds the schema from the signature's output fields.
    """
    from whale_dspy.dspy_lm_seam import json_schema_response_format

    return json_schema_response_format(signature)


def read_calls(trace_path: Path, signature) -> list[list[dict[str, Any]]]:
    """Per rollout (in trace order), the LM calls it made: messages plus the response format if any."""
    rollouts = []
    with open(trace_path, encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            calls = []
            for call in record["lm_calls"]:
                body = {"messages": call["messages"]}
                found = call["sampling"].get("response_format")
                if isinstance(found, dict):
                    body["response_format"] = found
                elif found:
                    body["response_format"] = response_format_of(signature)
                calls.append(body)
            rollouts.append(calls)
    return rollouts


def replay(
    url: str, model: str, rollouts: list[list[dict[str, Any]]], threads: int, max_tokens: int
) -> dict[str, float]:
    """Send every rollout's calls in order, rollouts `threads` at a time; wall time and token counts."""

    def one_rollout(client: httpx.Client, calls: list[dict[str, Any]]) -> tuple[int, int]:
        prompt = completion = 0
        for call in calls:
            body = {"model": model, "temperature": 0.0, "max_tokens": max_tokens, **call}
            response = client.post(f"{url}/v1/chat/completions", json=body, timeout=600)
            if response.status_code != 200:
                raise RuntimeError(f"HTTP {response.status_code}: {response.text[:500]}")
            usage = response.json()["usage"]
            prompt += usage["prompt_tokens"]
            completion += usage["completion_tokens"]
        return prompt, completion

    started = time.perf_counter()
    with (
        httpx.Client(limits=httpx.Limits(max_connections=threads)) as client,
        ThreadPoolExecutor(threads) as pool,
    ):
        counts = list(pool.map(lambda calls: one_rollout(client, calls), rollouts))
    return {
        "seconds": time.perf_counter() - started,
        "rollouts": len(rollouts),
        "calls": sum(len(calls) for calls in rollouts),
        "prompt_tokens": sum(p for p, _ in counts),
        "completion_tokens": sum(c for _, c in counts),
    }


def framework(program, tasks, domain, lm, args: argparse.Namespace, trace_path: Path) -> dict[str, float]:
    from whale_dspy.evaluation import EvalRequest, evaluate

    started = time.perf_counter()
    report, rollouts = evaluate(
        program,
        EvalRequest(
            tasks,
            metric=domain.metric,
            lm=lm,
            k=args.k,
            namespace="bench-overhead",
            trace_path=trace_path,
            sampling={"temperature": 0.0},
        ),
        threads=args.threads,
    )
    return {
        "seconds": time.perf_counter() - started,
        "rollouts": report.rollouts,
        "calls": sum(rollout.turns for rollout in rollouts),
        "prompt_tokens": report.prompt_tokens,
        "completion_tokens": report.completion_tokens,
        "mean_at_k": report.mean_at_k,
        "parse_rate": report.parse_rate,
    }


def tool_seconds(domain, tasks: list, k: int) -> float:
    """Time of the harness's tool calls alone (search_h0: one BM25 search per rollout), run serially."""
    started = time.perf_counter()
    for example in tasks:
        for _ in range(k):
            domain.tools(example)["search"](query=example.question, k=1)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--domain", default="search")
    parser.add_argument("--harness", default=None, help="default: the domain's seed harness")
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=1, help="A-B-B-A rounds")
    parser.add_argument("--tiny", action="store_true", help="on the shipped fake vLLM, in seconds (CI)")
    args = parser.parse_args(argv)
    from whale_dspy.offline import local_only

    local_only()

    from domains import domain_entry, get_domain
    from harness_programs import seed_harness
    from whale_dspy.harness import HarnessProgram
    from whale_dspy.testing.fake_vllm import embedded_or_fake

    domain = get_domain(args.domain)
    tasks = domain.load("test", args.tasks, 0)
    source = seed_harness(args.harness or domain_entry(args.domain).seed_harness)
    program = HarnessProgram(source, domain.signature, domain.tools)
    sides: dict[str, list[dict[str, float]]] = {"framework": [], "direct": []}
    with (
        tempfile.TemporaryDirectory() as tmp,
        embedded_or_fake(args.model, Path(tmp), fake=args.tiny) as server,
    ):
        lm = server.lm(max_tokens=args.max_tokens, temperature=0.0)
        warm = framework(program, tasks, domain, lm, args, Path(tmp) / "warmup.jsonl")
        print(f"warm-up: {warm['seconds']:.1f} s, {warm['calls']} calls", flush=True)
        calls = read_calls(Path(tmp) / "warmup.jsonl", domain.signature)
        for index, side in enumerate(["framework", "direct", "direct", "framework"] * args.rounds):
            if side == "framework":
                row = framework(program, tasks, domain, lm, args, Path(tmp) / f"round{index}.jsonl")
            else:
                row = replay(server.url, server.served_name, calls, args.threads, args.max_tokens)
            sides[side].append(row)
            print(
                f"{side:>9}: {row['seconds']:6.2f} s, {row['rollouts']} rollouts, {row['calls']} calls, "
                f"{row['completion_tokens']} completion tokens",
                flush=True,
            )
        dtype = server.dtype
    tools_s = tool_seconds(domain, tasks, args.k)
    print_summary(args, sides, warm, tools_s, dtype, source.name)


def print_summary(args, sides, warm, tools_s: float, dtype: str, harness: str) -> None:
    def total(side: str, key: str) -> float:
        return sum(row[key] for row in sides[side])

    seconds = {side: total(side, "seconds") for side in sides}
    median = {side: statistics.median(row["seconds"] for row in sides[side]) for side in sides}
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    model = "fake vLLM (--tiny)" if args.tiny else args.model
    print(
        f"\n{stamp}, {platform.machine()}, {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.1f}, {model} ({dtype}), {harness} on {args.tasks} {args.domain} "
        f"test tasks x k={args.k}, {args.threads} threads, greedy, max_tokens {args.max_tokens}, "
        f"A-B-B-A x {args.rounds}; warm-up mean@k {warm['mean_at_k']:.3f}, parsed {warm['parse_rate']:.0%}\n"
    )
    print("| side | rounds | seconds (total) | median s/round | rollouts/s | calls/s | completion tok/s | "
          "tokens (prompt/completion) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for side in ("direct", "framework"):
        print(
            f"| {side} | {len(sides[side])} | {seconds[side]:.2f} | {median[side]:.2f} | "
            f"{total(side, 'rollouts') / seconds[side]:.3f} | {total(side, 'calls') / seconds[side]:.3f} | "
            f"{total(side, 'completion_tokens') / seconds[side]:.1f} | "
            f"{int(total(side, 'prompt_tokens'))}/{int(total(side, 'completion_tokens'))} |"
        )
    ratio = (total("framework", "rollouts") / seconds["framework"]) / (
        total("direct", "rollouts") / seconds["direct"]
    )
    print(
        f"\nframework/direct rollouts per second: {ratio:.3f} (framework share of time "
        f"{100 * (1 - ratio):+.1f} %); the tool calls alone (serial, {args.tasks * args.k} searches): "
        f"{tools_s:.3f} s"
    )


if __name__ == "__main__":
    main()
