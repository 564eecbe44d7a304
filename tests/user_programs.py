"""DSPy programs as users write them, for the DSPy-native tests: several predictors, their own
signatures, a tool they hold, and module-level code that is not part of the program."""

from __future__ import annotations

import json

import dspy

NOTES_PER_QUERY = 2
"""How many notes the program reads per question (a module constant the class uses)."""


class Rewrite(dspy.Signature):
    """Rewrite the question as a short lookup query."""

    question: str = dspy.InputField()
    query: str = dspy.OutputField()


class AnswerFromNotes(dspy.Signature):
    """Answer the question from the notes, in a few words."""

    notes: str = dspy.InputField()
    question: str = dspy.InputField()
    answer: str = dspy.OutputField()


def join_notes(notes: list[str]) -> str:
    return "\n".join(f"- {note}" for note in notes)


class LookupQA(dspy.Module):
    """Rewrite the question, look it up with the tool it holds, answer from the notes."""

    def __init__(self, lookup, notes: int = NOTES_PER_QUERY, style: str = "short"):
        super().__init__()
        self.lookup = lookup
        self.notes = notes
        self.style = style
        self.rewrite = dspy.Predict(Rewrite)
        self.answer = dspy.Predict(AnswerFromNotes)

    def forward(self, question: str) -> dspy.Prediction:
        query = self.rewrite(question=question).query
        notes = join_notes(self.lookup(query, self.notes))
        return self.answer(notes=notes, question=question)


class HiddenArgument(dspy.Module):
    """Keeps its constructor argument under another name, so it cannot be replayed."""

    def __init__(self, lookup):
        super().__init__()
        self._tool = lookup
        self.answer = dspy.Predict(AnswerFromNotes)


class ReasonsOnRequest(dspy.Module):
    """A default argument it does not keep: replaying the default would build another program."""

    def __init__(self, reason: bool = False):
        super().__init__()
        self.answer = dspy.ChainOfThought(AnswerFromNotes) if reason else dspy.Predict(AnswerFromNotes)


class HoldsAClient(dspy.Module):
    """Holds an object that is neither data nor callable (an API client, say)."""

    def __init__(self, client):
        super().__init__()
        self.client = client
        self.answer = dspy.Predict(AnswerFromNotes)


def load_user_data(path: str) -> list[dict]:
    """The user's own data loading: nothing the harness needs, so not in its source."""
    with open(path) as handle:
        return json.load(handle)


class RepeatWord(dspy.Signature):
    """Repeat the given word exactly."""

    word: str = dspy.InputField()
    answer: str = dspy.OutputField()


class EchoAgent(dspy.Module):
    """Asks for the word back and tidies the reply with the function it holds."""

    def __init__(self, tidy):
        super().__init__()
        self.tidy = tidy
        self.repeat = dspy.Predict(RepeatWord)

    def forward(self, word: str) -> dspy.Prediction:
        return dspy.Prediction(answer=self.tidy(self.repeat(word=word).answer))
