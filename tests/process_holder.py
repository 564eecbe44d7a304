"""A user's script holding processes the library started, for the tests that kill it.

`python process_holder.py KIND FOLDER [MODEL]`, KIND one of:
  fake    `with` the shipped fake vLLM server (and its engine child) around a wait, as the README's
          `with embedded_server(...) as server:` does
  real    the same with the real embedded server of MODEL
  agent   a command proposer's agent (unjailed: its process group is this test's to check)
  worker  a command run as the trainer worker is (`run_in_group`), which leaves a child behind
It prints one JSON line once its processes are up ({"pgid": ..., "port": ...}), then waits to be killed.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlparse


def announce(pgid: int, port: int | None = None) -> None:
    print(json.dumps({"pgid": pgid, "port": port}), flush=True)


def hold_server(server) -> None:
    with server:
        announce(server.pid, urlparse(server.url).port)
        time.sleep(3600)


def hold_agent(folder: Path) -> None:
    from optimizers.harness.archive import HarnessArchive
    from optimizers.harness.proposers import CommandProposer

    pid_file = folder / "agent.pid"
    agent = CommandProposer(f"echo $$ > {pid_file}; sleep 3600 & exec sleep 3600", jail=None)
    threading.Thread(target=agent.propose, args=(HarnessArchive(folder / "archive"), 1), daemon=True).start()
    announce(wait_for_pid(pid_file))
    time.sleep(3600)


def hold_worker(folder: Path) -> None:
    from whale_dspy.lifeline import run_in_group

    pid_file = folder / "worker.pid"
    command = ["sh", "-c", f"echo $$ > {pid_file}; sleep 3600 & exec sleep 3600"]
    threading.Thread(target=run_in_group, args=(command,), kwargs={"timeout_s": None, "grace_s": 1}).start()
    announce(wait_for_pid(pid_file))
    time.sleep(3600)


def wait_for_pid(pid_file: Path) -> int:
    while not pid_file.exists() or not pid_file.read_text().strip():
        time.sleep(0.05)
    return int(pid_file.read_text())


def main(kind: str, folder: Path, model: str | None = None) -> None:
    if kind == "fake":
        from whale_dspy.testing import fake_vllm

        hold_server(fake_vllm.server(folder / "model", folder / "server.log", engine=True))
    elif kind == "real":
        from whale_dspy.backends import embedded_server

        hold_server(embedded_server(model, run_dir=folder))
    elif kind == "agent":
        hold_agent(folder)
    else:
        hold_worker(folder)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), *sys.argv[3:])
