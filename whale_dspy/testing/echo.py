"""The echo task: "repeat the given word", the smallest task the base SmolLM2 sometimes gets right.

Base SmolLM2-135M answers it correctly about a fifth of the time at temperature 1.0 in DSPy's
JSON output format, so rejection sampling has something to keep: the learning test and the RFT
step benchmark both run on it.
"""

from __future__ import annotations

import dspy

from whale_dspy.harness import HarnessSource

WORDS = [
    *("apple", "river", "stone", "cloud", "tiger", "lemon", "piano", "candle", "forest", "mirror", "rocket"),
    *("garden", "silver", "window", "castle", "ocean", "bread", "chair", "horse", "paper", "smile", "train"),
    *("water", "yellow", "bottle", "butter", "camera", "dragon", "engine", "finger", "guitar", "hammer"),
    *("island", "jacket", "kitten", "ladder", "marble", "needle", "orange", "pencil", "rabbit", "saddle"),
    *("tunnel", "violin", "wallet", "zebra", "basket", "cotton"),
]
PLAIN_PREDICT = HarnessSource(
    "echo_h0", "import dspy\n\n\ndef build(signature, tools):\n    return dspy.Predict(signature)\n"
).vouched()
"""The echo task's harness: one Predict call (shipped code, so vouched for)."""


class Echo(dspy.Signature):
    """Repeat the given word exactly."""

    word: str = dspy.InputField()
    answer: str = dspy.OutputField()


def echo_metric(example: dspy.Example, pred: dspy.Prediction, trace: object = None) -> float:
    return float(str(pred.answer).strip().lower() == example.answer)


def echo_tasks(words: list[str]) -> list[dspy.Example]:
    return [dspy.Example(word=w, answer=w, task_id=w).with_inputs("word") for w in words]
