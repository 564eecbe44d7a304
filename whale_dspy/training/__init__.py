"""The weight phase's trainer: SFT data with completion-only labels, LoRA training in a subprocess.

Importing this package stays light; torch and peft load only in the worker process.
"""

from __future__ import annotations

from whale_dspy.training.config import LoraTrainingConfig
from whale_dspy.training.lora_trainer import LoraTrainer
from whale_dspy.training.sft_data import Encoded, EncodedSet, encode_example, encode_examples, end_of_turn

__all__ = [
    "Encoded",
    "EncodedSet",
    "LoraTrainer",
    "LoraTrainingConfig",
    "encode_example",
    "encode_examples",
    "end_of_turn",
]
