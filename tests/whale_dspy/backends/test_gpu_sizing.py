"""A GPU run sized from the model's attention shape and the GPUs' memory, checked on CPU."""

from __future__ import annotations

import json

import pytest
from gpu_sizing_helpers import QWEN3_4B, QWEN25_05B

from whale_cli.run_settings import RunSettings
from whale_cli.wiring import make_backend
from whale_dspy.backends.gpu_sizing import MAX_THREADS, kv_bytes_per_token, size_gpu_run
from whale_dspy.errors import ConfigError


def model_folder(tmp_path, config: dict, weights_gib: float):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    with (folder / "model.safetensors").open("wb") as handle:
        handle.truncate(int(weights_gib * 2**30))  # sparse: only its size is read
    return folder


def test_the_kv_cache_per_token_follows_the_attention_shape():
    assert kv_bytes_per_token(QWEN25_05B) == 2 * 24 * 2 * 64 * 2
    # 2 GiB holds about 14k tokens of a 4B Qwen3 (the figure) and about 174k of the 0.5B
    assert 14_000 < 2 * 2**30 // kv_bytes_per_token(QWEN3_4B) < 15_000
    assert 170_000 < 2 * 2**30 // kv_bytes_per_token(QWEN25_05B) < 180_000
    with pytest.raises(ConfigError, match="attention shape"):
        kv_bytes_per_token({"num_hidden_layers": 4})


def test_one_gpu_is_shared_with_a_checkpointing_trainer_and_two_give_it_its_own(tmp_path):
    folder = model_folder(tmp_path, QWEN3_4B, weights_gib=8.0)
    shared = size_gpu_run(folder, [141.0], tokens_per_rollout=4096)
    assert shared.kv_cache_gib == pytest.approx(0.5 * 141 - 8 - 2, abs=0.01)
    assert (shared.train_device, shared.gradient_checkpointing, shared.threads) == (
        "cuda:0",
        True,
        MAX_THREADS,
    )
    own = size_gpu_run(folder, [80.0, 80.0], tokens_per_rollout=4096)
    assert own.kv_cache_gib == pytest.approx(0.9 * 80 - 8 - 2, abs=0.01)
    assert (own.train_device, own.gradient_checkpointing) == ("cuda:1", False)
    small = size_gpu_run(folder, [24.0], tokens_per_rollout=4096)  # 2 GiB of cache: 3 rollouts of 4k
    assert small.threads == int(2 * 2**30 // kv_bytes_per_token(QWEN3_4B) // 4096) == 3
    with pytest.raises(ConfigError, match="leave no KV cache"):
        size_gpu_run(folder, [16.0], tokens_per_rollout=4096)
    with pytest.raises(ConfigError, match="memory in GiB"):
        size_gpu_run(folder, [], tokens_per_rollout=4096)


def test_a_gpu_preset_run_is_sized_on_cpu_when_told_the_gpus_and_refused_when_not(tmp_path):
    folder = model_folder(tmp_path, QWEN3_4B, weights_gib=8.0)
    settings = RunSettings(domain="math", preset="gpu", model=str(folder), gpu_memory_gib=(24,))
    sizing = settings.gpu_sizing()
    config = settings.whale_config(sizing).rft
    assert config.threads == sizing.threads == 3 and config.training.gradient_checkpointing
    assert config.training.device == "cuda:0"
    moved = RunSettings(
        domain="math", preset="gpu", model=str(folder), gpu_memory_gib=(24,), train_device="cuda:2"
    )
    assert moved.whale_config(moved.gpu_sizing()).rft.training.device == "cuda:2"  # the setting wins
    server = make_backend(settings, tmp_path / "logs")
    assert server.kv_cache_gib == sizing.kv_cache_gib  # the run's own server gets the sized cache
    assert server.max_model_len == sizing.max_model_len <= 2 * 2**30 // kv_bytes_per_token(QWEN3_4B)
    assert server.extra_args == ("--gpu-memory-utilization", "0.5")  # vLLM's start-up check agrees
    assert RunSettings(domain="math", model=str(folder)).gpu_sizing() is None  # the cpu preset
    # no GPU here and none given, or a hub id not in the local cache: the preset's fixed sizes
    assert RunSettings(domain="math", preset="gpu", model=str(folder)).gpu_sizing() is None
    hub = RunSettings(domain="math", preset="gpu", model="nobody/not-cached", gpu_memory_gib=(80,))
    assert hub.gpu_sizing() is None and hub.whale_config(hub.gpu_sizing()).rft.threads == MAX_THREADS
    from optimizers.engine.presets import get_preset

    unsized = get_preset("gpu").meta_harness_config()  # both phases keep the same rollouts in flight
    assert unsized.threads == unsized.tasks == MAX_THREADS


def test_a_run_is_sized_once_so_its_server_and_phases_agree_and_a_fallback_warns_once(tmp_path, caplog):
    folder = model_folder(tmp_path, QWEN3_4B, weights_gib=8.0)
    settings = RunSettings(domain="math", preset="gpu", model=str(folder), gpu_memory_gib=(24,))
    assert settings.gpu_sizing() is settings.gpu_sizing()
    unseen = RunSettings(domain="math", preset="gpu", model="nobody/also-not-cached", gpu_memory_gib=(80,))
    with caplog.at_level("WARNING", logger="optimizers.engine.presets"):
        make_backend(unseen, tmp_path / "logs")  # the server asks, then the phases
        assert unseen.whale_config(unseen.gpu_sizing()).rft.threads == MAX_THREADS
    assert [r.getMessage() for r in caplog.records].count(
        "the gpu preset runs unsized, at its fixed sizes: the model is no local folder"
    ) == 1


def test_the_thinking_switch_reaches_the_runs_own_server_and_its_trainer(tmp_path):
    folder = model_folder(tmp_path, QWEN25_05B, weights_gib=0.5)
    settings = RunSettings(domain="math", model=str(folder), thinking=False, adapters="runtime")
    assert settings.whale_config().rft.training.chat_template_kwargs == {"enable_thinking": False}
    assert make_backend(settings, tmp_path / "logs").chat_template_kwargs == {"enable_thinking": False}
    default = RunSettings(domain="math").whale_config()
    assert default.rft.training.chat_template_kwargs == {}  # the template's own


def test_a_new_gpu_run_records_the_gpus_it_was_sized_for():
    cpu = RunSettings(domain="math")
    assert cpu.pinned() is cpu  # nothing to size
    told = RunSettings(domain="math", preset="gpu", gpu_memory_gib=(80,))
    assert told.pinned() is told
    here = RunSettings(domain="math", preset="gpu").pinned()  # no GPU on this machine: none recorded
    assert here.gpu_memory_gib == () and "gpu_memory_gib" not in here.record()


def test_eval_search_and_train_give_their_own_server_the_thinking_switch_and_train_its_trainer():
    from whale_cli.main import build_parser
    from whale_cli.train import rft_config_from
    from whale_cli.wiring import thinking_server_options

    assert thinking_server_options(None, False) == {"chat_template_kwargs": {"enable_thinking": False}}
    assert thinking_server_options("http://x:1", False) == {}  # a running server has its own switch
    assert thinking_server_options(None, None) == {}
    for command in ("eval", "search", "train"):
        assert build_parser().parse_args([command, "--domain", "math", "--no-thinking"]).thinking is False
    args = build_parser().parse_args(["train", "--domain", "math", "--no-thinking"])
    assert rft_config_from(args).training.chat_template_kwargs == {"enable_thinking": False}
