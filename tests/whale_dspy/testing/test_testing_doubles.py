"""The scripted LM and fake backend behave as the fast tests rely on."""

from __future__ import annotations

import dspy
import pytest

from whale_dspy.errors import BackendError
from whale_dspy.records import AdapterRef
from whale_dspy.testing.fake_backend import FakeBackend
from whale_dspy.testing.scripted_lm import ScriptedLM


def ask(lm, question: str) -> str:
    with dspy.context(lm=lm):
        return dspy.Predict("question -> answer")(question=question).answer


def test_replies_in_sequence_are_shared_by_copies_and_raise_when_exhausted():
    lm = ScriptedLM([{"answer": "a"}, {"answer": "b"}])
    assert ask(lm.copy(rollout_id=1), "x") == "a"
    assert ask(lm.copy(rollout_id=2), "x") == "b"
    with pytest.raises(Exception, match="no scripted reply left"):
        ask(lm, "x")


def test_replies_keyed_by_prompt_text():
    lm = ScriptedLM({"capital of France": {"answer": "Paris"}, "2+2": [{"answer": "4"}]})
    assert ask(lm, "What is the capital of France?") == "Paris"
    assert ask(lm, "What is the capital of France?") == "Paris"
    assert ask(lm, "2+2?") == "4"


def test_replies_keyed_by_adapter_name_through_the_fake_backend():
    backend = FakeBackend(
        ScriptedLM({"base": {"answer": "b"}, "policy-1": {"answer": "p"}}, keyed_by="model")
    )
    with pytest.raises(BackendError, match="not loaded"):
        backend.lm(adapter="policy-1")
    backend.load_adapter(AdapterRef("policy-1", "/tmp/p1", "base"))
    assert ask(backend.lm(), "q") == "b"
    assert ask(backend.lm(adapter="policy-1"), "q") == "p"
    with pytest.raises(BackendError, match="never reused"):
        backend.load_adapter(AdapterRef("policy-1", "/tmp/p1-again", "base"))
