"""Seed chess harness (h0): show the position, ask for one move per turn, play it, repeat.

The episode stops on an illegal move (the seed does not retry), on a wrong
move, or when the puzzle is solved; the answer is the moves played, in order.
"""

from __future__ import annotations

from collections.abc import Callable

import dspy
from typing import Any
from typing import Literal

MAX_TURNS = 4
"""Solver moves tried at most (Lichess puzzles here need 1 to 5)."""

INSTRUCTIONS = (
    "You are solving a chess puzzle. Given the position, reply with the single best move "
    "for the side to move, in SAN (like Nf3 or Qxh7#) or UCI (like g1f3). Reply with the move only."
)


class MovePerTurn(dspy.Module):
    def __init__(self, tools: dict[str, Callable[..., str]]) -> None:
        super().__init__()
        self.observe_board = tools["observe_board"]
        self.play_move = tools["play_move"]
        self.choose = dspy.Predict(dspy.Signature("position: str -> move: str", INSTRUCTIONS))

    def forward(self, fen: str, side_to_move: str, last_move: str) -> dspy.Prediction:
        position = f"You play {side_to_move}. The opponent just played {last_move}.\n{self.observe_board()}"
        played = []
        for _ in range(MAX_TURNS):
            move = self.choose(position=position).move.strip()
            outcome = self.play_move(move=move)
            if outcome.startswith(("Illegal", "The episode is over")):
                break
            played.append(move)
            if "The episode is over" in outcome:
                break
            position = outcome
        return dspy.Prediction(answer=" ".join(played))


def _build_before_choices_answer(signature: type[dspy.Signature], tools: dict[str, Callable]) -> dspy.Module:
    return MovePerTurn(tools)


# Added by the mutation proposer (choices_answer).
ANSWER_VALUES = "choices"
CHOICE_WORDS = ("legal", "choices", "options")


def named_tool(tools: dict[str, Any], words: tuple[str, ...]) -> Any:
    """The first tool whose name holds one of `words` (a validator, a listing of values), or None."""
    return next((tool for name, tool in tools.items() if any(w in name.lower() for w in words)), None)


class ValueAdapter(dspy.JSONAdapter):
    """dspy.JSONAdapter with one output field retyped per call: the field named like the task's
    answer, else a predictor's only output besides its reasoning; a predictor with other outputs (a
    tool-calling step, a plan) is left as it is. Where the server takes no JSON schema, the parse
    still refuses a value outside the type."""

    def __init__(self, answer: str, value_type: Any) -> None:
        super().__init__()
        self.answer = answer
        self.value_type = value_type

    def __call__(self, lm: Any, lm_kwargs: Any, signature: Any, demos: Any, inputs: Any) -> Any:
        return super().__call__(lm, lm_kwargs, self.retyped(signature), demos, inputs)

    async def acall(self, lm: Any, lm_kwargs: Any, signature: Any, demos: Any, inputs: Any) -> Any:
        return await super().acall(lm, lm_kwargs, self.retyped(signature), demos, inputs)

    def retyped(self, signature: Any) -> Any:
        outputs = [name for name in signature.output_fields if name != "reasoning"]
        field = self.answer if self.answer in outputs else outputs[0] if len(outputs) == 1 else None
        kind = self.value_type() if field is not None else None
        return signature if kind is None else signature.with_updated_fields(field, type_=kind)


class ConstrainedAnswer(dspy.Module):
    """Decode each predictor's answer field under ANSWER_VALUES through the server's structured
    output: one of the values a tool lists (read again before every call, as an episode moves on)
    or a number."""

    def __init__(self, inner: dspy.Module, signature: type[dspy.Signature], tools: dict[str, Any]) -> None:
        super().__init__()
        self.inner = inner
        self.answer = next(iter(signature.output_fields))
        self.choices = named_tool(tools, CHOICE_WORDS)
        if ANSWER_VALUES == "choices" and self.choices is None:
            raise ValueError(f"no tool lists the answer's values (a tool named with one of {CHOICE_WORDS})")

    def forward(self, **inputs: Any) -> dspy.Prediction:
        with dspy.context(adapter=ValueAdapter(self.answer, self.value_type)):
            return self.inner(**inputs)

    def value_type(self) -> Any:
        """The answer's type for the next call (None: leave the field as it is)."""
        if ANSWER_VALUES == "number":
            return float
        listed = self.choices()
        listed = listed.replace(",", " ").split() if isinstance(listed, str) else listed
        values = tuple(dict.fromkeys(str(value) for value in listed))
        return Literal[values] if values else None


def build(signature, tools):
    return ConstrainedAnswer(_build_before_choices_answer(signature, tools), signature, tools)
