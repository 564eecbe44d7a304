"""A `whale eval` read's folder: the settings that fix its rollouts, and whether it may continue.

A read of hundreds of tasks takes a CPU tens of minutes, so `--out DIR` holding an interrupted
read of the same settings continues it: the rollouts in DIR/traces.jsonl are kept and only the
rest are run, under the same rollout ids. DIR/config.json records the settings once the server
has said what it serves (with that model and its dtype: a read resumed on a machine without bf16
math would otherwise mix float32 samples into bfloat16 ones), so a first try that stopped before
(a wrong adapter path, say) leaves the folder free. A folder holding anything else is refused.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from whale_dspy.errors import ConfigError
from whale_dspy.evaluation import EvalReport
from whale_dspy.harness import HarnessSource
from whale_dspy.jsonl import atomic_write_json, read_jsonl, repair_jsonl
from whale_dspy.provenance import adapter_checksums, environment
from whale_dspy.records import Rollout
from whale_dspy.reporting.reads import READ_REPORT
from whale_dspy.rundir import CONFIG_FILE, RunDir, as_recorded, config_differences

TRACES_FILE = "traces.jsonl"
SERVED_MODEL, SERVED_DTYPE = "served_model", "served_dtype"
"""The settings' keys for what the server said it serves and in which dtype (None where a server
someone else started cannot say): a resumed read must get the same."""


def read_settings(
    args: argparse.Namespace, source: HarnessSource, sampling: dict[str, Any]
) -> dict[str, Any]:
    """What fixes a read's rollouts, as recorded: the same settings give the same rollout ids and
    samples (threads and the server's address may change)."""
    return as_recorded(
        {
            "domain": args.domain,
            "model": args.model,
            "harness": {"name": source.name, "digest": source.digest},
            "adapter": str(Path(args.adapter).resolve()) if args.adapter else None,
            "split": args.split,
            "limit": args.limit,
            "seed": args.seed,
            "k": args.k,
            "sampling": sampling,
            "output_format": args.output_format,
            "thinking": args.thinking,
        }
    )


def continued_rollouts(out: Path, settings: dict[str, Any]) -> list[Rollout]:
    """The rollouts an interrupted read of these settings left in `out` (none in a new folder);
    checked before any server starts, under the folder's sole-writer lock."""
    traces = out / TRACES_FILE
    repair_jsonl(traces)  # a torn last line (kill -9) must not precede the next rollout
    done = [Rollout.from_dict(record) for record in read_jsonl(traces)]
    recorded = RunDir(out).config()
    if not done:
        # A run's config has no served model; a finished read kept without its traces has a report.
        if (out / READ_REPORT).exists() or (recorded is not None and SERVED_MODEL not in recorded):
            raise ConfigError(
                f"{out} holds something other than an interrupted read (a run, or a read whose "
                f"{TRACES_FILE} is not there: gunzip a kept copy to continue it); use a new --out"
            )
        (out / CONFIG_FILE).unlink(missing_ok=True)  # a first try that stopped before any rollout
        return done
    if recorded is None:
        raise ConfigError(f"{out} holds traces of a read with no recorded settings; use a new --out")
    if SERVED_DTYPE not in recorded:  # refused before any server starts
        raise ConfigError(
            f'{out} holds a read begun before reads recorded their dtype: add "{SERVED_DTYPE}" (the '
            f"dtype its report or run log names) to its {CONFIG_FILE}, or use a new --out"
        )
    for key in (SERVED_MODEL, SERVED_DTYPE):
        recorded.pop(key, None)  # checked once the server says what it serves
    if differences := config_differences(recorded, settings):
        raise ConfigError(f"{out} holds a read with other settings: {'; '.join(differences)}")
    return done


def record_settings(out: Path, settings: dict[str, Any], served_model: str, served_dtype: str | None) -> None:
    """Keep the settings with the served model and dtype; a resumed read served otherwise is refused."""
    RunDir.open(out, {**settings, SERVED_MODEL: served_model, SERVED_DTYPE: served_dtype})


def write_read(
    out: Path,
    report: EvalReport,
    *,
    domain: str,
    harness: str,
    split: str,
    model: str,
    adapter: str | None,
    contained: bool,
    serving: dict[str, Any],
    run: str | None = None,
    output_format: str = "chat",
) -> None:
    """A finished read's report (what `whale paired` pairs): what was read (the served model, the
    adapter folder, whether the harness ran sandboxed), the machine, then the scores. `whale eval`
    and `whale search`'s held-out tests write the same record. Two searches' reads of one
    --test-tasks and --eval-k share tasks and rollout ids, so they pair tightly; a search's read
    pairs with a `whale eval` read of the same tasks by task only (other rollout ids). The adapter's
    files are recorded by checksum: folders are paths on one machine, and names are reused."""
    meta = {"domain": domain, "harness": harness, "split": split, "model": model, "adapter": adapter}
    meta["adapter_sha256"] = adapter_checksums(adapter)
    meta |= {"run": run, "contained": contained, "serving": serving, "output_format": output_format}
    atomic_write_json(out / READ_REPORT, {**meta, "environment": environment(), **report.to_dict()})
