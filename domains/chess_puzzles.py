"""Chess: Lichess puzzles, scored by replaying the solver's moves with python-chess.

The bundled train file (10,000 puzzles) is cut by a salted hash of the puzzle id
into train / search / val (70 / 15 / 15 %); the bundled test file (2,500) is
the test split. The rating and theme filters are applied after the cut, so a
puzzle never changes split when the filters change.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import chess
import dspy

from domains.base import DatasetDomain, answer_text, assign_splits, group_by_split, parse_rows
from domains.chess_env import ChessPuzzleEnv, score_answer
from whale_dspy.errors import ConfigError
from whale_dspy.protocols import Tools

DEFAULT_MAX_RATING = 1500
"""The embedded models are tiny (135M-0.5B): keep the default slice to easy puzzles."""

POOL_FRACTIONS = {"train": 0.70, "search": 0.15, "val": 0.15}


class ChessPuzzle(dspy.Signature):
    """Solve the chess puzzle: find the best move(s) for the side to move."""

    fen: str = dspy.InputField(desc="the position in FEN, after the opponent's last move")
    side_to_move: str = dspy.InputField(desc="'white' or 'black': the side you play")
    last_move: str = dspy.InputField(desc="the opponent's last move, in SAN and (UCI)")
    answer: str = dspy.OutputField(desc="your moves in order, space separated, in UCI (e2e4) or SAN (Nf3)")


def puzzle_example(row: dict[str, Any]) -> dspy.Example:
    """A Lichess CSV row as an example: the puzzle starts after the opponent's first move."""
    moves = row["Moves"].split()
    if len(moves) < 2 or len(moves) % 2:
        raise ValueError(f"Moves must hold an even number (>= 2) of UCI moves, got {row['Moves']!r}")
    board = chess.Board(row["FEN"])
    first_san = board.san(chess.Move.from_uci(moves[0]))
    board.push_uci(moves[0])
    return dspy.Example(
        task_id=f"lichess-{row['PuzzleId']}",
        fen=board.fen(),
        side_to_move="white" if board.turn == chess.WHITE else "black",
        last_move=f"{first_san} ({moves[0]})",
        answer=" ".join(moves[1::2]),
        line=" ".join(moves[1:]),
        rating=int(row["Rating"]),
        themes=row["Themes"],
    ).with_inputs("fen", "side_to_move", "last_move")


def _theme_set(themes: str | Iterable[str] | None) -> frozenset[str]:
    if themes is None:
        return frozenset()
    if isinstance(themes, str):
        themes = themes.replace(",", " ").split()
    return frozenset(themes)


class ChessDomain(DatasetDomain):
    """Lichess puzzles; `themes` keeps puzzles with any of the themes (e.g. "mateIn1")."""

    name = "chess"
    signature = ChessPuzzle

    def __init__(
        self,
        data_dir: Path | str | None = None,
        min_rating: int = 0,
        max_rating: int | None = DEFAULT_MAX_RATING,
        themes: str | Iterable[str] | None = None,
    ) -> None:
        super().__init__(data_dir)
        if max_rating is not None and max_rating < min_rating:
            raise ConfigError(f"max_rating ({max_rating}) must be >= min_rating ({min_rating}) or None")
        self.min_rating = min_rating
        self.max_rating = max_rating
        self.themes = _theme_set(themes)

    def _keep(self, example: dspy.Example) -> bool:
        if example.rating < self.min_rating or (
            self.max_rating is not None and example.rating > self.max_rating
        ):
            return False
        return not self.themes or bool(self.themes & set(example.themes.split()))

    def _build_splits(self) -> dict[str, list[dspy.Example]]:
        folder = self.data_dir / "chess"
        pool = parse_rows(folder / "lichess_puzzles_train.csv.gz", puzzle_example)
        test = parse_rows(folder / "lichess_puzzles_test.csv.gz", puzzle_example)
        known = {theme for ex in (*pool, *test) for theme in ex.themes.split()}
        if unknown := self.themes - known:
            raise ConfigError(
                f"unknown chess themes {sorted(unknown)}; valid themes are {', '.join(sorted(known))}"
            )
        split_of = assign_splits([ex.task_id for ex in pool], POOL_FRACTIONS, salt="chess")
        splits = group_by_split(pool, lambda ex: split_of[ex.task_id])
        splits["test"] = list(test)
        return {name: [ex for ex in rows if self._keep(ex)] for name, rows in splits.items()}

    def metric(self, example: dspy.Example, pred: Any, trace: Any = None) -> float:
        """1.0 when the answer's moves, replayed from the position, play the puzzle's solution (any
        checkmate wins); else 0.0."""
        answer = answer_text(pred)
        if answer is None:
            return 0.0
        return score_answer(example.fen, example.line.split(), answer)

    def tools(self, example: dspy.Example) -> Tools:
        return ChessPuzzleEnv(example.fen, str(example.get("line") or "").split()).tools()
