"""Reading back files an untrusted process wrote (the jailed agent, the sandbox child).

Such a process can leave anything where a file is expected: a symbolic link
to `/proc/self/environ` or to the test split (which this process, outside the
jail, could read), a hard link to a file outside its folder, a FIFO that
blocks a reader forever, a device, or a file of gigabytes. So a file is read
back only when every component of its path, walked from the folder's own
descriptor without following links, is a real directory or, at the end, a
regular file with one link and at most `max_bytes` bytes. Opening is
non-blocking and the type is checked on the open descriptor before any read.
Everything else raises `UntrustedFileError` saying why (a missing file raises
`FileNotFoundError`).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from whale_dspy.errors import HarnessError

MAX_FILE_BYTES = 256 * 1024
"""The default size limit: a harness is a few kB, so this is generous and still bounds memory."""
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


class UntrustedFileError(HarnessError):
    """A file an untrusted process left was refused (a link, a FIFO, a device, too large, outside)."""


def read_untrusted(
    root: Path, relative: str, *, max_bytes: int = MAX_FILE_BYTES, tail: bool = False
) -> bytes:
    """The bytes of `root/relative` if it is a bounded regular file inside `root`.

    `tail=True` returns the last `max_bytes` of a larger file instead of refusing it (a log's end).
    """
    parts = _parts(relative)
    with _open_dir(root, parts[:-1], relative) as dir_fd:
        fd = _open_file(dir_fd, parts[-1], relative)
    with os.fdopen(fd, "rb") as handle:
        size = os.fstat(fd).st_size
        if size > max_bytes and not tail:
            raise UntrustedFileError(f"{relative}: {size} bytes is over the {max_bytes}-byte limit")
        handle.seek(max(0, size - max_bytes) if tail else 0)
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes and not tail:  # it grew after the check
        raise UntrustedFileError(f"{relative}: over the {max_bytes}-byte limit")
    return data[len(data) - min(len(data), max_bytes) :]


def read_untrusted_text(root: Path, relative: str, *, max_bytes: int = MAX_FILE_BYTES) -> str:
    """`read_untrusted` decoded as UTF-8, undecodable bytes replaced."""
    return read_untrusted(root, relative, max_bytes=max_bytes).decode("utf-8", errors="replace")


def list_untrusted(root: Path, relative: str = ".") -> list[str]:
    """The sorted entry names of the folder `root/relative`, reached without following links."""
    parts = [] if relative in ("", ".") else _parts(relative)
    with _open_dir(root, parts, relative) as dir_fd:
        return sorted(os.listdir(dir_fd))


def _parts(relative: str) -> list[str]:
    path = PurePosixPath(relative)
    if path.is_absolute() or not path.parts or any(part in ("..", ".") for part in path.parts):
        raise UntrustedFileError(f"{relative!r} is not a plain path inside the folder")
    return list(path.parts)


@contextlib.contextmanager
def _open_dir(root: Path, parts: list[str], relative: str) -> Iterator[int]:
    """A descriptor of root/parts..., each step opened relative to the last, never through a link."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in parts:
            try:
                step = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as error:
                raise UntrustedFileError(
                    f"{relative}: {part} is not a folder inside it ({error.strerror})"
                ) from None
            os.close(fd)
            fd = step
        yield fd
    finally:
        os.close(fd)


def _open_file(dir_fd: int, name: str, relative: str) -> int:
    """Open `name` only if it is a regular file with a single link; checked before and after opening."""
    try:
        before = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        raise  # absent, not refused: the caller decides whether that is fine
    except OSError as error:
        raise UntrustedFileError(f"{relative}: {error.strerror}") from None
    _check(before, relative)
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError as error:
        raise UntrustedFileError(
            f"{relative}: cannot be opened without following links ({error.strerror})"
        ) from None
    after = os.fstat(fd)
    if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
        os.close(fd)
        raise UntrustedFileError(f"{relative}: was replaced while being opened")
    try:
        _check(after, relative)
    except UntrustedFileError:
        os.close(fd)
        raise
    return fd


def _check(info: os.stat_result, relative: str) -> None:
    if stat.S_ISLNK(info.st_mode):
        raise UntrustedFileError(f"{relative}: is a symbolic link")
    if not stat.S_ISREG(info.st_mode):
        raise UntrustedFileError(f"{relative}: is not a regular file (mode {stat.filemode(info.st_mode)})")
    if info.st_nlink != 1:
        raise UntrustedFileError(
            f"{relative}: has {info.st_nlink} hard links (it may be a file outside the folder)"
        )
