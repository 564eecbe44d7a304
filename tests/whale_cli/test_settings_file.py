"""`--config FILE`: run settings from TOML with the flags on top, checked before anything starts,
and `whale config show` printing them back as a file that reads the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpu_sizing_helpers import QWEN3_4B, QWEN25_05B

from whale_cli.main import build_parser, main
from whale_cli.run_settings import RunSettings
from whale_cli.settings_file import read_settings_file, settings_from_args
from whale_dspy.backends.gpu_sizing import kv_bytes_per_token
from whale_dspy.errors import ConfigError


def settings_of(argv: list[str]) -> RunSettings:
    return settings_from_args(build_parser().parse_args(argv))


def test_a_file_gives_the_settings_and_flags_override_it(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text('domain = "squad:score=f1"\nbudget = 512\nagent_env = ["KEY"]\nweight_share = 0.5\n')
    settings = settings_of(["run", "--config", str(path), "--budget", "64"])
    assert settings == RunSettings(domain="squad:score=f1", budget=64, agent_env=("KEY",), weight_share=0.5)


def test_the_settings_may_sit_under_a_run_table(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text('[run]\ndomain = "math"\npreset = "gpu"\n')
    assert settings_of(["compare", "--config", str(path)]) == RunSettings(domain="math", preset="gpu")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('domain = "math"\nbudgett = 5\n', "unknown setting(s) budgett; valid: domain, method"),
        ('domain = "math"\nbudget = "100"\n', "budget must be int, got '100'"),
        ('domain = "math"\neval_k = true\n', "eval_k must be int, got True"),
        ('domain = "math"\nagent_read = [1]\n', "agent_read must be a list of strings"),
        ('domain = "math"\nbudget = \n', "is not valid TOML"),
    ],
)
def test_a_bad_file_is_refused_with_the_key_that_is_wrong(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "run.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace(")", r"\)")):
        read_settings_file(path)


def test_config_show_prints_a_file_that_reads_back_the_same_settings(tmp_path: Path, capsys) -> None:
    path = tmp_path / "run.toml"
    path.write_text('domain = "chess"\nbudget = 300\nmethod = "stagewise"\n')
    argv = ["config", "show", "--config", str(path), "--preset", "gpu", "--seed", "3", "--agent-env", "K"]
    assert main(argv) == 0
    shown = tmp_path / "shown.toml"
    shown.write_text(capsys.readouterr().out)
    expected = RunSettings(
        domain="chess", budget=300, method="stagewise", preset="gpu", seed=3, agent_env=("K",)
    )
    assert RunSettings(**read_settings_file(shown)) == expected
    assert '"max_tokens"' in shown.read_text()  # the resolved sampling, as comments


def test_config_show_checks_names_before_anything_starts(tmp_path: Path, capsys) -> None:
    assert main(["config", "show", "--domain", "math", "--schedule", "fixed:x"]) == 2
    assert "error" in capsys.readouterr().err
    assert main(["config", "show", "--budget", "5"]) == 2
    assert "need a domain" in capsys.readouterr().err


def test_compare_and_study_take_their_domain_from_the_file(tmp_path: Path) -> None:
    from whale_cli import compare, study

    path = tmp_path / "run.toml"
    path.write_text('domain = "math"\nbudget = 40\nschedule = "fixed:1,1"\n')
    runs, _ = compare.plan(
        build_parser().parse_args(["compare", "--config", str(path), "--methods", "whale"])
    )
    assert [settings.schedule for settings, _ in runs] == ["fixed:1,1"]  # the file's, not the default
    with pytest.raises(ConfigError, match="searches the schedule"):
        study.run_settings(build_parser().parse_args(["study", "--config", str(path), "--trials", "1"]))
    path.write_text('domain = "math"\nbudget = 40\n')
    assert (
        study.run_settings(
            build_parser().parse_args(["study", "--config", str(path), "--trials", "1"])
        ).budget
        == 40
    )
    path.write_text('domain = "math"\nseed = 3\n')
    with pytest.raises(ConfigError, match="--methods and --seeds"):
        compare.plan(build_parser().parse_args(["compare", "--config", str(path)]))


def test_the_trainer_is_placed_by_the_settings(tmp_path: Path) -> None:
    settings = settings_of(
        ["run", "--domain", "math", "--train-device", "cuda:1", "--train-launcher", "ssh trainhost"]
    )
    assert settings.train_launcher == ("ssh", "trainhost")
    assert settings.whale_config().rft.training.device == "cuda:1"
    gpu = RunSettings(domain="math", preset="gpu").whale_config()
    assert gpu.rft.training.device == "cuda"  # the preset's
    with pytest.raises(ConfigError, match="device must be"):
        RunSettings(domain="math", train_device="tpu")


def test_a_preset_sizes_both_phases_and_an_unknown_one_names_the_valid() -> None:
    from optimizers.engine.presets import PRESETS

    for name, preset in PRESETS.items():
        meta = preset.meta_harness_config(seed=1, prompt_only=False)
        rft = RunSettings(domain="math", preset=name, seed=1).whale_config().rft
        assert meta.seed == 1 and rft.seed == 1
        assert all(getattr(meta, key) == value for key, value in preset.meta_harness.items())
    assert RunSettings(domain="math", preset="gpu").whale_config().rft.k == 8  # WHALE's k on a GPU
    assert PRESETS["cpu"].meta_harness_config().tasks == 8
    with pytest.raises(ConfigError, match="valid presets are cpu, gpu"):
        RunSettings(domain="math", preset="tpu")


def test_max_tokens_sets_every_phase_and_checkpoint_and_old_records_leave_it_out() -> None:
    preset = RunSettings(domain="math")
    assert preset.record().get("max_tokens") is None  # a run recorded before the field resumes
    settings = settings_of(["run", "--domain", "math", "--max-tokens", "512"])
    config = settings.whale_config()
    assert config.rft.max_tokens == 512 and config.sampling["max_tokens"] == 512
    assert settings.sampling == config.sampling != preset.sampling
    assert settings.record()["max_tokens"] == 512
    assert RunSettings(**settings.record()) == settings
    with pytest.raises(ConfigError, match="max_tokens"):
        RunSettings(domain="math", max_tokens=0)


def test_a_record_without_a_later_field_reads_back_as_it_meant_then(tmp_path: Path, monkeypatch) -> None:
    recorded = RunSettings(domain="math").record()
    assert not set(recorded) & set(RunSettings.LATER_FIELDS)  # each holds what an old record meant
    (tmp_path / "config.json").write_text(json.dumps({"cli": recorded}))
    assert RunSettings.from_run(tmp_path) == RunSettings(domain="math")
    # what a record without the field means comes from LATER_FIELDS, not from today's default:
    monkeypatch.setitem(RunSettings.LATER_FIELDS, "budget_unit", "calls")
    assert RunSettings.from_run(tmp_path).budget_unit == "calls"


def test_whale_eval_samples_as_the_run_it_checks_unless_told_otherwise() -> None:
    from optimizers.engine import WhaleConfig
    from whale_cli.eval import eval_sampling, with_run_defaults

    run = RunSettings(domain="math").sampling
    assert eval_sampling(with_run_defaults(build_parser().parse_args(["eval", "--domain", "math"]))) == run
    told = build_parser().parse_args(["eval", "--domain", "math", "--preset", "gpu", "--temperature", "0.2"])
    assert eval_sampling(told) == {**WhaleConfig.for_preset("gpu").sampling, "temperature": 0.2}


def test_a_gpu_settings_file_is_checked_and_sized_on_cpu(tmp_path: Path, capsys) -> None:
    model = _model_folder(tmp_path, QWEN25_05B)
    path = tmp_path / "gpu.toml"
    path.write_text(f'domain = "math"\npreset = "gpu"\nmodel = "{model}"\ngpu_memory_gib = [141]\n')
    assert main(["config", "show", "--config", str(path)]) == 0
    shown = capsys.readouterr().out
    assert RunSettings(**read_settings_file(_written(tmp_path, shown))).gpu_memory_gib == (141.0,)
    block = shown.split("# resolved", 1)[1].splitlines()[1:]
    resolved = json.loads("\n".join(line.removeprefix("# ") for line in block))
    assert resolved["gpu_sizing"]["train_device"] == "cuda:0" and resolved["weight_phase"]["threads"] == 64
    path.write_text('domain = "math"\ngpu_memory_gib = ["big"]\n')
    with pytest.raises(ConfigError, match="list of numbers"):
        read_settings_file(path)


def test_harness_decision_settings_come_from_the_file_and_flags_and_are_checked(tmp_path, capsys) -> None:
    path = tmp_path / "decide.toml"
    path.write_text('domain = "math"\nacceptance = "strict"\nselection_tasks = 16\nbudget_unit = "calls"\n')
    assert main(["config", "show", "--config", str(path), "--confidence", "0.9"]) == 0
    shown = capsys.readouterr().out
    block = shown.split("# resolved", 1)[1].splitlines()[1:]
    harness = json.loads("\n".join(line.removeprefix("# ") for line in block))["harness_phase"]
    assert (harness["acceptance"], harness["selection_tasks"], harness["confidence"]) == ("strict", 16, 0.9)
    assert RunSettings(**read_settings_file(_written(tmp_path, shown))).budget_unit == "calls"
    path.write_text('domain = "math"\nacceptance = "best"\n')
    with pytest.raises(ConfigError, match="unknown acceptance rule"):
        RunSettings(**read_settings_file(path))


def _model_folder(tmp_path: Path, shape: dict) -> Path:
    """A model folder that holds only what sizing reads: its config.json."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(shape))
    return model


def _written(folder: Path, text: str) -> Path:
    path = folder / "shown.toml"
    path.write_text(text)
    return path


def test_whale_run_dry_run_checks_and_prints_the_resolved_settings_and_starts_nothing(tmp_path: Path, capsys):
    model = _model_folder(tmp_path, QWEN3_4B)
    path = tmp_path / "gpu.toml"
    path.write_text(f'domain = "math"\npreset = "gpu"\nmodel = "{model}"\n')
    run_dir = tmp_path / "run"
    argv = ["run", "--config", str(path), "--gpu-memory-gib", "24", "--run-dir", str(run_dir), "--dry-run"]
    assert main(argv) == 0
    shown = capsys.readouterr().out
    threads = int((0.5 * 24 - 2) * 2**30 // kv_bytes_per_token(QWEN3_4B) // 4096)  # 10 GiB of cache
    assert 'preset = "gpu"' in shown and f'"threads": {threads},' in shown and threads < 64
    assert not run_dir.exists()
    path.write_text('domain = "math"\nschedule = "fixed:x"\n')
    assert main(["run", "--config", str(path), "--dry-run"]) == 2  # a bad value is still refused


def test_a_run_recorded_before_the_later_settings_still_resumes(tmp_path: Path) -> None:
    from whale_cli.run import check_same_settings
    from whale_dspy.training.config import LoraTrainingConfig

    settings = RunSettings(domain="math")
    recorded = settings.record()
    assert not {"thinking", "gpu_memory_gib"} & set(recorded)  # as a record from before they existed
    (tmp_path / "config.json").write_text(json.dumps({"cli": recorded}))
    check_same_settings(settings, tmp_path)  # no error: the same run
    with pytest.raises(ConfigError, match="thinking"):
        check_same_settings(RunSettings(domain="math", thinking=False), tmp_path)
    assert RunSettings(domain="math", thinking=False).record()["thinking"] is False
    assert "chat_template_kwargs" not in LoraTrainingConfig().to_dict()
    switched = LoraTrainingConfig(chat_template_kwargs={"enable_thinking": False})
    assert LoraTrainingConfig.from_dict(switched.to_dict()) == switched


def test_a_search_limit_that_leaves_no_selection_tasks_is_refused_before_any_server() -> None:
    with pytest.raises(ConfigError, match="leaves no selection tasks.*--search-limit 40"):
        RunSettings(domain="squad", search_limit=8)
    assert RunSettings(domain="squad", search_limit=8, selection_tasks=0).search_limit == 8
    assert RunSettings(domain="squad", search_limit=40).search_limit == 40
