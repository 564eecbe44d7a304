"""What an untrusted process leaves is read back only as bounded regular files inside its folder.

The command proposer's agent is the hostile process here: it runs jailed, but
the parent reads what it left outside the jail, as itself.
"""

from __future__ import annotations

import itertools
import os
import socket

import pytest
from meta_harness_helpers import TOY, archive_with, exact, lm, student, tasks

from optimizers.harness.meta_harness import MetaHarness, MetaHarnessConfig
from optimizers.harness.proposers import CommandProposer
from whale_dspy.untrusted_files import (
    MAX_FILE_BYTES,
    UntrustedFileError,
    list_untrusted,
    read_untrusted,
    read_untrusted_text,
)

SECRET_ENV = "WHALE_TEST_PARENT_SECRET"
SECRET_VALUE = "parent-env-secret-4f1a"


@pytest.fixture
def archive(tmp_path):
    return archive_with(tmp_path / "archive")


@pytest.fixture
def secret_file(tmp_path, monkeypatch):
    monkeypatch.setenv(SECRET_ENV, SECRET_VALUE)
    path = tmp_path / "secret.txt"
    path.write_text("file-secret-0b7c")
    (tmp_path / "outside.py").write_text("x = 'outside'")
    return path


def links_to(secret_file) -> str:
    """An agent that links its candidates to a secret, this process's environment and a file outside."""
    return (
        f"ln -s {secret_file} new/secret.py && ln -s /proc/self/environ new/environ.py "
        f"&& ln -s {secret_file.parent / 'outside.py'} new/outside.py "
        "&& ln -s /proc/self/environ new/notes.txt && echo 'print(1)' > new/notes.py"
    )


def test_an_agents_links_to_secrets_and_outside_files_are_refused_not_read(archive, secret_file):
    proposer = CommandProposer(links_to(secret_file))
    assert proposer.propose(archive, 5) == []
    failures = proposer.usage().failures
    assert len(failures) == 4 and all("symbolic link" in failure for failure in failures)
    for name in ("secret.py", "environ.py", "outside.py", "notes.txt"):
        assert any(f"new/{name}" in failure for failure in failures)


def test_an_agents_hard_link_to_an_outside_file_is_refused(archive, secret_file):
    """Unjailed, the agent can hard-link a file it can reach; one link per file tells them apart."""
    proposer = CommandProposer(f"ln {secret_file} new/linked.py", jail=None)
    assert proposer.propose(archive, 1) == []
    assert "2 hard links" in proposer.usage().failures[0]


def test_an_agent_that_swaps_its_new_folder_for_a_link_gets_nothing_read(archive, tmp_path, secret_file):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "stolen.py").write_text(SECRET_VALUE)
    proposer = CommandProposer(f"rmdir new && ln -s {outside} new")
    assert proposer.propose(archive, 1) == []
    assert "new is not a folder inside it" in proposer.usage().failures[0]


def test_the_parents_environment_never_reaches_the_search_archive(archive, tmp_path, secret_file):
    optimizer = MetaHarness(
        proposer=CommandProposer(links_to(secret_file)),
        metric=exact,
        archive_dir=tmp_path / "search",
        lm=lm(),
        config=MetaHarnessConfig.paper(
            candidates=4, tasks=2, smoke_tasks=0, min_iterations=1, max_iterations=1
        ),
    )
    list(itertools.islice(optimizer.iterations(student(), tasks(2)), 2))
    written = [p.read_bytes() for p in (tmp_path / "search").rglob("*") if p.is_file()]
    assert written  # the search ran and archived its h0
    assert not any(SECRET_VALUE.encode() in data or b"file-secret-0b7c" in data for data in written)


@pytest.mark.timeout(60)
def test_a_fifo_left_as_a_candidate_does_not_hang_the_proposer(archive):
    proposer = CommandProposer("mkfifo new/wait.py && mkfifo new/ok.txt && echo 'x = 1' > new/ok.py")
    assert proposer.propose(archive, 2) == []
    failures = proposer.usage().failures
    assert len(failures) == 2 and all("not a regular file" in failure for failure in failures)


def test_an_oversized_candidate_is_refused_with_the_limit_named(archive):
    big = MAX_FILE_BYTES + 1
    proposer = CommandProposer(
        f"head -c {big} /dev/zero | tr '\\0' a > new/big.py && echo 'x = 1' > new/small.py"
    )
    [small] = proposer.propose(archive, 2)
    assert small.name == "small"
    assert proposer.usage().failures == (
        f"refused what the agent left: new/big.py: {big} bytes is over the {MAX_FILE_BYTES}-byte limit",
    )
    strict = CommandProposer("echo 'x = 12345' > new/small.py", max_file_bytes=8)
    assert strict.propose(archive, 1) == [] and "over the 8-byte limit" in strict.usage().failures[0]


def test_a_well_behaved_agents_candidates_arrive_unchanged(archive):
    code = TOY.replace("no idea", "unsure — ça va")
    (archive.path / "given.py").write_text(code)
    command = (
        "cp given.py new/b_unsure.py && printf 'say unsure\\nparent: c0000\\n' > new/b_unsure.txt "
        "&& cp given.py new/a_plain.py"
    )
    proposer = CommandProposer(command)
    proposed = proposer.propose(archive, 3)
    assert [(s.name, s.parent, s.hypothesis, s.code) for s in proposed] == [
        ("a_plain", "c0000", "", code),
        ("b_unsure", "c0000", "say unsure", code),
    ]
    assert proposer.usage().failures == ()


def test_the_reader_refuses_sockets_escapes_and_reads_a_logs_tail(tmp_path):
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "sock"))
    with pytest.raises(UntrustedFileError, match="not a regular file"):
        read_untrusted(tmp_path, "sock")
    server.close()
    for escape in ("../x", "/etc/passwd", "a/../b", ""):
        with pytest.raises(UntrustedFileError, match="not a plain path"):
            read_untrusted(tmp_path, escape)
    with pytest.raises(FileNotFoundError):
        read_untrusted(tmp_path, "missing")
    (tmp_path / "log").write_bytes(b"0123456789")
    assert read_untrusted(tmp_path, "log", max_bytes=4, tail=True) == b"6789"
    assert read_untrusted_text(tmp_path, "log") == "0123456789"
    os.symlink("log", tmp_path / "alias")
    assert list_untrusted(tmp_path) == ["alias", "log", "sock"]


def test_only_the_tail_of_an_agents_output_is_read_back(archive):
    """Its output goes to a file, not into this process's memory; the last max_file_bytes are read."""
    flood = "echo 'tokens used: 5'; head -c 5000 /dev/zero | tr '\\0' a; echo; echo last words; exit 3"
    proposer = CommandProposer(flood, max_file_bytes=1000)
    assert proposer.propose(archive, 1) == []
    [failure] = proposer.usage().failures
    assert "status 3" in failure and "last words" in failure
    assert proposer.usage().tokens is None  # the line that said so was past the tail


@pytest.mark.timeout(60)
def test_an_archive_from_elsewhere_is_read_as_untrusted_files(archive, secret_file):
    """What an archive holds reaches proposers' prompts: a copied archive's links are not followed."""
    from optimizers.harness.archive import HarnessArchive

    harness = archive.path / "c0000" / "harness.py"
    harness.unlink()
    harness.symlink_to(secret_file)
    labels = archive.path / "labels.json"
    labels.unlink(missing_ok=True)
    os.mkfifo(labels)
    copied = HarnessArchive(archive.path)
    with pytest.raises(UntrustedFileError, match="symbolic link"):
        copied.source("c0000")
    with pytest.raises(UntrustedFileError, match="not a regular file"):
        copied.labels()
    assert copied.task_card() is not None and copied.parent_diff("c0000") is None
