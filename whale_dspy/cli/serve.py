"""`whale serve`: run the embedded vLLM server in the foreground until Ctrl-C."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="serve an embedded model (plus LoRA adapters) until Ctrl-C")
    parser.add_argument("--model", default="smollm2-135m", help="embedded model name, local folder or hub id")
    parser.add_argument("--port", type=int, default=None, help="loopback port (default: a free one)")
    parser.add_argument(
        "--dtype",
        default=None,
        help="vLLM --dtype (default: bfloat16 where the hardware has bf16 math, else float32)",
    )
    parser.add_argument("--log", type=Path, default=None, help="server log file (default: a temp file)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from whale_dspy.backends import VLLMServer

    log = args.log or Path(tempfile.mkdtemp(prefix="whale-serve-")) / "vllm.log"
    server = VLLMServer(args.model, log_path=log, port=args.port, dtype=args.dtype)
    with server:
        print(f"serving {args.model} as '{server.served_name}' at {server.url}/v1 (log {log}); Ctrl-C stops")
        try:
            while server.alive():
                time.sleep(1.0)
        except KeyboardInterrupt:
            print("stopping")
            return 0
    print(f"the server exited; see {log}")
    return 1
