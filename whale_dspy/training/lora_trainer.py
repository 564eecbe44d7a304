"""`LoraTrainer`: the real `WeightTrainer`, training a LoRA adapter in a subprocess.

Layout of one training run (`out_dir`, one per adapter name, never reused):
    spec.json      what the worker reads: base, parent, config, paths
    examples.json  the SFT examples, as given
    train.log      the worker's stdout and stderr
    metrics.json   loss per step, tokens, seconds
    adapter/       the PEFT adapter (safetensors + adapter_config.json) that
                   vLLM and `PeftModel.from_pretrained` load
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from filelock import FileLock

import whale_dspy
from whale_dspy.errors import TrainingError
from whale_dspy.lifeline import run_in_group
from whale_dspy.records import AdapterRef, SFTExample, TrainResult
from whale_dspy.training.config import LoraTrainingConfig

log = logging.getLogger(__name__)

LOG_TAIL_LINES = 40
WORKER_GRACE_S = 5.0
"""How long a worker left behind by a dead caller gets between SIGTERM and SIGKILL."""

CPU_TRAINING_LOCK = Path(tempfile.gettempdir()) / "whale-dspy-cpu-training.lock"
"""CPU trainings on one machine take turns: two study workers training the 0.5B model at once
beside its server need 2 x 8 GB and got one OOM-killed on a 24 GB machine, and they share the
same cores anyway. GPU trainings do not wait. A call's reported seconds include its wait."""


def adapter_dir(out_dir: Path) -> Path:
    """Where a training run in out_dir puts its adapter."""
    return Path(out_dir) / "adapter"


def check_request(
    examples: Sequence[SFTExample], *, base: str, parent: AdapterRef | None, name: str, out_dir: Path
) -> None:
    """The checks every trainer makes before spending anything (the fake one included)."""
    if not examples:
        raise TrainingError("no examples to train on: the weight phase needs at least one accepted rollout")
    if not name:
        raise TrainingError("the adapter needs a non-empty, never-reused name")
    if adapter_dir(out_dir).exists():
        raise TrainingError(
            f"{adapter_dir(out_dir)} already exists: adapter names are never reused, give a new name/out_dir"
        )
    if parent is not None and parent.base != base:
        raise TrainingError(f"parent adapter {parent.name} was trained on {parent.base!r}, not on {base!r}")


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    if not path.exists():
        return "(no log written)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


class LoraTrainer:
    """Trains one LoRA adapter per call, in `python -m whale_dspy.training.worker`.

    timeout_s bounds one call (None: no bound); a worker past it is killed and
    the call raises TrainingError, so a hung run cannot stall the optimizer.

    cpu_threads: torch threads of a CPU training (`OMP_NUM_THREADS` in the environment wins).
    None takes every core this process may use: beside a run's own server, which idles while
    its run trains, two threads trained a step 1.6x faster than one (bench/RESULTS.md). Pass 1
    beside a server that others sample from meanwhile: next to its busy compute thread two
    threads trained about 8x slower than one.

    launcher: a command prefix that runs the worker on another host or device (`ssh trainhost`,
    `srun --gres=gpu:1`); the run folder and this interpreter must be at the same paths there (a
    shared file system), since the worker reads its spec and writes the adapter by path. The
    adapter then reaches the servers through the replica set's store, not a local path.
    """

    def __init__(
        self,
        config: LoraTrainingConfig | None = None,
        *,
        timeout_s: float | None = None,
        cpu_threads: int | None = None,
        launcher: Sequence[str] = (),
    ):
        self.config = config or LoraTrainingConfig()
        self.timeout_s = timeout_s
        self.cpu_threads = cpu_threads or len(os.sched_getaffinity(0))
        self.launcher = tuple(launcher)

    def train(
        self,
        examples: Sequence[SFTExample],
        *,
        base: str,
        parent: AdapterRef | None,
        name: str,
        out_dir: Path,
    ) -> TrainResult:
        out_dir = Path(out_dir)
        check_request(examples, base=base, parent=parent, name=name, out_dir=out_dir)
        started = time.monotonic()
        spec_path = self._write_spec(examples, base=base, parent=parent, out_dir=out_dir)
        log.info("training adapter %s on %d examples (log: %s)", name, len(examples), out_dir / "train.log")
        self._run_worker(spec_path, out_dir / "train.log")
        metrics = json.loads((out_dir / "metrics.json").read_text())
        return TrainResult(
            adapter=AdapterRef(
                name=name,
                path=str(adapter_dir(out_dir).resolve()),
                base=base,
                parent=parent.name if parent else None,
            ),
            loss=metrics["loss"],
            examples=metrics["examples"],
            tokens=metrics["tokens"],
            seconds=time.monotonic() - started,
        )

    def _write_spec(
        self, examples: Sequence[SFTExample], *, base: str, parent: AdapterRef | None, out_dir: Path
    ) -> Path:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "metrics.json").unlink(missing_ok=True)
        examples_path = out_dir / "examples.json"
        examples_path.write_text(json.dumps([e.to_dict() for e in examples], indent=1))
        spec = {
            "base": base,
            "parent": parent.path if parent else None,
            "config": self.config.to_dict(),
            "examples": str(examples_path.resolve()),
            "adapter_dir": str(adapter_dir(out_dir).resolve()),
            "metrics": str((out_dir / "metrics.json").resolve()),
        }
        spec_path = out_dir / "spec.json"
        spec_path.write_text(json.dumps(spec, indent=2))
        return spec_path

    def _run_worker(self, spec_path: Path, log_path: Path) -> None:
        """Run the worker with this interpreter; the tree holding whale_dspy goes first on its path.
        Through a launcher, the variables it needs travel on its command line (`env`)."""
        source_root = str(Path(whale_dspy.__file__).resolve().parent.parent)
        own = {"PYTHONPATH": os.pathsep.join(filter(None, [source_root, os.environ.get("PYTHONPATH")]))}
        if self.config.device == "cpu":
            own["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS", str(self.cpu_threads))
        command = [sys.executable, "-m", "whale_dspy.training.worker", str(spec_path.resolve())]
        if self.launcher:
            command = [*self.launcher, "env", *(f"{name}={value}" for name, value in own.items()), *command]
        env = {**os.environ, **own}
        turn = FileLock(CPU_TRAINING_LOCK) if self.config.device == "cpu" else contextlib.nullcontext()
        with turn, log_path.open("w") as log_file:
            try:
                code = run_in_group(
                    command,
                    timeout_s=self.timeout_s,
                    grace_s=WORKER_GRACE_S,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    env=env,
                )
            except subprocess.TimeoutExpired as exc:
                raise TrainingError(
                    f"training ran past timeout_s={self.timeout_s} and was killed; "
                    f"last lines of {log_path}:\n{log_tail(log_path)}"
                ) from exc
        if code != 0:
            raise TrainingError(
                f"training worker exited with {code}; last lines of {log_path}:\n{log_tail(log_path)}"
            )
