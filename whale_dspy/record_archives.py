"""Run records kept as compressed archives, read as folders.

A comparison's records hold model-written files (a search's harness `.py` files among them). Packed
into one `.tar.gz` per comparison they stay data: no tool reads them as source, and nothing here
imports or runs them. The readers (`whale report`, `whale paired`, bench/power.py) take a path that
goes on inside an archive: `bench/records/decisive-squad.tar.gz/whale-fixed/seed-1` is the folder
`whale-fixed/seed-1` of that archive, and the archive's own path is its top folder.

An archive is extracted once per command into a temporary folder, removed afterwards. Before
anything is written every member is checked: a plain file or folder, under a relative name with
no `..`, within a bounded count and total size (a small archive may unpack to gigabytes); then
tarfile's "data" filter extracts them (no links, no devices, no absolute paths, no modes beyond
read and write). The archive file's size and its whole decompressed stream are bounded too, since
tarfile reads a PAX or GNU long-name header into memory whole before any member check can run.
`pack` writes the archives these read, byte for byte the same for the same files, and replaces
an archive only once the new one is complete.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
import tempfile
import zlib
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import BinaryIO

from whale_dspy.errors import ConfigError
from whale_dspy.jsonl import atomic_write

ARCHIVE_SUFFIX = ".tar.gz"
ARCHIVE_PATHS = "ARCHIVE.tar.gz[/FOLDER]: a record archive reads as a folder (bench/records/README.md)"
"""How the readers' help names an archive path."""


HEADER_ROOM = 4 * tarfile.BLOCKSIZE
"""Per member, what the stream holds beyond its data: its header, a PAX header for a long name,
and the padding of both to whole blocks."""


@dataclass(frozen=True)
class Bounds:
    """The most an archive may hold (`compressed`: its file's size) and unpack to; past any bound
    it is refused before extraction."""

    members: int = 20_000
    bytes: int = 512 * 2**20
    compressed: int = 256 * 2**20

    def stream(self) -> int:
        """The most bytes the decompressed tar stream may have: the members' data, their headers
        and the end-of-archive record."""
        return self.bytes + self.members * HEADER_ROOM + tarfile.RECORDSIZE


def too_large(archive: Path, bounds: Bounds) -> ConfigError:
    return ConfigError(
        f"{archive} holds more than {bounds.members} members, {bounds.bytes} bytes of files or "
        f"{bounds.compressed} bytes of gzip: too large for a record archive"
    )


class BoundedStream:
    """A decompressed archive that refuses to go past `bounds.stream()`: each read asks for no more
    than what is left, so even a header tarfile reads whole stops at the bound."""

    def __init__(self, stream: BinaryIO, archive: Path, bounds: Bounds) -> None:
        self._stream, self._archive, self._bounds = stream, archive, bounds
        self._limit = bounds.stream()

    def read(self, size: int = -1) -> bytes:
        position = self._stream.tell()
        left = self._limit - position + 1  # one byte past the bound tells that there is more
        data = self._stream.read(left if size < 0 else min(size, left))
        if position + len(data) > self._limit:
            raise too_large(self._archive, self._bounds)
        return data

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence != os.SEEK_SET:
            raise io.UnsupportedOperation("a record archive is read by absolute offsets")
        if offset > self._limit:
            raise too_large(self._archive, self._bounds)
        return self._stream.seek(offset)

    def tell(self) -> int:
        return self._stream.tell()

    def seekable(self) -> bool:
        return True


def split_archive(path: Path) -> tuple[Path, PurePosixPath] | None:
    """(the archive, the path inside it) when a part of `path` is an archive file, else None."""
    for end in range(1, len(path.parts) + 1):
        head = Path(*path.parts[:end])
        if head.name.endswith(ARCHIVE_SUFFIX) and head.is_file():
            return head, PurePosixPath(*path.parts[end:])
    return None


def checked_members(tar: tarfile.TarFile, archive: Path, bounds: Bounds) -> list[tarfile.TarInfo]:
    """Every member, once each is known to be a plain file or folder under the archive and the
    running count and size are within `bounds`."""
    members: list[tarfile.TarInfo] = []
    total = 0
    for member in tar:
        name = PurePosixPath(member.name)
        if name.is_absolute() or ".." in name.parts:
            raise ConfigError(f"{archive}: member {member.name!r} points outside the archive")
        if not (member.isfile() or member.isdir()):
            raise ConfigError(f"{archive}: member {member.name!r} is a link or a device, not a plain file")
        members.append(member)
        total += member.size
        if len(members) > bounds.members or total > bounds.bytes:
            raise too_large(archive, bounds)
    return members


def extract(archive: Path, folder: Path, bounds: Bounds = Bounds()) -> None:
    """Unpack a checked record archive into `folder`."""
    if not hasattr(tarfile, "data_filter"):
        raise ConfigError("reading a record archive needs tarfile's data filter (Python 3.11.4 or later)")
    try:
        if archive.stat().st_size > bounds.compressed:
            raise too_large(archive, bounds)
        with gzip.open(archive, "rb") as unzipped:
            stream = BoundedStream(unzipped, archive, bounds)
            with tarfile.open(fileobj=stream, mode="r:") as tar:
                tar.extractall(folder, members=checked_members(tar, archive, bounds), filter="data")
            while stream.read(2**20):  # on to gzip's trailer: tarfile stops at its end-of-archive
                pass  # marker, and only the trailer's checksum tells a corrupted archive
    except (tarfile.TarError, OSError, EOFError, zlib.error) as error:
        raise ConfigError(f"{archive} is not a readable record archive: {error}") from error


class RecordArchives:
    """The archives one command reads, each extracted once; the copies go when it closes."""

    def __init__(self, bounds: Bounds = Bounds()) -> None:
        self._bounds = bounds
        self._stack = ExitStack()
        self._extracted: dict[Path, Path] = {}

    def local(self, path: Path) -> Path:
        """Where `path` can be read: itself outside any archive, else its place in the extracted copy."""
        found = split_archive(path)
        if found is None:
            return path
        archive, inner = found
        if ".." in inner.parts:
            raise ConfigError(f"{path}: a path inside an archive goes down only (no '..')")
        key = archive.resolve()
        if key not in self._extracted:
            folder = Path(self._stack.enter_context(tempfile.TemporaryDirectory(prefix="whale-records-")))
            extract(archive, folder, self._bounds)
            self._extracted[key] = folder
        local = self._extracted[key].joinpath(*inner.parts)
        if not local.exists():
            raise ConfigError(f"{archive} holds no {inner}")
        return local

    def close(self) -> None:
        self._stack.close()
        self._extracted.clear()

    def __enter__(self) -> RecordArchives:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()


def plain_files(folder: Path) -> list[tuple[str, Path]]:
    """(name in the archive, path) for every file below `folder`, sorted by name; a link is refused."""
    found = []
    for root, dirs, files in os.walk(folder):
        for name in [*dirs, *files]:
            path = Path(root, name)
            if path.is_symlink() or not (path.is_dir() or path.is_file()):
                raise ConfigError(f"{path} is a link or a device: a record archive holds plain files")
        found += [(Path(root, name).relative_to(folder).as_posix(), Path(root, name)) for name in files]
    return sorted(found)


def write_archive(raw: BinaryIO, files: list[tuple[str, Path]]) -> None:
    """Sorted members, no dates, owners or modes, gzip without a timestamp: the same files give the
    same bytes (with the same zlib), so a record's checksum names its content."""
    with (
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for name, path in files:
            info = tarfile.TarInfo(name)
            info.size, info.mode = path.stat().st_size, 0o644
            with path.open("rb") as data:
                tar.addfile(info, data)


def pack(folder: Path, out: Path) -> str:
    """Pack `folder`'s files into the archive `out` (names relative to `folder`) and return its
    sha256. It is written beside `out` and renamed onto it when complete, so a failed pack leaves
    `out` as it was; an `out` inside `folder` is refused (it would pack itself)."""
    if not folder.is_dir():
        raise ConfigError(f"{folder} is not a folder of records")
    if out.resolve().is_relative_to(folder.resolve()):
        raise ConfigError(f"{out} is inside the folder it packs ({folder}): write it elsewhere")
    files = plain_files(folder)
    atomic_write(out, lambda raw: write_archive(raw, files), mode=0o644)
    return hashlib.sha256(out.read_bytes()).hexdigest()
