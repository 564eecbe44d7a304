"""The documentation site builds with `mkdocs build --strict`: a dead link, a missing API name or a
page left out of the build fails here, and so in CI. The CLI page is generated from the parser."""

from __future__ import annotations

import argparse
import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.xdist_group("docs-site")  # one worker builds the site once for every test
for module in ("mkdocs", "material", "mkdocstrings_handlers.python"):
    pytest.importorskip(module, reason="the docs tools are dev extras: bash scripts/setup.sh --dev")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    return out


def page_text(site: Path, page: str) -> str:
    """The page's visible text, tags dropped."""
    return html.unescape(re.sub(r"<[^>]+>", "", (site / page / "index.html").read_text()))


def test_the_cli_page_holds_every_command_with_its_flags_from_the_parser(site):
    from whale_cli.main import build_parser

    text = page_text(site, "cli")
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name, command in commands.items():
        assert f"usage: whale {name}" in text
        for option in (o for action in command._actions for o in action.option_strings):
            assert option in text, f"whale {name} {option}"
    assert "<!-- cli-reference -->" not in (site / "cli" / "index.html").read_text()  # replaced by the hook


def test_the_api_pages_hold_the_public_names_docstrings(site):
    optimizers = page_text(site, "api/optimizers")
    assert "optimizers.WhaleOptimizer" in optimizers and "passed once: the phases get it" in optimizers
    assert "An LM on model served by our backend" in page_text(site, "api/whale_dspy")


def test_the_results_are_a_page_with_their_figures(site):
    assert "Benchmark results" in page_text(site, "bench/RESULTS")
    assert (site / "bench/figures/seeds-squad/curve.png").is_file()
