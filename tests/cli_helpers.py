"""Shared by the CLI tests: `whale search`'s arguments as its parser reads them, and the folder of a
finished `whale eval` read."""

from __future__ import annotations

import argparse
import json

from whale_cli import search


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    search.register(parser.add_subparsers())
    return parser.parse_args(["search", *argv])


def write_read(folder, per_task, *, split="test", harness="h0", adapter=None, dtype="bfloat16"):
    folder.mkdir(parents=True)
    means = [sum(s) / len(s) for s in per_task.values()]
    report = {
        "domain": "squad", "split": split, "harness": harness, "adapter": adapter,
        "k": len(next(iter(per_task.values()))),
        "serving": {"server": "embedded", "dtype": dtype},
        "tasks": len(per_task), "mean_at_k": sum(means) / len(means), "ci_low": 0.0, "ci_high": 1.0,
        "per_task": per_task,
    }  # fmt: skip
    (folder / "report.json").write_text(json.dumps(report))
    return folder
