"""Loading a bench script (bench/ is no package) to run its tiny mode from a test."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

BENCH_DIR = Path(__file__).resolve().parents[1] / "bench"


def load_bench(name: str) -> ModuleType:
    """bench/NAME.py as a module, freshly executed."""
    spec = importlib.util.spec_from_file_location(f"{name}_bench", BENCH_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None, f"no bench/{name}.py"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
