"""AgenticProposer: a dspy.ReAct agent that browses the archive folder before it writes a harness.

Instead of receiving a fixed digest, the agent decides what to read (which
candidates' code, which traces) with read-only tools confined to the archive
folder, as the Meta-Harness proposer does with its filesystem.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import dspy

from optimizers.harness.archive import HarnessArchive
from optimizers.harness.proposers.context import summary_line, task_text
from optimizers.harness.proposers.lm import LMProposer

log = logging.getLogger(__name__)

MAX_READ_CHARS = 20_000
MAX_GREP_LINES = 200


class ArchiveReader:
    """Read-only views of one folder: paths outside it (.., absolute, symlinks out) are refused."""

    def __init__(self, root: Path):
        self.root = root.resolve()

    def _resolve(self, path: str) -> Path:
        target = (self.root / path).resolve()  # an absolute `path` replaces the root: refused below
        if not target.is_relative_to(self.root):
            raise PermissionError(f"{path!r} is outside the archive folder")
        return target

    def list_dir(self, path: str = ".") -> str:
        """List the files and folders under `path` (relative to the archive folder)."""
        folder = self._resolve(path)
        entries = sorted(folder.iterdir())
        return "\n".join(f"{e.relative_to(self.root)}{'/' if e.is_dir() else ''}" for e in entries)

    def read_file(self, path: str, offset: int = 0) -> str:
        """Read a file of the archive (relative path), from character `offset`, up to 20,000 characters."""
        text = self._resolve(path).read_text(errors="replace")
        chunk = text[offset : offset + MAX_READ_CHARS]
        rest = len(text) - offset - len(chunk)
        return chunk + (
            f"\n... [{rest} more chars: read again with offset={offset + len(chunk)}]" if rest > 0 else ""
        )

    def grep(self, pattern: str, path: str = ".") -> str:
        """Lines matching the regex `pattern` in the files under `path`, as file:line: text."""
        regex = re.compile(pattern)
        target = self._resolve(path)
        files = [target] if target.is_file() else sorted(p for p in target.rglob("*") if p.is_file())
        hits = []
        for file in files:
            for number, line in enumerate(file.read_text(errors="replace").splitlines(), start=1):
                if regex.search(line):
                    hits.append(f"{file.relative_to(self.root)}:{number}: {line[:300]}")
                if len(hits) >= MAX_GREP_LINES:
                    return "\n".join(hits) + "\n... [more matches cut]"
        return "\n".join(hits) or "no match"

    def tools(self) -> list[dspy.Tool]:
        return [dspy.Tool(self.list_dir), dspy.Tool(self.read_file), dspy.Tool(self.grep)]


class ExploreAndWrite(dspy.Signature):
    """Explore the archive of harness candidates with the tools (their harness.py, meta.json, traces.jsonl,
    diff.patch), find why candidates fail, then write an improved harness with ONE new mechanism."""

    task: str = dspy.InputField(desc="what a harness is and the rules a new one must follow")
    overview: str = dspy.InputField(desc="one line per candidate; read the folders for code and traces")
    parent: str = dspy.InputField(desc="the candidate to start from (folder name)")
    hypothesis: str = dspy.OutputField(desc="the one new mechanism and why it should raise the score")
    harness_code: str = dspy.OutputField(desc="the complete new harness module (Python source)")


class AgenticProposer(LMProposer):
    """LMProposer's retries and accounting, with an agent that reads the archive itself."""

    label = "agent"

    def __init__(self, lm: dspy.BaseLM, *, max_iters: int = 12, **kwargs):
        super().__init__(lm, **kwargs)
        self.max_iters = max_iters

    def propose(self, archive: HarnessArchive, k: int):
        reader = ArchiveReader(archive.path)
        self.write = dspy.ReAct(ExploreAndWrite, tools=reader.tools(), max_iters=self.max_iters)
        return super().propose(archive, k)

    def _inputs(self, archive: HarnessArchive, parent: str) -> dict[str, str]:
        overview = "\n".join(map(summary_line, archive.candidates))
        return {"task": task_text(self.prompt_only), "overview": overview, "parent": parent}
