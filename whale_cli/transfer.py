"""`whale transfer RUN_DIR --adapter base|RUN_DIR2`: a run's final harness under other weights.

WHALE asks whether a harness found with co-adapted weights still helps under
the base model or under another run's adapter; this evaluates exactly that on
the run's test tasks and writes RUN_DIR/transfer/<label>.json.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from whale_cli.run_settings import RunSettings
from whale_cli.wiring import evaluate_on_test, load_data, make_backend, served
from whale_dspy.errors import ConfigError
from whale_dspy.harness import HarnessSource
from whale_dspy.jsonl import atomic_write_json
from whale_dspy.records import AdapterRef


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("transfer", help="evaluate a run's final harness under other weights")
    parser.add_argument(
        "run_dir", type=Path, metavar="RUN_DIR", help="the run whose final harness is evaluated"
    )
    parser.add_argument(
        "--adapter", required=True, help="'base', or a run directory whose final adapter is used"
    )
    parser.add_argument(
        "--eval-k", dest="eval_k", type=int, default=None, help="samples per task (default: the run's)"
    )
    parser.set_defaults(func=run)


def weights_of(spec: str, settings: RunSettings) -> tuple[str, AdapterRef | None]:
    """(label, adapter) for 'base' or another run's final adapter on the same base model."""
    from optimizers.engine import load_report

    if spec == "base":
        return "base", None
    other = Path(spec)
    if RunSettings.from_run(other).model != settings.model:
        raise ConfigError(f"{other} was trained on another base model than {settings.model!r}")
    adapter = load_report(other).adapter
    if adapter is None:
        raise ConfigError(f"{other} trained no adapter (a harness-only run?); use --adapter base")
    return f"{other.name}-{adapter['name']}", AdapterRef(**adapter)


def run(args: argparse.Namespace) -> int:
    from optimizers.engine import load_report

    settings = RunSettings.from_run(args.run_dir)
    label, adapter = weights_of(args.adapter, settings)
    harness = load_report(args.run_dir).harness
    source = HarnessSource(name=harness["name"], code=(args.run_dir / harness["path"]).read_text())
    data = load_data(settings)
    k = args.eval_k or settings.eval_k
    with served(make_backend(settings, args.run_dir / "transfer")) as backend:
        if adapter is not None:
            backend.load_adapter(adapter)
        name = adapter.name if adapter else None
        report = evaluate_on_test(data, backend, settings, source, adapter=name, k=k)
    result = {"harness": harness, "adapter": None if adapter is None else vars(adapter), **report.to_dict()}
    atomic_write_json(args.run_dir / "transfer" / f"{label}.json", result)
    Console().print(
        f"harness {harness['name']} under {label}: mean@{k} {report.mean_at_k:.3f} "
        f"[{report.ci_low:.3f}, {report.ci_high:.3f}] over {report.tasks} tasks"
    )
    return 0
