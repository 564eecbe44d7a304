"""The `whale` command: one subcommand per module in this package.

Each subcommand module defines `register(subparsers)` which adds its parser and
sets `func=run` on it; `run(args) -> int` is the exit status. The CLI owns the
terminal (tables, progress bars); library code only logs.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import signal
import sys
from typing import NoReturn

from whale_cli.logs import quiet_libraries
from whale_dspy.backends.process import kill_all_now
from whale_dspy.errors import WhaleError
from whale_dspy.offline import local_only
from whale_dspy.progress import TRUNCATIONS

SUBCOMMANDS = (
    "whale_cli.serve",
    "whale_cli.smoke",
    "whale_cli.eval",
    "whale_cli.train",
    "whale_cli.search",
    "whale_cli.study",
    "whale_cli.run",
    "whale_cli.compare",
    "whale_cli.report",
    "whale_cli.paired",
    "whale_cli.transfer",
    "whale_cli.config",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="whale", description="WHALE: joint harness-weight optimization of DSPy agents."
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true",
        help="log at DEBUG level, libraries (httpx, bm25s, matplotlib, ...) included; without it they "
        "log only warnings",
    )  # fmt: skip
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in SUBCOMMANDS:
        importlib.import_module(module_name).register(subparsers)
    return parser


def exit_now(*, flush: bool = True) -> NoReturn:
    """SIGKILL the process groups started through ManagedProcess (vLLM servers) and exit 130 without
    joining threads: an interrupted evaluation's rollouts in flight still wait on a server that
    outlives the command (--server-url), and the interpreter's normal exit joins every
    concurrent.futures worker, which kept an interrupted `whale train` for minutes. atexit handlers
    and finalizers are skipped too; `flush` saves the log and output first (not from a signal
    handler, which may have interrupted a write), and nothing, not a closed pipe, stops the exit."""
    try:
        kill_all_now()
        if flush:
            logging.shutdown()
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
    finally:
        os._exit(130)


class StopOnSignals:
    """Ctrl-C or SIGTERM unwinds at once like KeyboardInterrupt: every `with server:` stops its
    vLLM, and evaluations do not wait for their rollouts in flight. A second signal exits at once."""

    def __init__(self) -> None:
        self.received = 0

    def __call__(self, signum: int, frame: object) -> None:
        self.received += 1
        if self.received == 1:
            print(
                f"whale: {signal.Signals(signum).name}: stopping the servers and sandboxes this run "
                "started; send it again to stop at once",
                file=sys.stderr,
            )
            raise KeyboardInterrupt
        exit_now(flush=False)


def _wide_tables_in_logs() -> None:
    """Rich sizes a console that is no terminal (a log file, a pipe) at 80 columns and cuts the
    run table's columns ("rollo..."): a log gets room for whole tables unless COLUMNS says."""
    if not sys.stdout.isatty():
        os.environ.setdefault("COLUMNS", "200")


def main(argv: list[str] | None = None) -> int:
    local_only()
    _wide_tables_in_logs()
    stop = StopOnSignals()
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    if not args.verbose:
        # DSPy warns once per completion cut at max_tokens (121 times in the README job): evaluations
        # count them instead (`EvalReport.truncated_calls`, the evaluation events); -v shows them
        logging.getLogger("dspy.clients.lm").addFilter(TRUNCATIONS)
        quiet_libraries()
    try:
        return int(args.func(args) or 0)
    except WhaleError as error:
        print(f"whale: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        exit_now()  # every `with server:` has unwound; a stop cut short leaves nothing behind


if __name__ == "__main__":
    sys.exit(main())
