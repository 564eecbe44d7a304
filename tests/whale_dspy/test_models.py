"""Model resolution: names, paths and hub ids; the checksum gate; the race-safe one-time build."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from pathlib import Path

import pytest

from whale_dspy.errors import ConfigError
from whale_dspy.models import (
    EMBEDDED_MODELS,
    PackagedFile,
    assemble_verified,
    build_once,
    default_cache_dir,
    resolve_model,
)


def write_parts(tmp_path: Path, chunks: list[bytes]) -> list[Path]:
    paths = []
    for i, chunk in enumerate(chunks):
        path = tmp_path / f"part{i}.bin"
        path.write_bytes(chunk)
        paths.append(path)
    return paths


def test_unknown_name_lists_the_known_models() -> None:
    with pytest.raises(ConfigError) as error:
        resolve_model("no-such-model")
    for name in EMBEDDED_MODELS:
        assert name in str(error.value)


def test_hub_ids_pass_through_and_local_folders_resolve(tmp_path: Path, monkeypatch) -> None:
    assert resolve_model("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my-model").mkdir()
    assert resolve_model("my-model") == str((tmp_path / "my-model").resolve())
    with pytest.raises(ConfigError):
        resolve_model("./missing/folder")


def test_cache_dir_follows_the_environment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("WHALE_CACHE_DIR", str(tmp_path))
    assert default_cache_dir() == tmp_path / "models"


def test_assembly_concatenates_parts_when_the_checksum_matches(tmp_path: Path) -> None:
    chunks = [b"GGUF" + bytes(range(100)), b"second part", b"x" * 3000]
    whole = b"".join(chunks)
    out = assemble_verified(
        write_parts(tmp_path, chunks),
        tmp_path / "m.gguf",
        size=len(whole),
        sha256=hashlib.sha256(whole).hexdigest(),
    )
    assert out.read_bytes() == whole


def test_assembly_refuses_an_altered_file_and_deletes_it(tmp_path: Path) -> None:
    good = b"the pinned weights"
    parts = write_parts(tmp_path, [b"the pinned weighTs"])  # same size, one byte changed
    with pytest.raises(ConfigError, match="sha256") as error:
        assemble_verified(parts, tmp_path / "m.gguf", size=len(good), sha256=hashlib.sha256(good).hexdigest())
    assert hashlib.sha256(good).hexdigest() in str(error.value)
    assert not (tmp_path / "m.gguf").exists()


def test_assembly_refuses_a_partial_file(tmp_path: Path) -> None:
    whole = b"abcdef" * 100
    parts = write_parts(tmp_path, [whole[:300], whole[300:500]])  # the last 100 bytes are missing
    with pytest.raises(ConfigError, match="partial"):
        assemble_verified(
            parts, tmp_path / "m.gguf", size=len(whole), sha256=hashlib.sha256(whole).hexdigest()
        )
    assert not (tmp_path / "m.gguf").exists()


def test_a_missing_or_other_version_part_package_is_named() -> None:
    with pytest.raises(ConfigError, match="whale-no-such-package-part1"):
        PackagedFile("whale-no-such-package-part1", "0.9.0", "x/data/part01.bin").locate()
    with pytest.raises(ConfigError, match="expected 0.0.0-never"):
        PackagedFile("pytest", "0.0.0-never", "pytest/__init__.py").locate()


def test_build_once_builds_once_when_threads_race(tmp_path: Path) -> None:
    calls: list[int] = []

    def slow_build(out: Path) -> None:
        calls.append(1)
        time.sleep(0.3)
        (out / "config.json").write_text(json.dumps({"built": len(calls)}))

    target = tmp_path / "cache" / "model"
    results: list[Path] = []
    threads = [
        threading.Thread(target=lambda: results.append(build_once(target, slow_build))) for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1
    assert results == [target] * 4
    assert json.loads((target / "config.json").read_text()) == {"built": 1}
    assert sorted(p.name for p in target.parent.iterdir()) == ["model", "model.lock"]  # no temp dir left


def test_a_failed_build_leaves_nothing_and_is_retried(tmp_path: Path) -> None:
    target = tmp_path / "model"

    def failing(out: Path) -> None:
        (out / "half-written").write_text("x")
        raise ConfigError("converter failed")

    with pytest.raises(ConfigError):
        build_once(target, failing)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.lock"]
    build_once(target, lambda out: (out / "ok").write_text("y"))
    assert (target / "ok").read_text() == "y"


@pytest.mark.integration
@pytest.mark.no_server
def test_embedded_models_resolve_to_checked_safetensors_folders(smollm2_dir: str) -> None:
    folder = Path(smollm2_dir)
    provenance = json.loads((folder / "whale-model.json").read_text())
    assert provenance["sha256"] == EMBEDDED_MODELS["smollm2-135m"].sha256
    assert (folder / "model.safetensors").stat().st_size > 100_000_000
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert "hi" in text and text != "hi"
