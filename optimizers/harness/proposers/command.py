"""CommandProposer: an external coding agent (Claude Code, Codex, any CLI) writes the harnesses.

The agent runs jailed (`jail.Jail`, bubblewrap) in a COPY of the archive in a
temporary folder: it can read every candidate and trace and break nothing, and
it sees neither the test split, the run folder nor the parent's environment.
It gets a TASK.md saying what to write where, a timeout, and whatever it leaves
in `new/*.py` becomes the candidates (with `new/<name>.txt` as the hypothesis
when present).
"""

from __future__ import annotations

import logging
import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from optimizers.harness.archive import HarnessArchive
from optimizers.harness.proposers.context import task_text
from optimizers.harness.proposers.jail import DEFAULT_JAIL, Jail, bubblewrap
from optimizers.harness.proposers.usage import UsageMeter
from whale_dspy.errors import ConfigError
from whale_dspy.harness import HarnessSource
from whale_dspy.lifeline import run_in_group
from whale_dspy.records import ProposerUsage
from whale_dspy.untrusted_files import (
    MAX_FILE_BYTES,
    UntrustedFileError,
    list_untrusted,
    read_untrusted,
    read_untrusted_text,
)

log = logging.getLogger(__name__)

USAGE_FIELDS = re.compile(
    r'"(input_tokens|output_tokens|cache_creation_input_tokens|cache_read_input_tokens)"\s*:\s*(\d+)'
)
"""Claude Code's `--output-format json` usage object (the cache fields are input tokens too)."""
TOKENS_USED = re.compile(r"tokens used:?\s*([\d,]+)", re.IGNORECASE)
"""Codex CLI's closing line, `tokens used: 12,345`."""

AGENT_GRACE_S = 1.0
"""Between SIGTERM and SIGKILL for an agent whose caller died (its edits are thrown away anyway)."""
OUTPUT_FILE = "agent-output.log"
"""The agent's stdout and stderr, beside (not inside) its folder; only its last max_file_bytes are read."""
TASK_FILE = "TASK.md"
NEW_DIR = "new"
INSTRUCTIONS = """# Task

{task}

This folder is a copy of the harness archive: one folder per candidate with harness.py (source),
meta.json (scores, cost, status, error), traces.jsonl (full rollout traces) and diff.patch
(against its parent); archive.jsonl summarizes all candidates, frontier.json is the
accuracy/cost frontier, task_card.md describes the task (signature, tools, metric) and labels.json
holds the search tasks' gold answers by task id. The best candidate so far is {parent}.

Write {k} new harness module(s) into `{new_dir}/` as `{new_dir}/<short_name>.py`, each a complete
standalone module, and for each one a `{new_dir}/<short_name>.txt` whose first line is its
hypothesis (the one new mechanism and why it should help). Optionally a line `parent: cNNNN` names
the candidate it starts from (default {parent}). Do not modify anything else.
"""


class CommandProposer:
    label = "command"

    def __init__(
        self,
        command: str,
        *,
        timeout_s: float = 1800.0,
        prompt_only: bool = False,
        jail: Jail | None = DEFAULT_JAIL,
        max_file_bytes: int = MAX_FILE_BYTES,
    ):
        """`jail`: what the agent may see besides its folder (its binary, configuration and API key
        go in `Jail(read_only=..., env=..., network=True)`); `jail=None` is the opt-in to run it
        unjailed, with this process's whole filesystem and environment in reach. `max_file_bytes`:
        the largest file it may leave in new/ (a larger one is refused)."""
        if not command.strip():
            raise ConfigError("CommandProposer needs a command line, e.g. \"claude -p 'read TASK.md'\"")
        if timeout_s <= 0:
            raise ConfigError(f"timeout_s must be > 0, got {timeout_s}")
        if max_file_bytes <= 0:
            raise ConfigError(f"max_file_bytes must be > 0, got {max_file_bytes}")
        if jail is not None:
            bubblewrap()  # ConfigError now, before any search, when it is missing
        self.command = command
        self.jail = jail
        self.timeout_s = timeout_s
        self.prompt_only = prompt_only
        self.max_file_bytes = max_file_bytes
        self.meter = UsageMeter()

    def usage(self) -> ProposerUsage:
        """Calls, and tokens where the agent printed its usage (else unknown: never guessed as 0)."""
        return self.meter.usage()

    def propose(self, archive: HarnessArchive, k: int) -> list[HarnessSource]:
        best = archive.parents(1)
        parent = best[0].name if best else "c0000"
        with tempfile.TemporaryDirectory(prefix="whale-proposer-") as tmp:
            workdir = Path(tmp) / "archive"
            shutil.copytree(archive.path, workdir, ignore=shutil.ignore_patterns(".staging-*"))
            (workdir / NEW_DIR).mkdir()
            task = task_text(self.prompt_only)
            text = INSTRUCTIONS.format(task=task, parent=parent, k=k, new_dir=NEW_DIR)
            (workdir / TASK_FILE).write_text(text)
            self._run(workdir)
            return self._collect(workdir, parent, archive)[:k]

    def _run(self, workdir: Path) -> None:
        """Run the command in a process group of its own on a lifeline, killed whole when it ends or
        times out; its output goes to a file beside its folder, whose tail is read back as an
        untrusted file (bounded, as everything the agent leaves). Failures are recorded."""
        command = self.command.replace("{workdir}", shlex.quote(str(workdir)))
        if self.jail is None:
            argv, env = ["/bin/sh", "-c", command], None
        else:
            launch = self.jail.launch(workdir, command)
            argv, env = launch.argv, launch.env
        with open(workdir.parent / OUTPUT_FILE, "wb") as output_file:
            try:
                code: int | None = run_in_group(
                    argv,
                    timeout_s=self.timeout_s,
                    grace_s=AGENT_GRACE_S,
                    cwd=workdir,
                    env=env,
                    stdout=output_file,
                    stderr=subprocess.STDOUT,
                )
            except subprocess.TimeoutExpired:
                code = None
        output = self._output(workdir.parent)
        self.meter.called(reported_tokens(output))
        if code is None:
            self._fail(f"timed out after {self.timeout_s:g} s", output)
        elif code != 0:
            self._fail(f"exited with status {code}", output)

    def _output(self, folder: Path) -> str:
        try:
            tail = read_untrusted(folder, OUTPUT_FILE, max_bytes=self.max_file_bytes, tail=True)
        except UntrustedFileError as error:
            return f"(its output was refused: {error})"
        return tail.decode("utf-8", errors="replace")

    def _fail(self, what: str, output: str | None) -> None:
        tail = (output or "")[-2000:]
        log.warning("command proposer %s; output tail:\n%s", what, tail)
        self.meter.failed(f"{what}: {tail[-300:]}")

    def _collect(self, workdir: Path, parent: str, archive: HarnessArchive) -> list[HarnessSource]:
        """Each `new/<name>.py` (and its notes) read back as an untrusted file; refusals are failures."""
        try:
            names = list_untrusted(workdir, NEW_DIR)
        except UntrustedFileError as error:
            self._refused(error)
            return []
        sources = []
        for name in (n for n in names if n.endswith(".py")):
            try:
                sources.append(self._candidate(workdir, name[: -len(".py")], names, parent, archive))
            except UntrustedFileError as error:
                self._refused(error)
        return sources

    def _candidate(
        self, workdir: Path, stem: str, names: list[str], parent: str, archive: HarnessArchive
    ) -> HarnessSource:
        def read(name: str) -> str:
            return read_untrusted_text(workdir, f"{NEW_DIR}/{name}", max_bytes=self.max_file_bytes)

        lines = read(f"{stem}.txt").splitlines() if f"{stem}.txt" in names else []
        named = [line.split(":", 1)[1].strip() for line in lines if line.lower().startswith("parent:")]
        own_parent = named[0] if named and named[0] in archive else parent
        hypothesis = next((line for line in lines if not line.lower().startswith("parent:")), "")
        return HarnessSource(stem, read(f"{stem}.py"), own_parent, hypothesis.strip())

    def _refused(self, error: UntrustedFileError) -> None:
        log.warning("command proposer: refused what the agent left: %s", error)
        self.meter.failed(f"refused what the agent left: {error}")


def reported_tokens(output: str | None) -> int | None:
    """The tokens an agent printed it used (Claude Code's JSON usage, Codex's "tokens used"), else None."""
    text = output or ""
    used = [int(count.replace(",", "")) for count in TOKENS_USED.findall(text)]
    if used:
        return used[-1]
    fields = USAGE_FIELDS.findall(text)
    return sum(int(count) for _, count in fields) if fields else None
