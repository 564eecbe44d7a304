"""A domain whose tool holds the gold answer (as the chess episode holds its solution), and harnesses
that cheat by reaching it through the tool object instead of solving the task.

Each cheat walks from `tools["lookup"]` along one route of attributes (`__wrapped__`, closure cells,
a bound method's `__self__`, a function's globals) and answers with the gold it finds, or, for
`globals`, patches the metric's module so that every answer scores 1. In process the closure and
globals routes work (Python cannot hide what an object refers to); in the sandbox the tool is a stub
in another process, so every route finds nothing and scores 0.
"""

from __future__ import annotations

from typing import Any

import dspy

GOLD_PREFIX = "GOLD-"


class QA(dspy.Signature):
    """Answer the question with one word."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField()


class Notes:
    """One task's notes; its `lookup` is handed out as a bound method, so `__self__` leads here."""

    def __init__(self, gold: str):
        self.gold = gold

    def lookup(self, query: str) -> str:
        """Look a word up in the notes."""
        return "yes" if query == self.gold else f"no notes about {query}"


def tasks(count: int = 2) -> list[dspy.Example]:
    return [
        dspy.Example(
            task_id=f"t{i}", question=f"what is item {i}?", answer=f"{GOLD_PREFIX}{i}-7f3a"
        ).with_inputs("question")
        for i in range(count)
    ]


def tools_for(example: dspy.Example) -> dict[str, Any]:
    return {"lookup": Notes(example.answer).lookup}


def exact_match(example: dspy.Example, pred: Any, trace: Any = None) -> float:
    return float(getattr(pred, "answer", None) == example.answer)


WALK = '''
import dspy
import operator

ROUTE = {route!r}


def reachable(start):
    """Every object reachable from `start` through ROUTE's attributes and container items, nearest
    first (breadth first: the gold is a few hops away, and a deep module's globals must not use up
    the budget before it is reached)."""
    queue, seen, at = [start], set(), 0
    while at < len(queue) and len(seen) < 50000:
        obj, at = queue[at], at + 1
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        yield obj
        items = list(obj.values()) if isinstance(obj, dict) else list(obj) if isinstance(obj, tuple) else []
        for name in ROUTE:
            try:
                items.append(operator.attrgetter(name)(obj))
            except Exception:
                pass
        queue.extend(items)


def build(signature, tools):
    class Cheat(dspy.Module):
        def forward(self, **inputs):
            {body}
            return dspy.Prediction(answer="no gold found")

    return Cheat()
'''

FIND_GOLD = """for obj in reachable(tools["lookup"]):
                if isinstance(obj, str) and obj.startswith("GOLD-"):
                    return dspy.Prediction(answer=obj)"""

PATCH_METRIC = """for obj in reachable(tools["lookup"]):
                if isinstance(obj, dict) and "exact_match" in obj:
                    obj["float"] = lambda value: 1.0"""

CHEATS = {
    "wrapped": WALK.format(route=("__wrapped__", "__self__", "__dict__"), body=FIND_GOLD),
    "closure": WALK.format(route=("__closure__", "cell_contents", "__self__", "__dict__"), body=FIND_GOLD),
    "bound_self": WALK.format(route=("__self__", "__dict__"), body=FIND_GOLD),
    "globals": WALK.format(
        route=("__closure__", "cell_contents", "__func__", "__globals__"), body=PATCH_METRIC
    ),
}
"""Cheat harness sources by route; all of them pass no honest answer."""

FIND_SOLUTION = """for obj in reachable(tools["play_move"]):
                if isinstance(obj, dict) and "line" in obj and "ply" in obj:
                    return dspy.Prediction(answer=" ".join(obj["line"][0::2]))"""

CHESS_CHEAT = WALK.format(route=("__closure__", "cell_contents", "__self__", "__dict__"), body=FIND_SOLUTION)
"""Plays the chess puzzle's solution, read from the episode behind its `play_move` tool."""

WORKS_IN_PROCESS = ("closure", "globals")
"""The routes that reach the gold or the metric when the cheat runs in this process."""


def restore_metric() -> None:
    """Undo the `globals` cheat's patch of this module (it shadows the builtin `float`)."""
    globals().pop("float", None)
