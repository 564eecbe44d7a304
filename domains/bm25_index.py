"""BM25 retrieval over a bundled passage corpus (bm25s), cached on disk and in memory.

Building the HotpotQA index takes seconds, and every rollout needs a search
tool, so the index is built once per corpus version (keyed by the corpus
file's hash) under $WHALE_CACHE_DIR (default ~/.cache/whale-dspy), loaded once
per process, and shared by all rollouts behind a lock.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from domains.base import iter_records
from whale_dspy.errors import ConfigError

logger = logging.getLogger(__name__)

INDEX_VERSION = "bm25s-title-text-en-v1"
"""Part of the cache key: change it when tokenization or fields change."""

MAX_K = 20

_indexes: dict[tuple[Path, Path], PassageIndex] = {}
_indexes_lock = threading.Lock()


def cache_dir() -> Path:
    """$WHALE_CACHE_DIR if set, else ~/.cache/whale-dspy."""
    return Path(os.environ.get("WHALE_CACHE_DIR") or Path.home() / ".cache" / "whale-dspy")


def _tokenize(texts: list[str]) -> list[list[str]]:
    import bm25s

    return bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False)


class PassageIndex:
    """Passages ("title", "text") with a BM25 retriever over title + text."""

    def __init__(self, corpus_path: Path) -> None:
        import bm25s

        self.passages = [(str(rec["title"]), str(rec["text"])) for _, rec in _checked(corpus_path)]
        digest = hashlib.sha256(corpus_path.read_bytes() + INDEX_VERSION.encode()).hexdigest()[:16]
        folder = cache_dir() / "bm25" / f"{corpus_path.name.split('.')[0]}-{digest}"
        if not (folder / "params.index.json").is_file():
            self._build(folder)
        self.retriever = bm25s.BM25.load(str(folder), mmap=False, show_progress=False)
        self._lock = threading.Lock()

    def _build(self, folder: Path) -> None:
        """Index into a temporary folder, then move it into place (atomic for concurrent builders)."""
        import bm25s

        logger.info("building the BM25 index of %d passages into %s", len(self.passages), folder)
        retriever = bm25s.BM25()
        retriever.index(_tokenize([f"{title} {text}" for title, text in self.passages]), show_progress=False)
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".building-"))
        retriever.save(str(tmp), show_progress=False)
        try:
            tmp.rename(folder)
        except OSError:  # another process finished first; its index is identical
            shutil.rmtree(tmp, ignore_errors=True)

    def search(self, query: str, k: int = 1) -> list[tuple[str, str]]:
        """The top-k passages for the query, best first (empty when no query word is indexed)."""
        tokens = _tokenize([query])
        if not tokens or not tokens[0]:
            return []
        k = max(1, min(k, MAX_K, len(self.passages)))
        with self._lock:
            ids, scores = self.retriever.retrieve(tokens, k=k, show_progress=False, n_threads=0)
        return [self.passages[int(i)] for i, score in zip(ids[0], scores[0], strict=True) if score > 0]


def _checked(corpus_path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for lineno, record in iter_records(corpus_path):
        if "title" not in record or "text" not in record:
            raise ConfigError(f"{corpus_path}:{lineno}: a corpus row needs 'title' and 'text'")
        yield lineno, record


def get_index(corpus_path: Path) -> PassageIndex:
    """The process-wide index of a corpus file (built or loaded on first use), one per cache folder:
    a process that changes $WHALE_CACHE_DIR gets the index written there too."""
    key = (corpus_path, cache_dir())
    with _indexes_lock:
        if key not in _indexes:
            _indexes[key] = PassageIndex(corpus_path)
        return _indexes[key]


def make_search_tool(corpus_path: Path) -> Callable[..., str]:
    """A fresh `search` tool over the corpus, for one rollout."""

    def search(query: str, k: int = 1) -> str:
        """Search the Wikipedia passage collection; returns the top k passages as "[title] text"."""
        try:
            count = int(k)
        except (TypeError, ValueError):
            count = 1
        hits = get_index(corpus_path).search(str(query), count)
        if not hits:
            return "No passages found."
        return "\n\n".join(f"[{title}] {text}" for title, text in hits)

    return search
