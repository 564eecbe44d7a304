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


def test_the_script_runs_commands_whale_takes_with_the_stated_settings(tmp_path):
    log, whale = tmp_path / "calls.jsonl", tmp_path / "whale"
    whale.write_text(STAND_IN.format(python=sys.executable, root=str(ROOT), log=str(log)))
    whale.chmod(0o755)
    done = subprocess.run(
        ["bash", str(ROOT / "bench" / "two_domains.sh"), str(tmp_path / "out")],
        env={**os.environ, "WHALE": str(whale)}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    squad_calls, gsm8k_calls = ["compare", "paired", "report"], ["compare", "eval", "paired", "report"]
    assert [call[0] for call in calls] == squad_calls + gsm8k_calls  # no run finished: no final to read
    squad, gsm8k = (compared(call) for call in calls if call[0] == "compare")
    assert "fixed:0.25,1" == squad.schedule == gsm8k.schedule  # one decision a harness phase, as issue 46
    assert (squad.domain, squad.budget, squad.max_tokens) == ("squad:score=f1", 326, None)
    assert (gsm8k.domain, gsm8k.budget) == ("math", 400)
    assert gsm8k.whale_config().sampling["max_tokens"] == 512  # the GSM8K search's chain of thought
    rft = gsm8k.whale_config().rft
    assert gsm8k.budget // (rft.batch_size * rft.k) >= 20  # weight-only takes at least 20 steps
    start_read = next(call for call in calls if call[0] == "eval")
    assert start_read[start_read.index("--max-tokens") + 1] == "512"  # the start reads as the runs sample
