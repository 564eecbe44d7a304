"""`whale train` refuses bad settings before it loads a model or starts a server."""

from __future__ import annotations

import pytest

from optimizers.weights.rft import STEP_EVENT
from whale_cli.main import build_parser, main
from whale_cli.train import rft_config_from
from whale_dspy.jsonl import append_jsonl, read_jsonl


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--k", "0"], "k must be >= 1"),
        (["--batch-size", "5", "--train-limit", "3"], "batch_size must be in 1..3"),
        (["--learning-rate", "2"], "learning_rate must be in (0, 1)"),
    ],
)
def test_bad_settings_fail_fast_with_the_valid_values(argv, message, tmp_path, capsys):
    code = main(["train", "--domain", "math", "--run-dir", str(tmp_path / "run"), *argv])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # nothing was started or written


def test_flags_lay_over_the_preset():
    args = build_parser().parse_args(
        [
            "train",
            "--domain",
            "math",
            "--preset",
            "gpu",
            "--steps",
            "7",
            "--k",
            "3",
            "--learning-rate",
            "0.002",
            "--gradient-checkpointing",
        ]
    )
    config = rft_config_from(args)
    assert (config.steps, config.k, config.training.learning_rate) == (7, 3, 0.002)
    assert config.training.gradient_checkpointing is True
    assert config.training.dtype == "bfloat16"  # the rest of the GPU preset is kept


def test_a_folder_that_holds_steps_is_continued_only_with_resume(tmp_path, capsys):
    """Re-running into a folder with steps would record them twice; --resume continues it instead."""
    run_dir = tmp_path / "run"
    command = ["train", "--domain", "math", "--train-limit", "4", "--batch-size", "2"]
    server = ["--model", str(tmp_path), "--server-url", "http://127.0.0.1:9"]  # nothing answers there
    main([*command, *server, "--run-dir", str(run_dir)])  # records its settings, then fails to connect
    append_jsonl(run_dir / "events.jsonl", {"kind": STEP_EVENT, "step": 0})
    capsys.readouterr()

    assert main([*command, *server, "--run-dir", str(run_dir)]) == 2
    assert f"continue it with --resume {run_dir}" in capsys.readouterr().err
    assert main(["train", "--domain", "math", *server, "--resume", str(tmp_path / "none")]) == 2
    assert "no run is recorded there" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()  # a mistyped --resume leaves no folder behind
    assert main([*command, "--k", "2", *server, "--resume", str(run_dir)]) == 2  # other settings
    assert "started with another configuration" in capsys.readouterr().err
    assert [e["step"] for e in read_jsonl(run_dir / "events.jsonl") if e["kind"] == STEP_EVENT] == [0]


def test_a_resume_drops_the_torn_line_a_kill_left_so_the_next_event_is_not_lost(tmp_path):
    run_dir = tmp_path / "run"
    command = ["train", "--domain", "math", "--train-limit", "4", "--batch-size", "2"]
    server = ["--model", str(tmp_path), "--server-url", "http://127.0.0.1:9"]  # nothing answers there
    main([*command, *server, "--run-dir", str(run_dir)])
    append_jsonl(run_dir / "events.jsonl", {"kind": "note", "n": 0})
    with (run_dir / "events.jsonl").open("a") as events:
        events.write('{"kind": "rft_step", "st')  # killed mid-write

    main([*command, *server, "--resume", str(run_dir)])  # opens the run, then fails to connect
    append_jsonl(run_dir / "events.jsonl", {"kind": "note", "n": 1})

    assert [e["n"] for e in read_jsonl(run_dir / "events.jsonl")] == [0, 1]
