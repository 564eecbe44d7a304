"""Test doubles shipped with the library: a scripted LM, a fake backend and a fake trainer."""

from __future__ import annotations

from whale_dspy.testing.fake_backend import FakeBackend
from whale_dspy.testing.fake_trainer import FakeTrainer
from whale_dspy.testing.scripted_lm import ScriptedLM, ScriptExhausted

__all__ = ["FakeBackend", "FakeTrainer", "ScriptExhausted", "ScriptedLM"]
