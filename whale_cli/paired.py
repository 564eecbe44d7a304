"""`whale paired READ_DIR...`: pair `whale eval` reads of several programs task by task.

A `whale search`'s held-out reads (RUN_DIR/test/h0, RUN_DIR/test/best) are read folders too: two
searches' reads pair on the same rollout ids (give --labels, as both folders are named h0).

Give the reads in the order to subtract: every later read is compared with every earlier one, so
the start goes first. Reads of one split with the same --limit and --seed score the same tasks
with the same rollout ids, which is what makes the pairing tight. Seeds of one method join into one
read with the path separator (`whale-s1:whale-s2`): their scores are pooled task by task, so its pairs
are gains averaged over the seeds, and each such pair gets a second interval, a hierarchical bootstrap
over seeds then tasks, which holds the spread a further seed's training adds and decides its verdict.
A read may lie in a record archive (`bench/records/NAME.tar.gz/READ`): it is read where it was packed.
`--difference A,B,C,D` adds a difference of two gains, (A − B) − (C − D), with its own interval over
tasks: whether a harness gains more on a checkpoint than on the base weights, say.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from whale_dspy.errors import ConfigError
from whale_dspy.jsonl import atomic_write_text
from whale_dspy.record_archives import ARCHIVE_PATHS, RecordArchives
from whale_dspy.reporting.reads import READ_REPORT, Read, pooled_read, reads_table
from whale_dspy.stats import CI_LEVEL


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "paired", help="paired gains with CIs between `whale eval` reads of the same tasks"
    )
    parser.add_argument(
        "reads",
        nargs="+",
        type=Path,
        metavar="READ_DIR",
        help="`whale eval --out` folders, or a search's RUN_DIR/test/h0 and test/best; seeds of one "
        f"method joined by {os.pathsep!r} are pooled task by task into one read; {ARCHIVE_PATHS}",
    )
    parser.add_argument(
        "--labels", default=None, help="comma-separated names for the reads (default: their folder names)"
    )
    parser.add_argument("--out", type=Path, default=None, help="also write the Markdown table here")
    parser.add_argument(
        "--level",
        type=float,
        default=CI_LEVEL,
        help="the pairs' CI level; 1 - 0.05/m holds m comparisons together (Bonferroni), e.g. 0.9875 for 4",
    )
    parser.add_argument(
        "--difference",
        action="append",
        default=[],
        metavar="A,B,C,D",
        help="also (A − B) − (C − D) for these read labels, task by task with its CI: does a harness's "
        "gain on a checkpoint (A − B) beat its gain on the base (C − D)? Repeatable",
    )
    parser.set_defaults(func=run)


def load_reads(arguments: list[Path], labels: str | None) -> list[Read]:
    """One read per argument; an argument of several folders joined by the path separator pools them."""
    groups = [pool_members(argument) for argument in arguments]
    default = ["+".join(folder.name for folder in group) for group in groups]
    names = [label.strip() for label in labels.split(",")] if labels else default
    if len(names) != len(groups):
        raise ConfigError(f"--labels names {len(names)} reads, but {len(groups)} were given")
    if len(set(names)) < len(names):
        raise ConfigError(f"two reads are named alike ({', '.join(names)}): name them with --labels")
    with RecordArchives() as archives:
        return [
            pooled_read(name, [Read(folder.name, load_report(folder, archives)) for folder in group])
            for name, group in zip(names, groups, strict=True)
        ]


def pool_members(argument: Path) -> list[Path]:
    """The read folders of one argument: one, or several seeds joined by the path separator."""
    parts = str(argument).split(os.pathsep)
    if "" in parts or len({Path(part).resolve() for part in parts}) < len(parts):
        raise ConfigError(f"{argument}: pool distinct read folders, each named once")
    return [Path(part) for part in parts]


def load_report(folder: Path, archives: RecordArchives) -> dict[str, Any]:
    """A finished `whale eval` read's report, from its folder or the record archive holding it."""
    path = archives.local(folder) / READ_REPORT
    if not path.exists():
        raise ConfigError(
            f"{folder} holds no finished read ({READ_REPORT}); finish it with the same "
            "`whale eval --out` (a search writes its test reads when it ends)"
        )
    report = json.loads(path.read_text())
    if "per_task" not in report:
        raise ConfigError(f"{folder / READ_REPORT} is not a `whale eval` read (it has no per-task scores)")
    return report


def run(args: argparse.Namespace) -> int:
    differences = [[label.strip() for label in spec.split(",")] for spec in args.difference]
    table = reads_table(load_reads(args.reads, args.labels), level=args.level, differences=differences)
    print(table)
    if args.out is not None:
        atomic_write_text(args.out, table)
    return 0
