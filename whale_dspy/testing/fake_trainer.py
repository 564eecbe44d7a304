"""`FakeTrainer`: a `WeightTrainer` without torch, for fast tests of the weight phase.

It records every call (so a test can assert the exact SFT data an optimizer
built), makes the same up-front checks as `LoraTrainer`, and writes a
placeholder adapter folder that only a fake backend would accept.
"""

from __future__ import annotations

import json
from collections.abc import Container, Sequence
from dataclasses import dataclass
from pathlib import Path

from whale_dspy.errors import TrainingError
from whale_dspy.records import AdapterRef, SFTExample, TrainResult
from whale_dspy.training.lora_trainer import adapter_dir, check_request


@dataclass(frozen=True)
class TrainCall:
    """One recorded `train` call, with its arguments as given."""

    examples: tuple[SFTExample, ...]
    base: str
    parent: AdapterRef | None
    name: str
    out_dir: Path


class FakeTrainer:
    """Records calls and returns scripted losses.

    losses: the loss of call i is losses[i]; with none given, 1 / (i + 1), a
    falling curve. fail_calls: indices of calls that raise TrainingError after
    being recorded (as a crashed worker would), writing no adapter.
    tokens are counted as whitespace-separated words of the completions.
    """

    def __init__(self, losses: Sequence[float] | None = None, fail_calls: Container[int] = ()):
        self.losses = losses
        self.fail_calls = fail_calls
        self.calls: list[TrainCall] = []

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
        index = len(self.calls)
        self.calls.append(TrainCall(tuple(examples), base, parent, name, out_dir))
        if index in self.fail_calls:
            raise TrainingError(f"FakeTrainer: call {index} ({name}) scripted to fail")
        if self.losses is not None and index >= len(self.losses):
            raise TrainingError(f"FakeTrainer: call {index} but only {len(self.losses)} losses scripted")
        path = adapter_dir(out_dir)
        path.mkdir(parents=True)
        config = {"peft_type": "LORA", "base_model_name_or_path": base, "fake": True}
        (path / "adapter_config.json").write_text(json.dumps(config))
        return TrainResult(
            adapter=AdapterRef(name, str(path.resolve()), base, parent.name if parent else None),
            loss=self.losses[index] if self.losses is not None else 1.0 / (index + 1),
            examples=len(examples),
            tokens=sum(len(e.completion.split()) for e in examples),
            seconds=0.0,
        )
