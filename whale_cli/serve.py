"""`whale serve`: run the embedded vLLM server in the foreground until Ctrl-C.

It also ends (exit 1) when the server process exits or when its engine stops
answering /health, so that workers sharing it fail fast instead of talking to an
API server whose engine is gone.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from whale_cli.arguments import add_dtype_argument, add_model_argument, add_thinking_argument

HEALTH_EVERY_S = 30.0
"""Seconds between /health checks; a loaded CPU server can take seconds to answer one."""

HEALTH_FAILURES = 3
"""Consecutive failed /health checks that end `whale serve`: one slow answer is not a death."""

CPU_RUNTIME_LORA_WARNING = (
    "note: on vLLM's CPU build this server runs adapters as runtime LoRA, several times slower than "
    "the base model (3.8 against 23.8 tokens/s on the 0.5B model, bench/RESULTS.md), and a request "
    "for one slows every batch it joins. A run without --server-url starts its own server, which "
    "merges its adapter into the weights; share this one between jobs on the base model."
)
"""Printed at start on the CPU build: sharing one CPU server between adapter jobs cost a search its
comparison (bench/RESULTS.md, finding (2))."""


class Watched(Protocol):
    def alive(self) -> bool: ...

    def healthy(self) -> bool: ...


def watch(
    server: Watched,
    *,
    health_every_s: float = HEALTH_EVERY_S,
    failures: int = HEALTH_FAILURES,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Block until the server process exits or its /health fails `failures` times in a row; say which."""
    failed, since_check = 0, 0.0
    while server.alive():
        sleep(1.0)
        since_check += 1.0
        if since_check < health_every_s:
            continue
        since_check = 0.0
        failed = 0 if server.healthy() else failed + 1
        if failed >= failures:
            return f"the server's /health failed {failed} times in a row (its engine may have died)"
    return "the server exited"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="serve an embedded model (plus LoRA adapters) until Ctrl-C")
    add_model_argument(parser)
    parser.add_argument("--port", type=int, default=None, help="loopback port (default: a free one)")
    add_dtype_argument(parser)
    parser.add_argument("--log", type=Path, default=None, help="server log file (default: a temp file)")
    parser.add_argument(
        "--adapter-store", dest="adapter_store", type=Path, default=None, metavar="DIR",
        help="serve the adapters in DIR by name on first use (a replica set's store; vLLM's resolver)",
    )  # fmt: skip
    add_thinking_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from whale_dspy.backends import VLLMServer
    from whale_dspy.backends.vllm_server import cpu_build, thinking_template_kwargs

    log = args.log or Path(tempfile.mkdtemp(prefix="whale-serve-")) / "vllm.log"
    server = VLLMServer(
        args.model,
        log_path=log,
        port=args.port,
        dtype=args.dtype,
        adapter_store=args.adapter_store,
        chat_template_kwargs=thinking_template_kwargs(args.thinking),
    )
    with server:
        print(f"serving {args.model} as '{server.served_name}' at {server.url}/v1 (log {log}); Ctrl-C stops")
        if cpu_build():
            print(CPU_RUNTIME_LORA_WARNING)
        try:
            reason = watch(server)
        except KeyboardInterrupt:
            print("stopping")
            return 0
    print(f"{reason}; see {log}")
    return 1
