"""Serving benchmark: DSPy's LM path against raw HTTP to the same vLLM server, in one run.

For the base model and a fresh random adapter, at each concurrency level, the
same kind of chat requests go straight to /v1/chat/completions (httpx) and
through `server.lm(...)` (dspy.LM), in A-B-B-A rounds so warm-up and the load
of other work on the machine hit both alike. Completion tokens per second of
both and their ratio (goal >= 0.9) show what the DSPy layer costs.

    python bench/serving.py [--dtype bfloat16] [--levels 1 8 32] [--max-tokens 64]

With `--dtypes float32 bfloat16` it instead serves the base model in both
dtypes at once and compares their raw HTTP throughput the same way (how the
default dtype was chosen).

With `--before-after` it serves the model twice at once: A with the settings a
run's own server had before issue 22 (runtime LoRA, whole-prompt prefill), B with
today's defaults (`embedded_server()`: on the CPU build the adapter merged into
the weights, chunked prefill), and sends both the same requests through DSPy,
for the base and a random adapter; it also times each adapter load (written to
served) and prints each server's adapter/base throughput (goal >= 0.8). `--tiny` runs
that comparison on the shipped fake backend in seconds (CI runs it, so the script
cannot rot).
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import platform
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

from whale_dspy.backends import default_dtype, embedded_server
from whale_dspy.offline import local_only
from whale_dspy.records import AdapterRef
from whale_dspy.testing.random_adapter import make_random_adapter

TOPICS = ("rivers", "bread", "chess", "owls", "glass", "rain", "maps", "bees", "salt", "tea", "ice", "wool")

Runner = Callable[[list[str]], int]
"""Sends a batch of prompts at the bench's concurrency; returns the completion tokens received."""


def prompts(count: int, tag: int) -> list[str]:
    """Distinct prompts per round, so the prefix cache helps no round more than another."""
    return [
        f"Write a short paragraph about {TOPICS[i % len(TOPICS)]} (note {tag}-{i})." for i in range(count)
    ]


def http_runner(url: str, model: str, level: int, max_tokens: int) -> Runner:
    def one(client: httpx.Client, prompt: str) -> int:
        body = {"model": model, "messages": [{"role": "user", "content": prompt}]}
        body |= {"temperature": 0.0, "max_tokens": max_tokens}
        response = client.post(f"{url}/v1/chat/completions", json=body, timeout=600)
        response.raise_for_status()
        return response.json()["usage"]["completion_tokens"]

    def run(batch: list[str]) -> int:
        limits = httpx.Limits(max_connections=level)
        with httpx.Client(limits=limits) as client, ThreadPoolExecutor(level) as pool:
            return sum(pool.map(lambda prompt: one(client, prompt), batch))

    return run


def dspy_runner(server, adapter: str | None, level: int, max_tokens: int) -> Runner:
    def run(batch: list[str]) -> int:
        lm = server.lm(adapter, max_tokens=max_tokens, temperature=0.0)
        with ThreadPoolExecutor(level) as pool:
            list(pool.map(lm, batch))
        return sum(entry["usage"]["completion_tokens"] for entry in lm.history)

    return run


def abba(a: Runner, b: Runner, level: int) -> tuple[float, float, int, int]:
    """Tokens/s of a and b over rounds a, b, b, a (the caller warms both up first)."""
    totals = {id(a): [0, 0.0], id(b): [0, 0.0]}
    for round_, runner in enumerate((a, b, b, a)):
        batch = prompts(max(level, 2), 10 * level + round_)
        started = time.perf_counter()
        totals[id(runner)][0] += runner(batch)
        totals[id(runner)][1] += time.perf_counter() - started
    (a_tokens, a_s), (b_tokens, b_s) = totals[id(a)], totals[id(b)]
    return a_tokens / a_s, b_tokens / b_s, a_tokens, b_tokens


def dspy_vs_http(args: argparse.Namespace) -> list[tuple]:
    rows = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        embedded_server(args.model, run_dir=Path(tmp), dtype=args.dtype) as server,
    ):
        ref = make_random_adapter(server.base_model, Path(tmp) / "bench-r00", name="bench-r00")
        server.load_adapter(ref)
        for adapter in (None, ref.name):
            for level in args.levels:
                name = adapter or server.served_name
                http_runner(server.url, name, level, 4)(prompts(level, -level))  # warm-up
                http = http_runner(server.url, name, level, args.max_tokens)
                via_dspy = dspy_runner(server, adapter, level, args.max_tokens)
                rows.append((name, level, max(level, 2), *abba(http, via_dspy, level)))
                print("{} c={} n={}: http {:.1f} tok/s, dspy {:.1f} tok/s".format(*rows[-1]), flush=True)
    return rows


def before_after_servers(args: argparse.Namespace, tmp: Path) -> tuple[Any, Any]:
    """(before, after) servers, not started: the shipped fake backend twice with --tiny."""
    if args.tiny:
        from whale_dspy.testing import FakeBackend, ScriptedLM

        fakes = [FakeBackend(ScriptedLM({"": "a short paragraph of six words"})) for _ in range(2)]
        return fakes[0], fakes[1]
    from whale_dspy.backends import VLLMServer

    before = VLLMServer(args.model, log_path=tmp / "before.log", chunked_prefill=False, kv_cache_gib=1)
    return before, embedded_server(args.model, run_dir=tmp, kv_cache_gib=1)


def bench_adapter(args: argparse.Namespace, base: str | None, tmp: Path) -> AdapterRef:
    """A random LoRA adapter for the model (a name only, for the fake backend with --tiny)."""
    if args.tiny:
        return AdapterRef("bench-r00", str(tmp), "base")
    return make_random_adapter(base, tmp / "bench-r00", name="bench-r00")


def before_after(args: argparse.Namespace) -> list[tuple]:
    from whale_dspy.backends.merged_server import MergedAdapterServer

    rows = []
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        before, after = before_after_servers(args, Path(tmp))
        servers = [before, after]
        for server in servers:  # the fake backend is no context manager: start and stop explicitly
            server.start()
            stack.callback(server.stop)
        ref = bench_adapter(args, after.base_model, Path(tmp))
        for server in servers:
            started = time.perf_counter()
            server.load_adapter(ref)
            print(
                f"{type(server).__name__}: adapter written -> served in {time.perf_counter() - started:.3f} s"
            )
        for adapter in (None, ref.name):
            for level in args.levels:
                for server in servers:
                    dspy_runner(server, adapter, level, 4)(prompts(level, -level))  # warm-up (and swap)
                runners = [dspy_runner(server, adapter, level, args.max_tokens) for server in servers]
                rows.append((adapter or "base", level, max(level, 2), *abba(*runners, level)))
                print("{} c={} n={}: before {:.1f} tok/s, after {:.1f} tok/s".format(*rows[-1]), flush=True)
        if isinstance(after, MergedAdapterServer):
            print(f"merged serving: {after.gate.swaps} swaps, {after.gate.swap_seconds:.2f} s in all")
    by_key = {(row[0], row[1]): row for row in rows}
    for level in args.levels:
        base, adapter = by_key[("base", level)], by_key[(ref.name, level)]
        print(f"c={level}: adapter/base before {adapter[3] / base[3]:.2f}, after {adapter[4] / base[4]:.2f}")
    return rows


def dtype_vs_dtype(args: argparse.Namespace) -> list[tuple]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        servers = [
            stack.enter_context(embedded_server(args.model, run_dir=Path(tmp) / d, dtype=d, kv_cache_gib=1))
            for d in args.dtypes
        ]
        for level in args.levels:
            first, second = (http_runner(s.url, "base", level, args.max_tokens) for s in servers)
            for server in servers:
                http_runner(server.url, "base", level, 4)(prompts(level, -level))  # warm-up
            rows.append((" vs ".join(args.dtypes), level, max(level, 2), *abba(first, second, level)))
            print("{} c={} n={}: {:.1f} vs {:.1f} tok/s".format(*rows[-1]), flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default=None, help="default: the backend's default_dtype()")
    parser.add_argument("--dtypes", nargs=2, default=None, help="compare two dtypes instead")
    parser.add_argument(
        "--before-after", action="store_true", help="compare pre-issue-22 and today's defaults"
    )
    parser.add_argument("--tiny", action="store_true", help="--before-after on the shipped fake backend (CI)")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args(argv)
    args.before_after = args.before_after or args.tiny
    local_only()
    logging.getLogger("dspy").setLevel(logging.ERROR)  # one "truncated" warning per capped completion
    rows = (
        dtype_vs_dtype(args)
        if args.dtypes
        else before_after(args)
        if args.before_after
        else dspy_vs_http(args)
    )
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    what = " vs ".join(args.dtypes) if args.dtypes else f"{args.dtype or default_dtype()}, HTTP vs DSPy"
    if args.before_after:
        what = f"{default_dtype()}, A = before issue 22 (runtime LoRA, whole prefill), B = today's defaults"
    print(f"\n{stamp}, {platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, "
          f"{args.model}, {what}, {args.max_tokens}-token completions, A-B-B-A rounds\n")  # fmt: skip
    print("| served | concurrency | requests/round | A tok/s | B tok/s | B/A | tokens (A/B) |")
    print("|---|---|---|---|---|---|---|")
    for name, level, n, a_tps, b_tps, a_tokens, b_tokens in rows:
        ratio = b_tps / a_tps
        print(f"| {name} | {level} | {n} | {a_tps:.1f} | {b_tps:.1f} | {ratio:.2f} | {a_tokens}/{b_tokens} |")


if __name__ == "__main__":
    main()
