"""`import whale_dspy` (and the outer packages) must not pull heavy libraries."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "vllm", "peft", "optuna", "transformers")


def test_importing_the_packages_imports_no_heavy_library():
    code = (
        "import sys, whale_dspy, optimizers, domains, harness_programs\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""
