"""A weight phase stopped part-way (a crash, a session's end) continues from its recorded steps."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from rft_helpers import make_rft, program, reply, tasks

from whale_dspy.errors import BackendError, ConfigError
from whale_dspy.jsonl import append_jsonl, read_jsonl

REPLIES = {"QALPHA": reply(answer="alpha"), "QBETA": reply(answer="beta")}  # every sample right


def test_resume_runs_only_the_missing_steps_from_the_adapter_the_run_last_served(tmp_path):
    first, _, _ = make_rft(REPLIES, tmp_path, steps=2)
    first.compile(program(), trainset=tasks("ALPHA", "BETA"))
    served_last = first.report.final_adapter

    # A new process on a new server (nothing loaded), asked for three steps in all.
    again, backend, trainer = make_rft(REPLIES, tmp_path, steps=3)
    compiled = again.compile(program(), trainset=tasks("ALPHA", "BETA"), resume=True)

    assert [call.parent for call in trainer.calls] == [served_last]  # one step, from the last adapter
    assert backend.load_order == [served_last.name, trainer.calls[0].name]  # re-served, then the new one
    assert [s.step for s in again.report.steps] == [0, 1, 2]
    assert [e["step"] for e in again.run_dir.events("rft_step")] == [0, 1, 2]  # nothing repeated
    assert compiled.adapter_name == trainer.calls[0].name == again.report.final_adapter.name
    assert again.report.rollouts == 3 * 2 * 2
    sittings = [e for e in again.run_dir.events() if e["kind"] in ("rft_started", "rft_resumed")]
    assert [e["kind"] for e in sittings] == ["rft_started", "rft_resumed"]  # each names its code
    assert all({"commit", "dirty"} <= set(e["environment"]["code"]) for e in sittings)
    assert [e["steps_left"] for e in sittings] == [2, 1]


def test_resume_of_a_finished_run_trains_nothing_and_serves_its_last_adapter(tmp_path):
    first, _, _ = make_rft(REPLIES, tmp_path, steps=2)
    first.compile(program(), trainset=tasks("ALPHA", "BETA"))

    again, backend, trainer = make_rft(REPLIES, tmp_path, steps=2)
    compiled = again.compile(program(), trainset=tasks("ALPHA", "BETA"), resume=True)

    assert trainer.calls == []
    assert compiled.adapter_name == first.report.final_adapter.name
    assert backend.load_order == [first.report.final_adapter.name]
    assert again.run_dir.events("rft_resumed")[-1]["steps_left"] == 0  # a sitting that only served


def test_a_resume_that_cannot_serve_its_adapter_still_records_the_sitting(tmp_path, monkeypatch):
    first, _, _ = make_rft(REPLIES, tmp_path, steps=1)
    first.compile(program(), trainset=tasks("ALPHA", "BETA"))

    again, backend, _ = make_rft(REPLIES, tmp_path, steps=2)

    def refuse(ref):
        raise BackendError(f"cannot serve {ref.name}")

    monkeypatch.setattr(backend, "load_adapter", refuse)
    with pytest.raises(BackendError, match="cannot serve"):
        again.compile(program(), trainset=tasks("ALPHA", "BETA"), resume=True)
    sittings = [e["kind"] for e in again.run_dir.events() if e["kind"] in ("rft_started", "rft_resumed")]
    assert sittings == ["rft_started", "rft_resumed"]


def test_a_step_cut_off_before_its_event_is_sampled_again_with_its_old_traces_set_aside(tmp_path):
    first, _, _ = make_rft(REPLIES, tmp_path, steps=1)
    first.compile(program(), trainset=tasks("ALPHA", "BETA"))
    cut = first.run_dir.path / "traces" / "rft" / "step-0001.jsonl"
    append_jsonl(cut, {"half": "written"})

    again, _, _ = make_rft(REPLIES, tmp_path, steps=2)
    again.compile(program(), trainset=tasks("ALPHA", "BETA"), resume=True)

    assert list(read_jsonl(cut.with_suffix(".earlier-1.jsonl"))) == [{"half": "written"}]
    rows = list(read_jsonl(cut))
    assert len(rows) == 4 and all("rollout_id" in row for row in rows)


def test_without_resume_compile_starts_over_as_before(tmp_path):
    """BetterTogether calls a weight step's compile again on one run folder: that is a new phase."""
    first, _, _ = make_rft(REPLIES, tmp_path, steps=1)
    first.compile(program(), trainset=tasks("ALPHA", "BETA"))

    again, _, trainer = make_rft(REPLIES, tmp_path, steps=1)
    again.compile(program(), trainset=tasks("ALPHA", "BETA"))

    assert [call.parent for call in trainer.calls] == [None]
    traces = again.run_dir.path / "traces" / "rft"
    assert sorted(p.name for p in traces.iterdir()) == ["step-0000.earlier-1.jsonl", "step-0000.jsonl"]


def test_a_run_folder_restored_elsewhere_resumes_from_its_own_copy_of_the_last_adapter(tmp_path):
    """A record archive unpacked on another machine: the events name the first machine's paths."""
    first, _, _ = make_rft(REPLIES, tmp_path / "first", steps=2)
    first.compile(program(), trainset=tasks("ALPHA", "BETA"))
    shutil.move(tmp_path / "first" / "run", tmp_path / "run")  # the recorded paths are gone

    again, backend, trainer = make_rft(REPLIES, tmp_path, steps=3)
    again.compile(program(), trainset=tasks("ALPHA", "BETA"), resume=True)

    served = backend.loaded[first.report.final_adapter.name]
    assert Path(served.path) == (tmp_path / "run" / "adapters" / served.name / "adapter").resolve()
    assert trainer.calls[0].parent == served  # trained on from the copy that is here


def test_a_resume_refuses_a_folder_whose_steps_two_runs_wrote(tmp_path):
    first, _, _ = make_rft(REPLIES, tmp_path, steps=2)
    first.compile(program(), trainset=tasks("ALPHA", "BETA"))
    for event in list(first.run_dir.events("rft_step")):  # the steps recorded twice over
        append_jsonl(first.run_dir.events_path, event)

    again, _, trainer = make_rft(REPLIES, tmp_path, steps=4)
    with pytest.raises(ConfigError, match=r"records steps \[0, 1, 0, 1\]"):
        again.compile(program(), trainset=tasks("ALPHA", "BETA"), resume=True)
    assert trainer.calls == []
