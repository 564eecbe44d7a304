"""A harness's predictors as DSPy sees them, kept across the fresh build each call makes.

A HarnessProgram builds its inner program per call (tools are per task), so the
predictors a DSPy optimizer changes (demos, instructions, a predictor's LM) live
on one persistent copy, the template, built once with stand-in tools it never
calls. Each call's fresh build then takes what changed: a rollout copies the
template's demos and changed signatures into its own predictors (its LM stays
the rollout's, so samples keep their ids and seeds); a direct call runs the
template's predictor objects themselves, so DSPy's traces name the predictors
an optimizer like BootstrapFewShot holds.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

import dspy

from whale_dspy.errors import HarnessError

_STEP = re.compile(r"\.?(\w+)|\[(\d+)\]|\['([^']*)'\]")
"""One step of a DSPy parameter name: `.attr`, `[index]` or `['key']` (see Module.named_parameters)."""


class StandInTools(dict):
    """The tools a template is built with: any name, a function that refuses to run (the template
    is never called; every call builds afresh with the task's real tools)."""

    def __missing__(self, name: str) -> Any:
        def stand_in(*args: Any, **kwargs: Any) -> Any:
            raise HarnessError(f"tool {name!r} runs only inside a call of the program")

        stand_in.__name__ = name
        return stand_in


@dataclass
class Template:
    """The persistent predictors and what they were as built (to tell what an optimizer changed)."""

    program: dspy.Module
    as_built: dict[str, tuple[list[Any], type[dspy.Signature]]]

    @classmethod
    def of(cls, program: dspy.Module) -> Template:
        built = {name: (copy.deepcopy(p.demos), p.signature) for name, p in program.named_predictors()}
        return cls(program, built)

    def copy(self, lm: dspy.BaseLM | None = None) -> Template:
        """An independent copy; with `lm`, predictors that had an LM get this one (a rebound program)."""
        program = self.program.deepcopy()
        if lm is not None:
            for _, predictor in program.named_predictors():
                if predictor.lm is not None:
                    predictor.lm = lm
        return Template(program, self.as_built)

    def carry_into(self, fresh: dspy.Module, *, share: bool) -> dspy.Module:
        """`fresh` with the template's changes: its predictor objects (`share`), or their demos and
        changed signatures copied in. Predictors are matched by name and input/output fields."""
        mine = dict(self.program.named_predictors())
        for name, predictor in fresh.named_predictors():
            kept = mine.get(name)
            if kept is None or tuple(kept.signature.fields) != tuple(predictor.signature.fields):
                continue
            if share:
                replaced = _replace(fresh, name, kept)
                if replaced is not None:
                    fresh = replaced
                    continue
            demos, signature = self.as_built[name]
            if kept.demos != demos:
                predictor.demos = list(kept.demos)
            if kept.signature is not signature:
                predictor.signature = kept.signature
        return fresh

    def load(self, state: dict[str, Any], lm: dspy.BaseLM | None) -> None:
        """Predictor states by name (DSPy `dump_state`); a saved predictor LM becomes `lm`, the
        program's own (a saved LM state has no server address to talk to)."""
        for name, predictor in self.program.named_predictors():
            if name in state:
                predictor.load_state({**state[name], "lm": None})
                predictor.lm = lm if state[name].get("lm") else None


def _replace(root: dspy.Module, path: str, new: dspy.Predict) -> dspy.Module | None:
    """`root` with the predictor at DSPy parameter name `path` replaced; None where it sits in a tuple."""
    if path == "self":
        return new
    steps = [match.groups() for match in _STEP.finditer(path)]
    holder: Any = root
    for attribute, index, key in steps[:-1]:
        holder = getattr(holder, attribute) if attribute else holder[int(index) if index else key]
    attribute, index, key = steps[-1]
    if attribute:
        setattr(holder, attribute, new)
    elif isinstance(holder, tuple):
        return None
    else:
        holder[int(index) if index else key] = new
    return root
