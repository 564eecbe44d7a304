"""Shared plumbing of the dataset domains: row reading, split assignment, subsampling.

Every domain reads bundled files (gzipped JSONL or CSV) with line numbers so a
malformed row is reported precisely, assigns tasks to WHALE's four splits with a
salted hash (stable when filters change, disjoint by construction), and caches
the parsed splits once per process.
"""

from __future__ import annotations

import csv
import functools
import gzip
import hashlib
import io
import json
import random
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import dspy

from whale_dspy.errors import ConfigError
from whale_dspy.protocols import SPLITS

DATA_DIR = Path(__file__).parent / "data"
"""Where the bundled data lives; every domain takes a `data_dir` to override it."""


def _open_text(path: Path) -> io.TextIOBase:
    if not path.is_file():
        raise ConfigError(f"data file {path} does not exist")
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def iter_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, record) from a .jsonl or .csv file, gzipped or not."""
    stem = path.name.removesuffix(".gz")
    with _open_text(path) as handle:
        if stem.endswith(".csv"):
            reader = csv.DictReader(handle)
            for row in reader:
                yield reader.line_num, row
            return
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}:{lineno}: malformed JSON row ({exc.msg})") from exc
            if not isinstance(record, dict):
                raise ConfigError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
            yield lineno, record


@functools.lru_cache(maxsize=32)
def parse_rows(path: Path, convert: Callable[[dict[str, Any]], Any]) -> tuple[Any, ...]:
    """Convert every record of `path` once per process; a failing row names its file and line."""
    out = []
    for lineno, record in iter_records(path):
        try:
            out.append(convert(record))
        except (KeyError, ValueError, TypeError, IndexError) as exc:
            raise ConfigError(f"{path}:{lineno}: malformed row ({type(exc).__name__}: {exc})") from exc
    return tuple(out)


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise ConfigError(f"unknown split {split!r}; valid splits are {', '.join(SPLITS)}")


def assign_splits(keys: Sequence[str], fractions: dict[str, float], salt: str) -> dict[str, str]:
    """Map each key to a split: sort by salted hash, cut by fractions (exact, order-free)."""
    unique = sorted(set(keys), key=lambda key: hashlib.sha256(f"{salt}:{key}".encode()).hexdigest())
    names = list(fractions)
    total = sum(fractions.values())
    bounds, acc = [], 0.0
    for name in names:
        acc += fractions[name]
        bounds.append(round(len(unique) * acc / total))
    out, start = {}, 0
    for name, end in zip(names, bounds, strict=True):
        out.update(dict.fromkeys(unique[start:end], name))
        start = end
    return out


def subsample(examples: Sequence[dspy.Example], limit: int | None, seed: int) -> list[dspy.Example]:
    """Shuffle by seed, then take the first `limit` (a smaller limit gives a prefix)."""
    if limit is not None and limit < 0:
        raise ConfigError(f"limit must be a non-negative integer or None, got {limit}")
    order = list(examples)
    random.Random(seed).shuffle(order)
    return [example.copy() for example in order[:limit]]


class DatasetDomain:
    """A domain whose splits are built once (lazily, thread-safely) from bundled files."""

    name: str
    signature: type[dspy.Signature]

    def __init__(self, data_dir: Path | str | None = None) -> None:
        self.data_dir = Path(data_dir) if data_dir is not None else DATA_DIR
        self._splits: dict[str, list[dspy.Example]] | None = None
        self._lock = threading.Lock()

    def load(self, split: str, limit: int | None = None, seed: int = 0) -> list[dspy.Example]:
        check_split(split)
        with self._lock:
            if self._splits is None:
                self._splits = self._build_splits()
        return subsample(self._splits.get(split, []), limit, seed)

    def _build_splits(self) -> dict[str, list[dspy.Example]]:
        raise NotImplementedError


def group_by_split(
    examples: Sequence[dspy.Example], split_of: Callable[[dspy.Example], str]
) -> dict[str, list[dspy.Example]]:
    """Bucket examples into SPLITS (every split present, possibly empty)."""
    out: dict[str, list[dspy.Example]] = {split: [] for split in SPLITS}
    for example in examples:
        out[split_of(example)].append(example)
    return out


def answer_text(pred: Any) -> str | None:
    """The prediction's `answer` as text (attribute or dict key), or None when it has none."""
    answer = pred.get("answer") if isinstance(pred, dict) else getattr(pred, "answer", None)
    if answer is None:
        return None
    return answer if isinstance(answer, str) else str(answer)
