"""The weight phase under bad input: nothing accepted, a crashed trainer, an adapter that will not load."""

from __future__ import annotations

import itertools

import pytest
from rft_helpers import make_rft, program, reply, tasks

from whale_dspy.errors import BackendError, ConfigError, TrainingError
from whale_dspy.records import AdapterRef
from whale_dspy.testing.fake_trainer import FakeTrainer

RIGHT = {"QALPHA": reply(answer="alpha"), "QBETA": reply(answer="beta")}


def run_steps(rft, count: int):
    return list(itertools.islice(rft.steps(program(), tasks("ALPHA", "BETA")), count))


def test_a_step_with_no_accepted_rollout_trains_nothing_and_the_loop_goes_on(tmp_path):
    replies = {"QALPHA": [reply(answer="no")] * 2 + [reply(answer="alpha")] * 2, "QBETA": reply(answer="no")}
    rft, backend, trainer = make_rft(replies, tmp_path)
    (first, prog0), (second, prog1) = run_steps(rft, 2)

    assert first.skipped and "no rollout scored above 0.5" in first.skipped
    assert (first.accepted, first.train_loss, first.adapter, prog0.adapter_name) == (0, None, None, None)
    assert second.skipped is None and second.accepted == 2
    assert [call.name for call in trainer.calls] == ["policy-r01-s0001"]
    assert prog1.adapter_name == "policy-r01-s0001" == backend.load_order[0]
    assert rft.run_dir.events("rft_step")[0]["skipped"] == first.skipped


def test_a_crashed_training_is_recorded_and_the_previous_adapter_stays_served(tmp_path):
    rft, backend, trainer = make_rft(RIGHT, tmp_path, trainer=FakeTrainer(fail_calls={1}))
    (ok, _), (crashed, kept), (after, _) = run_steps(rft, 3)

    assert crashed.skipped == "training policy-r01-s0001 failed: TrainingError"
    assert crashed.adapter == ok.adapter and kept.adapter_name == ok.adapter.name
    assert crashed.train_loss is None
    # The failed name is burned: the next step trains a new one, from the adapter still served.
    assert [c.name for c in trainer.calls] == ["policy-r01-s0000", "policy-r01-s0001", "policy-r01-s0002"]
    assert trainer.calls[2].parent == ok.adapter
    assert after.adapter.name == "policy-r01-s0002"
    assert backend.load_order == ["policy-r01-s0000", "policy-r01-s0002"]
    event = rft.run_dir.events("rft_step")[1]
    assert "scripted to fail" in event["error"] and event["adapter"]["name"] == ok.adapter.name


def test_training_that_keeps_failing_raises_after_max_failures(tmp_path):
    rft, _, _ = make_rft(RIGHT, tmp_path, trainer=FakeTrainer(fail_calls={0, 1}), max_failures=2)
    stream = rft.steps(program(), tasks("ALPHA", "BETA"))
    first, _ = next(stream)
    assert first.skipped.startswith("training")
    with pytest.raises(TrainingError, match="call 1"):
        next(stream)
    assert [e["skipped"] is not None for e in rft.run_dir.events("rft_step")] == [True, True]


def test_an_adapter_that_fails_to_load_leaves_the_previous_one_in_place(tmp_path):
    rft, backend, trainer = make_rft(RIGHT, tmp_path, fail_loading={"policy-r01-s0001"})
    (ok, _), (failed, kept), (after, _) = run_steps(rft, 3)

    assert failed.skipped == "loading policy-r01-s0001 failed: BackendError"
    assert failed.adapter == ok.adapter and kept.adapter_name == ok.adapter.name
    assert trainer.calls[2].parent == ok.adapter and after.adapter.name == "policy-r01-s0002"
    assert backend.load_order == ["policy-r01-s0000", "policy-r01-s0002"]


def test_a_server_that_died_while_loading_stops_the_step_instead_of_recording_it_skipped(tmp_path):
    """A resumed run would otherwise keep a step whose rollouts and training were spent and whose
    adapter never served; a refused adapter (the server still up) stays a skipped step, above."""
    rft, backend, _ = make_rft(RIGHT, tmp_path, fail_loading={"policy-r01-s0000"})
    backend.healthy = lambda: False  # it says it is down, as a dead embedded server does
    with pytest.raises(BackendError, match="failed to load"):
        next(rft.steps(program(), tasks("ALPHA", "BETA")))
    assert list(rft.run_dir.events("rft_step")) == []


def test_a_retried_step_never_reuses_an_adapter_name(tmp_path):
    rft, backend, trainer = make_rft(RIGHT, tmp_path)
    next(rft.steps(program(), tasks("ALPHA", "BETA"), start_step=3))
    next(rft.steps(program(), tasks("ALPHA", "BETA"), start_step=3))
    assert [c.name for c in trainer.calls] == ["policy-r01-s0003", "policy-r01-s0003-1"]
    assert backend.load_order == [c.name for c in trainer.calls]


def test_a_program_bound_to_an_adapter_needs_that_adapter_as_parent(tmp_path):
    rft, _, _ = make_rft(RIGHT, tmp_path)
    bound = program().with_lm(None, adapter_name="policy-old")
    with pytest.raises(ConfigError, match="parent"):
        next(rft.steps(bound, tasks("ALPHA", "BETA")))


def test_training_continues_from_a_given_parent_adapter(tmp_path):
    rft, backend, trainer = make_rft(RIGHT, tmp_path)
    parent = AdapterRef("policy-old", str(tmp_path / "old"), "base-model")
    backend.load_adapter(parent)
    signal, prog = next(rft.steps(program(), tasks("ALPHA", "BETA"), parent=parent))
    assert trainer.calls[0].parent == parent
    assert signal.adapter.parent == "policy-old" and prog.adapter_name == signal.adapter.name
