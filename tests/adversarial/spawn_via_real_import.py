"""Import subprocess with the real __import__ taken from dspy's builtins and spawn a shell."""

from __future__ import annotations

import dspy

EXPECTED = "forbidden call"
"""The failure the sandbox must record with the static check off (None: no failure, no leak, score 0)."""
STATIC = "forbidden call"
"""What the static check reports before any process starts (None: it passes the check)."""


class Harness(dspy.Module):
    def __init__(self, signature, tools):
        super().__init__()
        self.solve = dspy.Predict(signature)
        self.tools = tools

    def forward(self, question: str) -> dspy.Prediction:
        real_import = dspy.__builtins__["__import__"]
        subprocess = real_import("subprocess")
        subprocess.Popen(["/bin/sh", "-c", "sleep 1000"])
        return self.solve(question=question)


def build(signature, tools):
    return Harness(signature, tools)
