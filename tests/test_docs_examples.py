"""Every ```python block in docs/ runs, on the shipped test doubles, so the examples cannot rot.

Blocks are parsed with markdown-it (the CommonMark parser rich already brings), which keeps each
fence's info string and line: a block titled `title="NAME.py"` is written to NAME.py in the page's
working folder (the student's class must live in a file), every other block runs in order in one
namespace per page. A block that needs a real model is preceded by the marker
`<!-- docs-test: not run: REASON -->`; those are counted and kept to a few.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

DOCS = Path(__file__).resolve().parent.parent / "docs"
NOT_RUN = re.compile(r"<!--\s*docs-test:\s*not run:\s*(?P<reason>\S.*?)\s*-->", re.S)
TITLE = re.compile(r'title="(?P<name>[A-Za-z_]\w*)\.py"')
MAX_NOT_RUN = 3
"""Blocks that need a real model; each one more is a page example nothing checks."""


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    code: str
    module: str | None
    """The module this block is saved as (a `title="NAME.py"` fence), None to run it."""
    not_run: str | None
    """Why it is not run (its marker's reason), None to run it."""


def python_blocks(page: Path) -> list[Block]:
    """The page's python fences in order; any other spelling of python fails, never skips quietly."""
    tokens = MarkdownIt("commonmark").parse(page.read_text())
    blocks, marker = [], None
    for token in tokens:
        if token.type == "html_block":
            found = NOT_RUN.search(token.content)
            marker = found["reason"] if found else None
            continue
        if token.type == "fence":
            lang, _, attributes = token.info.strip().partition(" ")
            if lang != "python" and lang.lower().startswith("py"):
                raise AssertionError(f"{page.name}:{token.map[0] + 1}: write python fences as ```python")
            if lang == "python":
                title = TITLE.search(attributes)
                line = token.map[0] + 1
                blocks.append(Block(page, line, token.content, title and title["name"], marker))
        marker = None
    return blocks


def pages() -> list[Path]:
    return sorted(page for page in DOCS.rglob("*.md") if python_blocks(page))


@pytest.mark.parametrize("page", pages(), ids=lambda page: str(page.relative_to(DOCS)))
def test_the_python_examples_of_a_page_run_in_order(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    namespace: dict[str, object] = {"__name__": "docs_example"}
    for block in python_blocks(page):
        if block.module:
            (tmp_path / f"{block.module}.py").write_text(block.code)
            monkeypatch.delitem(sys.modules, block.module, raising=False)  # another page's, if any
        elif block.not_run is None:
            exec(compile(block.code, f"{page.relative_to(DOCS)}:{block.line}", "exec"), namespace)


def test_only_a_few_examples_are_marked_not_run_and_each_says_why():
    not_run = [block for page in DOCS.rglob("*.md") for block in python_blocks(page) if block.not_run]
    assert len(not_run) <= MAX_NOT_RUN, [f"{b.page.name}:{b.line}: {b.not_run}" for b in not_run]
    assert pages(), "no python example found in docs/"
