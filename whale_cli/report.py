"""`whale report DIR [DIR ...]`: redraw a run's (or a comparison's) table and plot from its recorded
events.

Each DIR is one run directory, or a folder holding several (as `whale compare`
writes them); every run's report is rebuilt from its config, checkpoint and
events, so an interrupted run can be reported too. Naming several (one seed's
runs, say) reports just those together; `--out` writes the table and plot
elsewhere than the (first) DIR, e.g. beside committed records.

A DIR may be, or go on inside, a record archive (`bench/records/NAME.tar.gz/METHOD/seed-1`): it is
read as the folder it was packed from, and each run in it is named by that path; an archive is not
written to, so its report goes to --out.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markdown import Markdown
from rich.table import Table

from whale_dspy.errors import ConfigError
from whale_dspy.jsonl import atomic_write_json, atomic_write_text
from whale_dspy.record_archives import ARCHIVE_PATHS, RecordArchives, split_archive
from whale_dspy.reporting import markdown_table, paired_table, plot_curves, reach_table, summarize_methods
from whale_dspy.reporting.tables import count_cell, seeds_cell

REPORT_JSON, TABLE_MD, CURVE_PNG = "report.json", "report.md", "curve.png"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("report", help="redraw the table and plot of a run or a comparison")
    parser.add_argument(
        "paths",
        type=Path,
        nargs="+",
        metavar="DIR",
        help=f"run folders or folders of runs, reported together; {ARCHIVE_PATHS}",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="where report.json, report.md and curve.png go (default: DIR, when one folder)",
    )
    parser.set_defaults(func=run)


def run_dirs(path: Path, shown: Path | None = None) -> list[Path]:
    """The run directories at or below `path` (a run is a folder with config.json and events);
    `shown` is how the user named it (an archive path, when `path` is its extracted copy)."""
    if (path / "config.json").exists():
        return [path]
    runs = sorted(p.parent for p in path.rglob("config.json") if (p.parent / "events.jsonl").exists())
    if not runs:
        raise ConfigError(
            f"{shown or path} holds no run directory (no config.json with events.jsonl below it)"
        )
    return runs


def collect_reports(*paths: Path) -> list[dict[str, Any]]:
    """Every run's report below `paths` (folders or record archives), each run once, in the order
    given; a run is named as the user would reach it (through its archive, for one packed)."""
    with RecordArchives() as archives:
        runs: dict[Path, Path] = {}
        for path in paths:
            local = archives.local(path)
            for run_dir in run_dirs(local, path):
                runs.setdefault(run_dir.resolve(), path / run_dir.relative_to(local))
        return [run_report(run, shown) for run, shown in runs.items()]


def run_report(run: Path, shown: Path) -> dict[str, Any]:
    """One run's report, named (in it and in any refusal) by the path the user gave."""
    from optimizers import load_report

    try:
        report = load_report(run).to_dict()
    except ConfigError as error:
        raise ConfigError(str(error).replace(str(run), str(shown))) from error
    return {**report, "run_dir": str(shown)}


def write_outputs(out_dir: Path, reports: Sequence[dict[str, Any]], *, title: str) -> tuple[Path, Path]:
    """report.json (every run), report.md (the table) and curve.png (accuracy against rollouts)."""
    atomic_write_json(out_dir / REPORT_JSON, list(reports) if len(reports) > 1 else reports[0])
    k = next((r["curve"][0]["k"] for r in reports if r["curve"]), None)
    budgets = {f"{r['budget']} {r.get('budget_unit', 'rollouts')}" for r in reports}
    table = markdown_table(
        summarize_methods(reports), k=k, budget=budgets.pop() if len(budgets) == 1 else None
    )
    atomic_write_text(
        out_dir / TABLE_MD, f"# {title}\n\n{table}\n{paired_table(reports)}\n{reach_table(reports)}"
    )
    return out_dir / TABLE_MD, plot_curves(reports, out_dir / CURVE_PNG, title=title)


def print_summary(console: Console, reports: Sequence[dict[str, Any]]) -> None:
    table = Table(title="best and final test mean@k (95% bootstrap CI, mean over seeds)")
    for column in (
        "method",
        "seeds",
        "best",
        "final",
        "rollouts",
        "LM calls",
        "test rollouts",
        "proposer tokens",
        "wall s",
    ):
        table.add_column(column, justify="left" if column == "method" else "right")
    for s in summarize_methods(reports):
        table.add_row(
            s.method,
            seeds_cell(s),
            s.best.cell() if s.best else "n/a",
            s.final.cell() if s.final else "n/a",
            f"{s.rollouts:.0f}",
            count_cell(s.lm_calls),
            f"{s.eval_rollouts:.0f}",
            count_cell(s.proposer_tokens),
            f"{s.wall_seconds:.0f}",
        )
    console.print(table)
    console.print(Markdown(paired_table(reports)))  # the answer a run is for: a gain beyond noise or not


def print_phases(console: Console, report: dict[str, Any]) -> None:
    table = Table(title=f"{report['method']} ({report['schedule']}): phases")
    for column in ("#", "phase", "cycle", "units", "rollouts", "ended by"):
        table.add_column(column)
    for phase in report["phases"]:
        spent = f"{phase['start_rollouts']}-{phase['end_rollouts']}"
        table.add_row(
            str(phase["position"]),
            phase["phase"],
            str(phase["cycle"]),
            str(phase["units"]),
            spent,
            phase["reason"],
        )
    console.print(table)


def run(args: argparse.Namespace) -> int:
    console = Console()
    if len(args.paths) > 1 and args.out is None:
        raise ConfigError("several DIRs are reported together into --out, not into one of them: give --out")
    if args.out is None and split_archive(args.paths[0]) is not None:
        raise ConfigError(f"{args.paths[0]} is in a record archive, which is read, not written: give --out")
    if args.out is not None and split_archive(args.out) is not None:
        raise ConfigError(
            f"--out is inside a record archive, which is read, not written: {args.out}; "
            "give a folder outside it"
        )
    reports = collect_reports(*args.paths)
    out = args.out or args.paths[0]
    out.mkdir(parents=True, exist_ok=True)
    table, plot = write_outputs(out, reports, title=f"WHALE report: {out.name}")
    if len(reports) == 1:
        print_phases(console, reports[0])
    print_summary(console, reports)
    console.print(f"wrote {table} and {plot}")
    return 0


def decision_cell(decision: dict[str, Any] | None) -> str:
    """An iteration's decision in a few words: what was adopted with its paired gain, or why not."""
    if decision is None:
        return ""
    gain = decision.get("gain")
    if decision["adopted"] is None:
        return f"kept: {decision['reason']}"
    if gain is None or gain["low"] is None:
        return f"adopted ({decision['reason']})"
    return f"adopted {gain['gain']:+.3f} [{gain['low']:+.3f}, ...] on {gain['tasks']} tasks"
