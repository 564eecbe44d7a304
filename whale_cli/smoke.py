"""`whale smoke`: the serving smoke job, end to end in about two minutes on a CPU.

Starts the embedded server, builds a randomly initialised LoRA adapter on the
cached base, loads it under a versioned name and asks the base model and the
adapter the same question through DSPy: if both answer and the answers differ,
model resolution, serving, runtime adapter loading and DSPy wiring all work.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path

from whale_cli.arguments import add_model_argument
from whale_dspy.testing.random_adapter import make_random_adapter

logger = logging.getLogger(__name__)

QUESTION = "Name three colours of the rainbow."


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("smoke", help="serve the embedded model, load a fresh adapter, ask both")
    add_model_argument(parser)
    parser.add_argument("--run-dir", type=Path, default=None, help="where the log and adapter go (temp dir)")
    parser.add_argument("--question", default=QUESTION)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from whale_dspy.backends import embedded_server
    from whale_dspy.dspy_lm_seam import send_messages

    with tempfile.TemporaryDirectory(prefix="whale-smoke-") as tmp:
        run_dir = args.run_dir or Path(tmp)
        with embedded_server(args.model, run_dir=run_dir) as server:
            print(f"server up at {server.url} serving {server.base_model} (log {server.log_path})")
            adapter = make_random_adapter(
                server.base_model, run_dir / "smoke-r00-s0000", name="smoke-r00-s0000"
            )
            server.load_adapter(adapter)
            messages = [{"role": "user", "content": args.question}]
            answers = {}
            for label, name in (("base", None), (f"adapter {adapter.name}", adapter.name)):
                # Raw text, not a parsed DSPy field: a random adapter may well break the output format.
                answers[label] = send_messages(server.lm(name, max_tokens=48), messages)[0]
                print(f"[{label}] {answers[label]!r}")
    same = len(set(answers.values())) == 1
    print("FAIL: the adapter did not change the answer" if same else "OK: serving and adapters work")
    return 1 if same else 0
