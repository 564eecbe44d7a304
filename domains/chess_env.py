"""Lichess puzzle episodes: the one place that decides whether a played move is right.

Both the verifier (replaying a submitted answer) and the interactive tools (a
harness playing move by move) step a `PuzzleEpisode`, so training, search and
evaluation share one rule set: the solver must play the solution's moves, any
checkmating move wins (as on Lichess), and a wrong legal move fails the puzzle.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import chess

from whale_dspy.protocols import stateful_tool

_MOVE_NUMBER = re.compile(r"^\d+\.+")


def split_moves(text: str) -> list[str]:
    """Split an answer into move tokens; drop move numbers ("1.", "1...") and annotations."""
    tokens = []
    for raw in re.split(r"[\s,;]+", text or ""):
        token = _MOVE_NUMBER.sub("", raw).strip("\"'`()[]{}.!?")
        if token:
            tokens.append(token)
    return tokens


def parse_move(board: chess.Board, token: str) -> chess.Move | None:
    """A legal move from UCI or SAN text, or None when it is neither (python-chess decides)."""
    for parse, text in ((board.parse_uci, token.lower()), (board.parse_san, token)):
        try:
            move = parse(text)
        except ValueError:
            continue
        if move:  # a null move ("0000", "--") is not a move
            return move
    return None


class PuzzleEpisode:
    """The solver's side of one puzzle: play moves, get opponent replies, end solved or failed."""

    def __init__(self, fen: str, line: list[str]) -> None:
        self.board = chess.Board(fen)
        self.line = line
        self.ply = 0
        self.solved = False
        self.failed = False
        self.unverified = False
        """The move was played on a position whose solution is not known (no line): nothing to check."""
        self.played: list[str] = []

    @property
    def over(self) -> bool:
        return self.solved or self.failed or self.unverified

    def play(self, move: chess.Move) -> str | None:
        """Play a legal solver move; return the opponent's reply (SAN), or None when the episode ended."""
        self.played.append(move.uci())
        self.board.push(move)
        if not self.line:  # a new position (the harness called as a plain program): one move, unchecked
            self.solved = self.board.is_checkmate()
            self.unverified = not self.solved
            return None
        expected = chess.Move.from_uci(self.line[self.ply])
        if self.board.is_checkmate() or (move == expected and self.ply + 1 >= len(self.line)):
            self.solved = True
            return None
        if move != expected:
            self.failed = True
            return None
        reply = chess.Move.from_uci(self.line[self.ply + 1])
        reply_san = self.board.san(reply)
        self.board.push(reply)
        self.ply += 2
        return f"{reply_san} ({reply.uci()})"


def score_answer(fen: str, line: list[str], answer: str) -> float:
    """1.0 if the answer's moves solve the puzzle from `fen`, else 0.0 (moves after the end are ignored)."""
    episode = PuzzleEpisode(fen, line)
    for token in split_moves(answer):
        if episode.over:
            break
        move = parse_move(episode.board, token)
        if move is None:
            return 0.0
        episode.play(move)
    return 1.0 if episode.solved else 0.0


def legal_san(board: chess.Board) -> list[str]:
    return sorted(board.san(move) for move in board.legal_moves)


def describe(board: chess.Board) -> str:
    """A text view of the position for an LM: diagram, FEN, side to move, legal moves."""
    side = "white" if board.turn == chess.WHITE else "black"
    legal = " ".join(legal_san(board))
    return (
        f"Board (uppercase = white, white at the bottom):\n{board}\n"
        f"FEN: {board.fen()}\nSide to move: {side}\nLegal moves (SAN): {legal}"
    )


class ChessPuzzleEnv:
    """One rollout's interactive puzzle; the harness sees only its tools, never the solution.

    With no solution line (a harness called as a plain program on a new position) the first legal
    move is played unchecked and ends the episode, so the harness answers with that move."""

    def __init__(self, fen: str, line: list[str]) -> None:
        self._episode = PuzzleEpisode(fen, line)

    @stateful_tool
    def observe_board(self) -> str:
        """Show the current position: board diagram, FEN, side to move and the legal moves."""
        status = "solved" if self._episode.solved else "failed" if self._episode.failed else "in progress"
        played = " ".join(self._episode.played) or "none"
        return f"{describe(self._episode.board)}\nYour moves so far: {played}\nPuzzle: {status}"

    @stateful_tool
    def legal_moves(self) -> list[str]:
        """The moves you may play now, in SAN (none once the episode is over)."""
        return [] if self._episode.over else legal_san(self._episode.board)

    @stateful_tool
    def play_move(self, move: str) -> str:
        """Play your move (UCI like e2e4 or SAN like Nf3). The reply starts with "Correct" (with the
        opponent's answer, or "Puzzle solved"), "Wrong move" (failed), "Illegal" (try again) or
        "The episode is over"; the episode is over once the reply contains "The episode is over"."""
        episode = self._episode
        if episode.over:
            return "The episode is over; no more moves are accepted."
        tokens = split_moves(move)
        parsed = parse_move(episode.board, tokens[0]) if len(tokens) == 1 else None
        if parsed is None:
            return f"Illegal or unreadable move {move!r}; the episode continues. {describe(episode.board)}"
        san = episode.board.san(parsed)
        reply = episode.play(parsed)
        if reply is not None:
            return f"Correct: {san}. The opponent replied {reply}. Your move.\n{describe(episode.board)}"
        if episode.solved:
            return f"Correct: {san}. Puzzle solved. The episode is over."
        if episode.unverified:
            return f"Played {san}; this position has no known solution to reply from. The episode is over."
        return f"Wrong move: {san} is legal but not the solution. The episode is over (failed)."

    def tools(self) -> dict[str, Callable[..., str]]:
        return {
            "observe_board": self.observe_board,
            "legal_moves": self.legal_moves,
            "play_move": self.play_move,
        }
