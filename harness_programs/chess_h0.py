"""Seed chess harness (h0): show the position, ask for one move per turn, play it, repeat.

The episode stops on an illegal move (the seed does not retry), on a wrong
move, or when the puzzle is solved; the answer is the moves played, in order.
"""

from __future__ import annotations

from collections.abc import Callable

import dspy

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


def build(signature: type[dspy.Signature], tools: dict[str, Callable]) -> dspy.Module:
    return MovePerTurn(tools)
