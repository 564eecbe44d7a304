"""The API pages list every parameter of the public entry points: each name's `Args:` section
renders as its own Parameters table, so a parameter added to a signature without a line in the
docstring fails here. The names are taken from the signatures, never from a list kept here."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from collections import defaultdict
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.xdist_group("docs-site")  # beside test_docs_site's build, on one worker
for module in ("mkdocs", "material", "mkdocstrings_handlers.python"):
    pytest.importorskip(module, reason="the docs tools are dev extras: bash scripts/setup.sh --dev")

DOCUMENTED = [  # (page, the object's anchor on it, the import path of the object)
    ("api/optimizers", "optimizers.WhaleOptimizer", "optimizers.WhaleOptimizer"),
    ("api/optimizers", "optimizers.WhaleOptimizer.compile", "optimizers.WhaleOptimizer.compile"),
    ("api/optimizers", "optimizers.MetaHarness", "optimizers.MetaHarness"),
    ("api/optimizers", "optimizers.RejectionSamplingFinetune", "optimizers.RejectionSamplingFinetune"),
    ("api/whale_dspy", "whale_dspy.LM", "whale_dspy.LM"),
]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    return out


class _Parameters(HTMLParser):
    """Per documented object (its heading's id): the names its Parameters sections list.

    A section starts at a `doc-section-title` reading "Parameters:" and ends at the next section
    title or object heading; each of its `doc-section-item`s (a table row or a list item, whatever
    `docstring_section_style`) names its parameter in its first `<code>`.
    """

    def __init__(self) -> None:
        super().__init__()
        self.found: dict[str, list[str]] = defaultdict(list)
        self.heading: str | None = None
        self.title: list[str] | None = None  # the text of a section title being read
        self.in_parameters = False
        self.item_needs_name = False
        self.code: list[str] | None = None  # the text of the item's first <code> being read
        self.depth = 0  # of <code> inside that first one (annotations nest them)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = (dict(attrs).get("class") or "").split()
        if "doc-heading" in classes and dict(attrs).get("id"):
            self.heading, self.in_parameters = dict(attrs)["id"], False
        elif "doc-section-title" in classes:
            self.title, self.in_parameters = [], False
        elif "doc-section-item" in classes and self.in_parameters:
            self.item_needs_name = True
        elif tag == "code" and self.code is not None:
            self.depth += 1
        elif tag == "code" and self.item_needs_name:
            self.code, self.item_needs_name, self.depth = [], False, 0

    def handle_endtag(self, tag: str) -> None:
        if tag == "span" and self.title is not None:
            self.in_parameters = "".join(self.title).strip() == "Parameters:"
            self.title = None
        elif tag == "code" and self.code is not None:
            if self.depth:
                self.depth -= 1
                return
            assert self.heading is not None
            self.found[self.heading].append("".join(self.code).strip().lstrip("*"))
            self.code = None

    def handle_data(self, data: str) -> None:
        for text in (self.title, self.code):
            if text is not None:
                text.append(data)


def documented_parameters(site: Path, page: str) -> dict[str, list[str]]:
    parser = _Parameters()
    parser.feed((site / page / "index.html").read_text())
    return parser.found


def signature_parameters(path: str) -> list[str]:
    """The parameters a caller names: not self, not *args or **kwargs."""
    module, _, attribute = path.partition(".")
    target = __import__(module)
    for part in attribute.split("."):
        target = getattr(target, part)
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    params = inspect.signature(target).parameters.values()
    return [p.name for p in params if p.name != "self" and p.kind not in variadic]


@pytest.mark.parametrize(("page", "anchor", "path"), DOCUMENTED, ids=[anchor for _, anchor, _ in DOCUMENTED])
def test_every_parameter_of_the_signature_is_in_its_parameters_table(site, page, anchor, path):
    listed = documented_parameters(site, page)[anchor]
    expected = signature_parameters(path)
    assert expected, f"{path} has no parameters to check"  # a wrong path must not pass vacuously
    missing = [name for name in expected if name not in listed]
    assert not missing, f"{anchor}: no Args: line for {missing} (the page lists {listed})"
