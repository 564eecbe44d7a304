"""MkDocs hook: the CLI reference is written from `whale`'s own argparse parser at every build.

docs/cli.md holds the marker below; each subcommand's `--help` replaces it, so the page cannot
drift from the flags the command accepts.
"""

from __future__ import annotations

import argparse
import functools

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

from whale_cli.main import build_parser

MARKER = "<!-- cli-reference -->"
WIDTH = 100
"""Help text is wrapped at this width whatever terminal the build runs in."""


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, cli_reference(build_parser()))


def cli_reference(parser: argparse.ArgumentParser) -> str:
    """One section per command (nested ones included): its summary line and its full `--help`."""
    sections = [_help_block(parser)]
    for name, summary, sub in _commands(parser):
        sections.append(f"## `{name}`\n\n{summary}\n\n{_help_block(sub)}")
    return "\n\n".join(sections)


def _commands(
    parser: argparse.ArgumentParser, prefix: str = "whale"
) -> list[tuple[str, str, argparse.ArgumentParser]]:
    found = []
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        summaries = {choice.dest: choice.help or "" for choice in action._choices_actions}
        for name, sub in action.choices.items():
            full = f"{prefix} {name}"
            found.append((full, summaries.get(name, ""), sub))
            found.extend(_commands(sub, full))
    return found


def _help_block(parser: argparse.ArgumentParser) -> str:
    parser.formatter_class = functools.partial(argparse.HelpFormatter, width=WIDTH)
    return f"```text\n{parser.format_help().rstrip()}\n```"
