"""Walk object.__subclasses__() to os._wrap_close and call system() from its globals."""

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
        for cls in ().__class__.__base__.__subclasses__():
            if cls.__name__ == "_wrap_close":
                system = cls.__init__.__globals__["system"]
                return dspy.Prediction(answer=str(system("id")))
        return self.solve(question=question)


def build(signature, tools):
    return Harness(signature, tools)
