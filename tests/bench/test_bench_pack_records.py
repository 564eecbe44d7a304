"""bench/pack_records.py: the same files pack to the same bytes, whenever and in whatever order they
were written; a link, or an archive inside the folder it packs, is refused rather than packed; a
failed pack leaves the archive as it was."""

from __future__ import annotations

import hashlib
import os
import tarfile

import pytest
from bench_helpers import load_bench

FILES = {"report.md": "# table\n", "whale/seed-0/config.json": "{}\n", "whale/seed-0/harness.py": "x = 1\n"}


def write(folder, names, mtime):
    for name in names:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(FILES[name])
        os.utime(folder / name, (mtime, mtime))


def test_the_same_files_pack_to_the_same_bytes(tmp_path, capsys):
    bench = load_bench("pack_records")
    write(tmp_path / "a", sorted(FILES), 1_000_000)
    write(tmp_path / "b", sorted(FILES, reverse=True), 2_000_000)
    first = bench.main([str(tmp_path / "a"), str(tmp_path / "a.tar.gz")])
    second = bench.main([str(tmp_path / "b"), str(tmp_path / "b.tar.gz")])
    assert (tmp_path / "a.tar.gz").read_bytes() == (tmp_path / "b.tar.gz").read_bytes()
    assert (tmp_path / "a.tar.gz").read_bytes()[4:8] == bytes(4)  # gzip's timestamp: none
    assert first == second == hashlib.sha256((tmp_path / "a.tar.gz").read_bytes()).hexdigest()
    assert f"{first}  {tmp_path / 'b.tar.gz'}" in capsys.readouterr().out
    with tarfile.open(tmp_path / "a.tar.gz") as tar:
        assert tar.getnames() == sorted(FILES)
        assert {(m.mtime, m.uid, m.uname, m.mode) for m in tar} == {(0, 0, "", 0o644)}
        assert tar.extractfile("whale/seed-0/harness.py").read() == b"x = 1\n"


def test_a_link_is_refused(tmp_path, capsys):
    write(tmp_path / "a", sorted(FILES), 1_000_000)
    (tmp_path / "a" / "whale" / "passwd").symlink_to("/etc/passwd")
    with pytest.raises(SystemExit):
        load_bench("pack_records").main([str(tmp_path / "a"), str(tmp_path / "a.tar.gz")])
    assert "is a link or a device" in capsys.readouterr().err


def test_an_archive_inside_its_folder_is_refused(tmp_path, capsys):
    write(tmp_path / "a", sorted(FILES), 1_000_000)
    out = tmp_path / "a" / "whale" / "a.tar.gz"
    out.write_bytes(b"an earlier pack")  # would be listed, then truncated while packed
    with pytest.raises(SystemExit):
        load_bench("pack_records").main([str(tmp_path / "a"), str(out)])
    assert "is inside the folder it packs" in capsys.readouterr().err
    assert out.read_bytes() == b"an earlier pack"


def test_a_failed_pack_leaves_the_archive_as_it_was(tmp_path, monkeypatch):
    write(tmp_path / "a", sorted(FILES), 1_000_000)
    out = tmp_path / "out" / "a.tar.gz"
    out.parent.mkdir()
    out.write_bytes(b"an earlier pack")
    addfile = tarfile.TarFile.addfile

    def fail_after_one(tar, info, data=None):
        if tar.getnames():
            raise OSError("no space left on device")
        addfile(tar, info, data)

    monkeypatch.setattr(tarfile.TarFile, "addfile", fail_after_one)
    with pytest.raises(OSError, match="no space left"):
        load_bench("pack_records").main([str(tmp_path / "a"), str(out)])
    assert out.read_bytes() == b"an earlier pack"
    assert list(out.parent.iterdir()) == [out]  # no half-written temporary file left beside it
