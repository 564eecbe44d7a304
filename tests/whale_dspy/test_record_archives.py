"""Record archives read as folders: `whale report` and `whale paired` give from an archive what they
give from the folder it was packed from, and an archive that would write outside its copy, hold a
link or unpack past the bounds is refused before anything is extracted."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import tarfile
import tempfile
from pathlib import Path

import pytest
from rich.console import Console
from whale_helpers import scripted_run

from whale_cli import report
from whale_cli.main import main
from whale_dspy.errors import ConfigError
from whale_dspy.record_archives import Bounds, RecordArchives, pack


@pytest.fixture(scope="module")
def comparison(tmp_path_factory) -> tuple[Path, Path]:
    """Two scripted runs in a comparison folder, and the archive packed from it."""
    root = tmp_path_factory.mktemp("records")
    quiet = Console(file=open(os.devnull, "w"))  # noqa: SIM115
    for seed in (0, 1):
        scripted_run(root / "cmp" / "whale" / f"seed-{seed}", budget=30, console=quiet)
    pack(root / "cmp", root / "cmp.tar.gz")
    return root / "cmp", root / "cmp.tar.gz"


def without_run_dirs(reports: list[dict]) -> list[dict]:
    return [{key: value for key, value in r.items() if key != "run_dir"} for r in reports]


def test_the_report_from_an_archive_is_the_report_from_its_folder(comparison, tmp_path):
    folder, archive = comparison
    assert main(["report", str(folder), "--out", str(tmp_path / "folder" / "cmp")]) == 0
    assert main(["report", str(archive), "--out", str(tmp_path / "archive" / "cmp")]) == 0
    for name in ("report.json", "report.md"):
        from_folder = (tmp_path / "folder" / "cmp" / name).read_text()
        from_archive = (tmp_path / "archive" / "cmp" / name).read_text()
        assert from_archive.replace(str(archive), str(folder)) == from_folder, name
    runs = json.loads((tmp_path / "archive" / "cmp" / "report.json").read_text())
    assert [r["run_dir"] for r in runs] == [str(archive / "whale" / f"seed-{s}") for s in (0, 1)]
    one = report.collect_reports(archive / "whale" / "seed-1")  # a folder inside the archive
    assert without_run_dirs(one) == without_run_dirs(report.collect_reports(folder / "whale" / "seed-1"))
    assert len(report.collect_reports(archive, folder / "whale" / "seed-0")) == 3  # two places, three runs


def test_an_archive_is_read_not_written(comparison, capsys):
    folder, archive = comparison
    assert main(["report", str(archive / "whale")]) == 2
    assert "is in a record archive, which is read, not written: give --out" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="holds no whale/seed-9"):
        report.collect_reports(archive / "whale" / "seed-9")
    with pytest.raises(ConfigError, match="goes down only"):
        report.collect_reports(archive / "whale" / ".." / "whale")
    capsys.readouterr()
    assert main(["report", str(folder), "--out", str(archive / "report")]) == 2
    assert "--out is inside a record archive, which is read, not written" in capsys.readouterr().err


def test_a_refusal_names_the_run_by_its_archive_path(tmp_path, capsys):
    (tmp_path / "cmp" / "run").mkdir(parents=True)
    (tmp_path / "cmp" / "run" / "config.json").write_text("{}")  # a run of no WHALE method
    (tmp_path / "cmp" / "run" / "events.jsonl").write_text("")
    pack(tmp_path / "cmp", tmp_path / "cmp.tar.gz")
    assert main(["report", str(tmp_path / "cmp.tar.gz"), "--out", str(tmp_path / "out")]) == 2
    assert f"{tmp_path / 'cmp.tar.gz' / 'run'} is not a WHALE run directory" in capsys.readouterr().err


def write_read(folder: Path, per_task: dict[str, list[float]]) -> None:
    folder.mkdir(parents=True)
    scores = [sum(s) / len(s) for s in per_task.values()]
    read = {
        "domain": "squad", "split": "test", "harness": "h0", "adapter": None, "k": 1,
        "serving": {"server": "embedded", "dtype": "bfloat16"}, "tasks": len(per_task),
        "mean_at_k": sum(scores) / len(scores), "ci_low": 0.0, "ci_high": 1.0, "per_task": per_task,
    }  # fmt: skip
    (folder / "report.json").write_text(json.dumps(read))


def test_paired_reads_from_an_archive_as_from_its_folder(tmp_path, capsys):
    write_read(tmp_path / "reads" / "start", {f"t{i}": [0.0] for i in range(30)})
    for seed in (1, 2):
        write_read(
            tmp_path / "reads" / f"better-s{seed}", {f"t{i}": [float(i % (seed + 1) == 0)] for i in range(30)}
        )
    pack(tmp_path / "reads", tmp_path / "reads.tar.gz")
    tables = []
    for base in (tmp_path / "reads", tmp_path / "reads.tar.gz"):
        pooled = f"{base / 'better-s1'}{os.pathsep}{base / 'better-s2'}"
        capsys.readouterr()
        assert main(["paired", str(base / "start"), pooled]) == 0
        tables.append(capsys.readouterr().out)
    assert "better-s1+better-s2 − start" in tables[0]
    assert tables[1] == tables[0]


def tar_gz(
    path: Path, *members: tuple[tarfile.TarInfo, bytes | None], format: int = tarfile.PAX_FORMAT
) -> Path:
    """An archive of these members, written as an attacker would: no checks on the way in."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=format) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    path.write_bytes(gzip.compress(buffer.getvalue()))
    return path


def member(name: str, data: bytes = b"{}", kind: bytes = tarfile.REGTYPE, link: str = "") -> tuple:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, data if kind == tarfile.REGTYPE else None


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (member("run/config.json", kind=tarfile.SYMTYPE, link="/etc/passwd"), "is a link or a device"),
        (member("run/events.jsonl", kind=tarfile.LNKTYPE, link="run/ok.json"), "is a link or a device"),
        (member("run/null", kind=tarfile.CHRTYPE), "is a link or a device"),
        (member("{tmp}/absolute.json"), "points outside the archive"),
        (member("run/../../escaped.json"), "points outside the archive"),
    ],
)
def test_a_member_that_is_a_link_or_points_outside_is_refused(tmp_path, bad, why, capsys, monkeypatch):
    info, data = bad
    info.name = info.name.format(tmp=tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "scratch"))  # an escape would land in tmp_path
    (tmp_path / "scratch").mkdir()
    archive = tar_gz(tmp_path / "records.tar.gz", member("run/ok.json"), (info, data))
    with pytest.raises(ConfigError, match=why), RecordArchives() as archives:
        archives.local(archive / "run")
    assert main(["report", str(archive), "--out", str(tmp_path / "out")]) == 2
    assert why in capsys.readouterr().err
    assert [p.name for p in tmp_path.rglob("*") if not p.is_dir()] == ["records.tar.gz"]  # nothing written


def test_an_archive_past_its_bounds_is_refused_before_extraction(tmp_path, capsys, monkeypatch):
    files = [member(f"run/f{i}.json", b"x" * 100) for i in range(4)]
    archive = tar_gz(tmp_path / "records.tar.gz", *files)
    extracted = []
    monkeypatch.setattr(tarfile.TarFile, "extractall", lambda *a, **k: extracted.append(a))
    size = archive.stat().st_size
    for bounds in (Bounds(members=3), Bounds(bytes=399), Bounds(compressed=size - 1)):
        with (
            pytest.raises(ConfigError, match="too large for a record archive"),
            RecordArchives(bounds) as archives,
        ):
            archives.local(archive)
    with RecordArchives(Bounds(members=4, bytes=400, compressed=size)) as archives:
        archives.local(archive)  # at the bounds: extracted
    assert len(extracted) == 1
    # A few bytes that declare more than the default bound: refused from the headers alone.
    bomb = tarfile.TarInfo("run/huge.bin")
    bomb.size = Bounds().bytes + 1
    (tmp_path / "bomb.tar.gz").write_bytes(gzip.compress(bomb.tobuf(tarfile.PAX_FORMAT)))
    assert main(["report", str(tmp_path / "bomb.tar.gz"), "--out", str(tmp_path / "out")]) == 2
    assert "too large for a record archive" in capsys.readouterr().err
    assert len(extracted) == 1


@pytest.mark.parametrize("format", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT])
def test_a_long_name_header_past_the_bounds_is_refused_unread(tmp_path, monkeypatch, format):
    """tarfile reads a PAX or GNU long-name header whole before any member check: a few kilobytes of
    gzip would otherwise put a header of gigabytes in memory."""
    name = "run/" + "x" * 4 * 2**20 + ".json"  # 4 MiB of header, 4 KiB of gzip
    archive = tar_gz(tmp_path / "records.tar.gz", member(name), format=format)
    read: list[int] = []
    gzip_read = gzip.GzipFile.read
    monkeypatch.setattr(
        gzip.GzipFile, "read", lambda self, size=-1: read.append(len(data := gzip_read(self, size))) or data
    )
    with (
        pytest.raises(ConfigError, match="too large for a record archive"),
        RecordArchives(Bounds(members=10, bytes=10_000)) as archives,
    ):
        archives.local(archive)
    assert sum(read) < 2**20  # stopped at the bound, not after the whole header


def test_what_is_not_an_archive_is_refused_clearly(tmp_path):
    (tmp_path / "broken.tar.gz").write_bytes(b"not gzip at all")
    with pytest.raises(ConfigError, match="is not a readable record archive"), RecordArchives() as archives:
        archives.local(tmp_path / "broken.tar.gz" / "run")


def test_an_archive_whose_checksum_does_not_match_is_refused(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "events.jsonl").write_text('{"kind": "run_started"}\n')
    pack(tmp_path / "run", tmp_path / "run.tar.gz")
    data = bytearray((tmp_path / "run.tar.gz").read_bytes())
    data[-8] ^= 0xFF  # gzip's trailer: the CRC-32 of the content, which reads back unchanged
    (tmp_path / "run.tar.gz").write_bytes(bytes(data))
    with pytest.raises(ConfigError, match="is not a readable record archive"), RecordArchives() as archives:
        archives.local(tmp_path / "run.tar.gz")


def test_the_extracted_copy_goes_when_the_command_ends(comparison):
    _, archive = comparison
    with RecordArchives() as archives:
        run = archives.local(archive / "whale" / "seed-0")
        assert (run / "config.json").exists()
    assert not run.exists()


def test_extraction_drops_modes_beyond_read_and_write(tmp_path):
    info, data = member("run/setuid.json")
    info.mode = 0o6777
    archive = tar_gz(tmp_path / "records.tar.gz", (info, data))
    with RecordArchives() as archives:
        mode = (archives.local(archive / "run") / "setuid.json").stat().st_mode
    assert mode & 0o6022 == 0  # no setuid or setgid, no write for group or others


def test_every_committed_archive_matches_the_checksum_its_readme_gives():
    # RESULTS cites these archives by sha256 (bench/records/README.md); a repack without a new
    # checksum, or an archive left out of the table, would leave a figure pointing at other bytes.
    records = Path(__file__).resolve().parents[2] / "bench" / "records"
    listed = dict(
        re.findall(
            r"^\| `([^`]+\.tar\.gz)` \|.*\| `([0-9a-f]{64})` \|", (records / "README.md").read_text(), re.M
        )
    )
    archives = {path.name: path for path in records.glob("*.tar.gz")}
    assert set(listed) == set(archives)
    for name, path in archives.items():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == listed[name], name
