"""`compile` in DSPy's shape: (student, *, trainset, valset=None), the curve opted into with
`track=`, the old `searchset=`/`testset=` still read for one release, and a misspelt keyword refused."""

from __future__ import annotations

import warnings

import pytest
from meta_harness_helpers import ScriptedProposer
from whale_helpers import FakeHarnessPhase, FakeWeightPhase, backend, exact_match, optimizer, student, tasks

from optimizers.harness.meta_harness import MetaHarness
from whale_dspy.rundir import RunDir


def test_a_misspelt_keyword_is_refused_by_both_optimizers(tmp_path):
    server = backend()
    whale = optimizer(tmp_path / "run", server, weight=FakeWeightPhase(server), method="weight-only")
    with pytest.raises(TypeError, match="trainsets"):
        whale.compile(student(server), trainsets=tasks("train", 4))
    meta = MetaHarness(proposer=ScriptedProposer([]), metric=exact_match, archive_dir=tmp_path / "archive")
    with pytest.raises(TypeError, match="testset"):
        meta.compile(student(server), trainset=tasks("train", 2), testset=tasks("test", 2))


def test_dspy_shape_searches_valset_and_tracks_only_when_asked(tmp_path):
    server = backend()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        opt = optimizer(tmp_path / "a", server, weight=FakeWeightPhase(server), harness=FakeHarnessPhase())
        report = opt.compile(student(server), trainset=tasks("train", 10), valset=tasks("search", 3)).report
    assert not report.curve  # no held-out curve unless tracked
    data = RunDir(tmp_path / "a").config()["data"]
    assert data["searchset"]["tasks"] == 3 and data["trainset"]["tasks"] == 10 and data["testset"] is None


def test_without_valset_a_searching_run_splits_its_trainset_the_same_way_every_time(tmp_path):
    splits = []
    for name in ("a", "b"):
        server = backend()
        opt = optimizer(tmp_path / name, server, weight=FakeWeightPhase(server), harness=FakeHarnessPhase())
        opt.compile(student(server), trainset=tasks("train", 10), track=tasks("test", 2))
        splits.append(RunDir(tmp_path / name).config()["data"])
    assert splits[0] == splits[1]
    assert splits[0]["trainset"]["tasks"] == 5 and splits[0]["searchset"]["tasks"] == 5


def test_the_old_keywords_warn_and_run_as_before(tmp_path):
    server = backend()
    opt = optimizer(tmp_path / "old", server, weight=FakeWeightPhase(server), harness=FakeHarnessPhase())
    with pytest.warns(DeprecationWarning, match="valset= .* track="):
        old = opt.compile(
            student(server),
            trainset=tasks("train", 10),
            searchset=tasks("search", 3),
            testset=tasks("test", 2),
        )
    server = backend()
    new = optimizer(tmp_path / "new", server, weight=FakeWeightPhase(server), harness=FakeHarnessPhase())
    now = new.compile(
        student(server), trainset=tasks("train", 10), valset=tasks("search", 3), track=tasks("test", 2)
    )
    assert RunDir(tmp_path / "old").config()["data"] == RunDir(tmp_path / "new").config()["data"]
    assert [p.mean_at_k for p in old.report.curve] == [p.mean_at_k for p in now.report.curve]
    assert len(old.report.curve) > 1
