"""A run directory held open by another process, as a second `whale` command would hold it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HOLD_WRITER = """
import sys
from whale_dspy.rundir import sole_writer
with sole_writer(sys.argv[1]):
    print("holding", flush=True)
    sys.stdin.read()
"""


@contextmanager
def written_by_another_process(run_dir: Path) -> Iterator[None]:
    """Hold `run_dir`'s writer lock in a child until the block ends; the OS drops it when the child exits."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_WRITER, str(run_dir)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout.readline() == b"holding\n"
        yield
    finally:
        holder.communicate(b"")  # closing its stdin lets it exit
