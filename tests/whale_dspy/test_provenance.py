"""Records that name the code they ran: the project's commit and whether the tree had changes
(said, never failed, where git cannot tell), and a read's adapter files by checksum."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess

from cli_helpers import parse
from rich.console import Console

from whale_cli import search
from whale_dspy.provenance import PROJECT_ROOT, adapter_checksums, code, environment
from whale_dspy.testing.fake_backend import FakeBackend
from whale_dspy.testing.scripted_lm import ScriptedLM

GIT = shutil.which("git")


def git(root, *argv):
    return subprocess.run([GIT, "-C", str(root), *argv], check=True, capture_output=True, text=True).stdout


def test_the_commit_and_whether_tracked_files_changed(tmp_path):
    git(tmp_path, "init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git(tmp_path, "add", "a.py")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = git(tmp_path, "rev-parse", "HEAD").strip()
    assert code(tmp_path) == {"commit": head, "dirty": False}
    (tmp_path / "records.json").write_text("{}")  # an untracked file is not a change to the code
    assert code(tmp_path)["dirty"] is False
    (tmp_path / "a.py").write_text("x = 2\n")
    assert code(tmp_path) == {"commit": head, "dirty": True}


def test_without_a_checkout_or_without_git_the_record_says_so(tmp_path, monkeypatch):
    outside = code(tmp_path)
    assert (outside["commit"], outside["dirty"]) == (None, None) and "not a git repository" in outside[
        "unknown"
    ]
    monkeypatch.setenv("PATH", str(tmp_path))  # no git to run
    assert code(tmp_path) == {"commit": None, "dirty": None, "unknown": "git not found on PATH"}
    assert environment()["code"]["unknown"] == "git not found on PATH"


def test_adapter_files_are_named_by_their_sha256(tmp_path):
    (tmp_path / "adapter_model.safetensors").write_bytes(b"weights")
    sums = adapter_checksums(tmp_path)
    assert sums == {
        "adapter_model.safetensors": hashlib.sha256(b"weights").hexdigest(),
        "adapter_config.json": None,
    }
    assert adapter_checksums(None) is None


def test_a_search_and_its_reads_name_the_commit_and_the_adapter_files(tmp_path):
    checkpoint = tmp_path / "policy-s0001"
    checkpoint.mkdir()
    (checkpoint / "adapter_model.safetensors").write_bytes(b"lora")
    (checkpoint / "adapter_config.json").write_text('{"r": 8}')
    argv = ("--domain", "math", "--tasks", "2", "--test-tasks", "2", "--iterations", "1", "--eval-k", "1")
    args = parse(
        *argv,
        "--candidates",
        "1",
        "--no-sandbox",
        "--run-dir",
        str(tmp_path / "run"),
        "--adapter",
        str(checkpoint),
    )
    backend = FakeBackend(ScriptedLM({"": {"answer": "-1"}}))
    assert search.search(search.prepare(args), backend, args, Console(file=io.StringIO())) == 0
    expected = {
        "adapter_model.safetensors": hashlib.sha256(b"lora").hexdigest(),
        "adapter_config.json": hashlib.sha256(b'{"r": 8}').hexdigest(),
    }
    record = json.loads((tmp_path / "run" / "search_report.json").read_text())
    read = json.loads((tmp_path / "run" / "test" / "h0" / "report.json").read_text())
    head = git(PROJECT_ROOT, "rev-parse", "HEAD").strip()
    for written in (record, read):
        assert written["adapter_sha256"] == expected
        assert written["environment"]["code"]["commit"] == head
