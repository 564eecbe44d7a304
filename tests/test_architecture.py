"""The dependency direction of DESIGN.md, checked by import-linter's contracts in pyproject.toml."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept():
    # Beside this interpreter first: `.venv/bin/python -m pytest` does not put .venv/bin on PATH.
    beside = Path(sys.executable).parent / "lint-imports"
    lint_imports = str(beside) if beside.exists() else shutil.which("lint-imports")
    if lint_imports is None:
        pytest.fail("lint-imports is missing: install the dev extra (import-linter)")
    result = subprocess.run([lint_imports], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
