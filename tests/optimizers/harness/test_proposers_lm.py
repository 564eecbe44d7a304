"""LM, agentic and command proposers, driven by a ScriptedLM or a shell command (no API key)."""

from __future__ import annotations

import itertools
import os
import signal

import pytest
from meta_harness_helpers import GOOD, TOY, archive_with, exact, lm, source, student, tasks

from optimizers.harness.archive import HarnessArchive
from optimizers.harness.meta_harness import MetaHarness, MetaHarnessConfig
from optimizers.harness.proposers import (
    PROPOSER_HELP,
    PROPOSERS,
    AgenticProposer,
    ArchiveReader,
    CommandProposer,
    LMProposer,
    MechanismProposer,
    MutationProposer,
    ProposerOptions,
    proposer_from_spec,
)
from optimizers.harness.proposers.context import strip_code_fences
from whale_dspy.errors import ConfigError
from whale_dspy.testing.scripted_lm import ScriptedLM

WRITE = {"hypothesis": "answer every question", "harness_code": f"Here it is:\n```python\n{GOOD}```\nDone."}


@pytest.fixture
def archive(tmp_path):
    return archive_with(tmp_path / "archive")


def test_lm_proposer_reads_code_and_raw_traces_and_strips_fences(archive):
    proposer = LMProposer(ScriptedLM({"Raw trace: task t1, score 0.0": WRITE}), traces=4)
    proposed = proposer.propose(archive, 2)
    assert [s.code for s in proposed] == [GOOD, GOOD]
    assert proposed[0].parent == "c0000" and proposed[0].hypothesis == "answer every question"
    assert proposer.usage().calls == 2 and proposer.usage().tokens > 0 and not proposer.usage().failures


class PromptLog(ScriptedLM):
    """A ScriptedLM that keeps the last user message of every request."""

    def __init__(self, replies):
        super().__init__(replies)
        self.prompts: list[str] = []

    def __call__(self, prompt=None, *, messages=None, **kwargs):
        self.prompts.append(messages[-1]["content"])
        return super().__call__(prompt, messages=messages, **kwargs)


def test_lm_proposer_sees_the_task_gold_beside_failures_diffs_and_other_parents_and_ideas(tmp_path):
    archive = archive_with(tmp_path / "archive", [[source(GOOD, "a first idea")]])
    assert archive.labels() == {f"t{i}": {"answer": "4"} for i in range(4)}
    proposer = LMProposer(PromptLog([WRITE, WRITE]), traces=4)
    first, second = proposer.propose(archive, 2)
    assert (first.parent, second.parent) == ("c0001", "c0000")  # the two best, one each
    context = proposer.lm.prompts[0]
    assert "Instructions: Answer the question." in context and "Output field `answer` (str)" in context
    assert "Tool `wait(timeout)`" in context and "Metric: exact" in context  # the task card, first
    assert 'Gold (what the verifier expected; a search task): {"answer": "4"}' in context
    assert context.count("Gold (") == context.count(", score 0.0")  # beside failures only
    assert "## Diff against its parent c0000" in context and "+" in context.split("```diff")[1]
    assert "Already proposed" not in context and "choose a different mechanism" in proposer.lm.prompts[1]
    assert WRITE["hypothesis"] in proposer.lm.prompts[1].split("Already proposed")[1]


def test_lm_proposer_prompt_holds_the_full_trace_messages(archive):
    trace = archive.traces("c0000")[0]
    prompt_piece = trace.lm_calls[0].completion.splitlines()[0]
    proposer = LMProposer(ScriptedLM({prompt_piece: WRITE}))
    assert proposer.propose(archive, 1)[0].code == GOOD


def test_lm_proposer_retries_then_returns_fewer_and_records_why(archive):
    proposer = LMProposer(ScriptedLM([WRITE]), retries=2)  # one reply: the second candidate fails
    proposed = proposer.propose(archive, 2)
    assert len(proposed) == 1 and proposer.usage().calls == 1 + 3
    assert len(proposer.usage().failures) == 1 and "no scripted reply" in proposer.usage().failures[0]


def test_an_lm_that_always_fails_gives_empty_iterations(tmp_path):
    proposer = LMProposer(ScriptedLM([]), retries=1)
    config = MetaHarnessConfig.paper(candidates=2, tasks=4, threads=2, timeout_s=30)
    optimizer = MetaHarness(
        proposer=proposer, metric=exact, archive_dir=tmp_path / "a", lm=lm(), config=config
    )
    signals = [s for s, _ in itertools.islice(optimizer.iterations(student(), tasks()), 3)]
    assert [s.candidates for s in signals] == [1, 0, 0]
    assert signals[1].proposer_calls == 4 and signals[2].best_name == "c0000"
    records = HarnessArchive(tmp_path / "a").iteration_records()
    assert len(records[1]["proposer_errors"]) == 2 and "no scripted reply" in records[1]["proposer_errors"][0]


def test_strip_code_fences_takes_the_longest_block():
    assert strip_code_fences("```\nx = 1\n```\n```python\nimport dspy\ny = 2\n```") == "import dspy\ny = 2\n"
    assert strip_code_fences("x = 1") == "x = 1\n"


def test_archive_reader_is_confined_and_read_only(archive):
    reader = ArchiveReader(archive.path)
    assert "c0000/" in reader.list_dir(".")
    assert reader.read_file("c0000/harness.py") == TOY
    assert "c0000/harness.py:" in reader.grep("MAX_TURNS")
    for escape in ("../", "/etc/passwd", "c0000/../../x"):
        with pytest.raises(PermissionError):
            reader.read_file(escape)
    assert not any(name.startswith(("write", "remove")) for name in dir(reader))


def test_agentic_proposer_reads_before_writing(archive):
    read = {
        "next_thought": "read h0",
        "next_tool_name": "read_file",
        "next_tool_args": {"path": "c0000/harness.py"},
    }
    finish = {"next_thought": "done", "next_tool_name": "finish", "next_tool_args": {}}
    # Only prompts that contain h0's code (which the agent must read first) get the final answers.
    scripted = ScriptedLM(
        {"Toy harness: answer only": [finish, {"reasoning": "answer all", **WRITE}], "": [read]}
    )
    proposer = AgenticProposer(scripted)
    proposed = proposer.propose(archive, 1)
    assert [s.code for s in proposed] == [GOOD]
    assert proposer.usage().calls == 1 and proposer.usage().tokens > 0 and not proposer.usage().failures


def test_command_proposer_works_in_a_copy_and_collects_new_files(archive):
    command = (
        "cd {workdir} && test -f TASK.md && sed 's/no idea/unsure/' c0000/harness.py > new/unsure.py "
        "&& printf 'say unsure\\nparent: c0000\\n' > new/unsure.txt && rm -rf c0000"
    )
    proposer = CommandProposer(command)
    proposed = proposer.propose(archive, 3)
    assert [(s.name, s.parent, s.hypothesis) for s in proposed] == [("unsure", "c0000", "say unsure")]
    assert "unsure" in proposed[0].code and (archive.path / "c0000" / "harness.py").exists()


def test_an_interrupted_search_takes_the_command_proposers_agent_down_with_it(archive, tmp_path):
    """The agent runs in a session of its own, out of reach of the terminal's Ctrl-C."""
    pid_file = tmp_path / "agent.pid"
    proposer = CommandProposer(f"echo $$ > {pid_file} && exec sleep 60", jail=None)

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    try:
        with pytest.raises(KeyboardInterrupt):
            proposer.propose(archive, 1)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)


def test_command_proposer_tokens_are_what_the_agent_reported_or_unknown(archive):
    silent = CommandProposer("true")
    silent.propose(archive, 1)
    assert silent.usage().calls == 1 and silent.usage().tokens is None  # unknown, never 0
    codex = CommandProposer("echo 'tokens used: 12,345'")
    codex.propose(archive, 1)
    claude = CommandProposer(
        """echo '{"usage": {"input_tokens": 100, "cache_read_input_tokens": 20, "output_tokens": 7}}'"""
    )
    claude.propose(archive, 1)
    assert (codex.usage().tokens, claude.usage().tokens) == (12345, 127)
    claude.propose(archive, 1)
    silent_again = CommandProposer("true")
    silent_again.propose(archive, 1)
    assert claude.usage().tokens == 254 and silent_again.usage().since(silent.usage()).tokens is None


def test_unknown_proposer_tokens_stay_unknown_in_the_search_and_the_run(archive, tmp_path):
    from optimizers.engine.budget import Spend

    optimizer = MetaHarness(
        proposer=CommandProposer("true"),
        metric=exact,
        archive_dir=tmp_path / "search",
        lm=lm(),
        config=MetaHarnessConfig.paper(
            candidates=1, tasks=2, smoke_tasks=0, min_iterations=1, max_iterations=1
        ),
    )
    signals = [signal for signal, _ in itertools.islice(optimizer.iterations(student(), tasks(2)), 2)]
    assert [s.proposer_tokens for s in signals] == [0, None]  # h0 costs no proposing; the agent's is unknown
    spend = Spend()
    for step in signals:
        spend = spend.add_harness(step, step.rollouts)
    assert spend.proposer_tokens is None


def test_command_proposer_timeout_and_failure_are_recorded(archive):
    slow = CommandProposer("sleep 30", timeout_s=0.5)
    assert slow.propose(archive, 1) == [] and "timed out" in slow.usage().failures[0]
    failing = CommandProposer("echo boom; exit 3")
    assert failing.propose(archive, 1) == [] and "status 3" in failing.usage().failures[0]
    assert "boom" in failing.usage().failures[0]


def test_the_command_proposer_sees_neither_the_test_split_nor_secrets(archive, tmp_path, monkeypatch):
    """It runs jailed: its folder, the system's programs, and nothing of this process's world."""
    from pathlib import Path

    import domains

    test_split = next((Path(domains.__file__).parent / "data" / "chess").glob("*test*"))
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text("file-secret-7d2e")
    monkeypatch.setenv("WHALE_TEST_SECRET", "env-secret-91c4")
    leak = (
        f"(zcat {test_split} | head -c 200; cat {secret_file}; echo $WHALE_TEST_SECRET; "
        "cat /proc/[0-9]*/environ) > new/leak.py 2>&1; echo 'see leak' > new/leak.txt"
    )
    [proposed] = CommandProposer(leak).propose(archive, 1)
    assert "No such file" in proposed.code  # it ran, and found nothing
    for secret in ("file-secret-7d2e", "env-secret-91c4", "PuzzleId"):
        assert secret not in proposed.code
    unjailed = CommandProposer(leak, jail=None).propose(archive, 1)[0].code
    assert all(secret in unjailed for secret in ("file-secret-7d2e", "env-secret-91c4", "PuzzleId"))


def test_the_jail_grants_exactly_what_it_is_given(archive, tmp_path, monkeypatch):
    from optimizers.harness.proposers import Jail
    from whale_cli.run_settings import RunSettings

    config = tmp_path / "agent.conf"
    config.write_text("agent-config-5b1e")
    monkeypatch.setenv("WHALE_AGENT_KEY", "key-3c9a")
    monkeypatch.setenv("WHALE_OTHER_KEY", "other-8d0f")
    command = f"(cat {config}; echo $WHALE_AGENT_KEY $WHALE_OTHER_KEY) > new/seen.py"
    settings = RunSettings(domain="math", agent_read=(str(config),), agent_env=("WHALE_AGENT_KEY",))
    assert settings.agent_jail == Jail((str(config),), ("WHALE_AGENT_KEY",), False)
    proposer = proposer_from_spec(f"command:{command}", ProposerOptions(jail=settings.agent_jail))
    [seen] = proposer.propose(archive, 1)
    assert "agent-config-5b1e" in seen.code and "key-3c9a" in seen.code and "other-8d0f" not in seen.code


def test_proposer_from_spec_builds_every_registered_kind_and_its_help_names_them():
    made = []
    options = ProposerOptions(seed=3, make_lm=lambda m: made.append(m) or lm())
    mutation = proposer_from_spec("mutation", options)
    assert isinstance(mutation, MutationProposer) and mutation.seed == 3 and not mutation.guided
    assert proposer_from_spec("guided", options).guided
    composed = proposer_from_spec("composed", options)
    assert composed.guided and composed.depth == 2 and composed.label == "composed"
    assert isinstance(proposer_from_spec("lm:openai/x", options), LMProposer)
    assert isinstance(proposer_from_spec("agent:openai/y", options), AgenticProposer)
    assert isinstance(proposer_from_spec("mechanism:openai/z", options), MechanismProposer)
    assert made == ["openai/x", "openai/y", "openai/z"]
    assert proposer_from_spec("command:claude -p 'go'").command == "claude -p 'go'"
    assert all(f"{kind.form}: {kind.about}" in PROPOSER_HELP for kind in PROPOSERS.values())
    for bad in ("gpt", "lm:", "command:", "mutation:x"):
        with pytest.raises(ConfigError, match="valid forms: mutation, guided, composed, lm:MODEL"):
            proposer_from_spec(bad)


def test_proposers_skip_an_empty_archive(tmp_path):
    empty = HarnessArchive(tmp_path / "empty")
    assert LMProposer(ScriptedLM([])).propose(empty, 2) == []
    assert MutationProposer().propose(empty, 2) == []
