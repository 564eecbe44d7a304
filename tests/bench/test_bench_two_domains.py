"""bench/two_domains.sh (issue 59): every command it runs is one the CLI takes, with the settings the
script states. Its tiny mode: the script run against a stand-in `whale` that parses each command line
as `whale` does and records it (the runs themselves take days of CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from whale_cli.main import build_parser
from whale_cli.settings_file import settings_from_args

ROOT = Path(__file__).resolve().parents[2]
STAND_IN = """#!{python}
import json, sys
sys.path.insert(0, {root!r})
from whale_cli.main import build_parser
build_parser().parse_args(sys.argv[1:])  # exits 2 on a flag or value whale refuses
with open({log!r}, "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
"""


def compared(argv: list[str]):
    """A `whale compare` command line's settings (its one schedule, as each of its runs gets it)."""
    args = build_parser().parse_args(argv)
    (args.schedule,) = args.schedule
    return settings_from_args(args)


def run_script(tmp_path: Path, out: Path) -> list[list[str]]:
    """bench/two_domains.sh against the stand-in; the command lines it ran."""
    log, whale = tmp_path / "calls.jsonl", tmp_path / "whale"
    whale.write_text(STAND_IN.format(python=sys.executable, root=str(ROOT), log=str(log)))
    whale.chmod(0o755)
    done = subprocess.run(
        ["bash", str(ROOT / "bench" / "two_domains.sh"), str(out)],
        env={**os.environ, "WHALE": str(whale)}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_the_script_runs_commands_whale_takes_with_the_stated_settings(tmp_path):
    calls = run_script(tmp_path, tmp_path / "out")
    # no run has finished: nothing to read but GSM8K's start, no verdict drawn
    assert [call[0] for call in calls] == ["compare", "report", "compare", "eval", "report"]
    squad, gsm8k = (compared(call) for call in calls if call[0] == "compare")
    assert "fixed:0.25,1" == squad.schedule == gsm8k.schedule  # one decision a harness phase, as issue 46
    assert (squad.domain, squad.budget, squad.max_tokens) == ("squad:score=f1", 326, None)
    assert (gsm8k.domain, gsm8k.budget) == ("math", 400)
    assert gsm8k.whale_config().sampling["max_tokens"] == 512  # the GSM8K search's chain of thought
    rft = gsm8k.whale_config().rft
    assert gsm8k.budget // (rft.batch_size * rft.k) == 25  # weight-only's steps, as the script says
    start_read = next(call for call in calls if call[0] == "eval")
    assert start_read[start_read.index("--max-tokens") + 1] == "512"  # the start reads as the runs sample


def test_finished_runs_are_read_once_and_pooled_by_method(tmp_path):
    out = tmp_path / "out"
    for method in ("whale", "weight-only", "harness-only"):
        for seed in (1, 2):
            (out / "gsm8k" / method / f"seed-{seed}").mkdir(parents=True)
            read = out / "gsm8k" / "reads" / f"{method}-s{seed}"
            if (method, seed) != ("whale", 2):  # whale's seed 2 finished, not yet read
                read.mkdir(parents=True)
                (read / "report.json").write_text("{}")
    (out / "gsm8k" / "reads" / "start").mkdir()
    (out / "gsm8k" / "reads" / "start" / "report.json").write_text("{}")
    calls = [call for call in run_script(tmp_path, out) if call[1:3] != ["--domain", "squad:score=f1"]]
    reads = [call for call in calls if call[0] == "eval"]
    assert [call[call.index("--run") + 1] for call in reads] == [str(out / "gsm8k" / "whale" / "seed-2")]
    paired = next(call for call in calls if call[0] == "paired" and str(out / "gsm8k") in call[1])
    pooled = dict(zip(paired[paired.index("--labels") + 1].split(","), paired[1:5], strict=True))
    assert pooled["weight-only"].split(":") == [
        str(out / "gsm8k" / "reads" / f"weight-only-s{s}") for s in (1, 2)
    ]
    assert (
        pooled["start"] == str(out / "gsm8k" / "reads" / "start")
        and "harness-only-s2" in pooled["harness-only"]
    )
