"""`whale train` refuses bad settings before it loads a model or starts a server."""

from __future__ import annotations

import pytest

from whale_cli.main import build_parser, main
from whale_cli.train import rft_config_from


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
