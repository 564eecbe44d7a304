"""`whale train` and `whale search` refuse a run folder another process is writing, before touching it."""

from __future__ import annotations

import pytest
from rundir_helpers import written_by_another_process

from whale_cli.main import main
from whale_dspy.rundir import WRITER_LOCK


@pytest.mark.parametrize(
    "command",
    [
        ["train", "--domain", "math", "--train-limit", "4", "--batch-size", "2"],
        ["search", "--domain", "math", "--tasks", "2", "--test-tasks", "2", "--no-sandbox"],
    ],
    ids=["train", "search"],
)
def test_a_folder_another_process_is_writing_is_refused_untouched(command, tmp_path, capsys):
    run_dir = tmp_path / "run"
    server = ["--model", str(tmp_path), "--server-url", "http://127.0.0.1:9"]
    argv = [*command, *server, "--run-dir", str(run_dir)]
    with written_by_another_process(run_dir):
        assert main(argv) == 2
    assert "being written by another process" in capsys.readouterr().err
    assert [p.name for p in run_dir.iterdir()] == [WRITER_LOCK]  # no config, log or archive was written
