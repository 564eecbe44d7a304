"""The real-model tests share one xdist worker (tests/real_model_group.py), checked in a child pytest."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
WORKER_LOG = """import os, pathlib

def record(name, request):
    group = request.node.get_closest_marker("xdist_group")
    pathlib.Path(name).write_text(os.environ["PYTEST_XDIST_WORKER"] + " " + str(group and group.args))
"""


def test_the_suite_itself_runs_with_the_plugin_under_loadgroup(request: pytest.FixtureRequest) -> None:
    assert request.config.pluginmanager.has_plugin("real_model_group")
    assert "--dist=loadgroup" in request.config.getini("addopts")  # a worker's own `dist` reads "no"


def test_every_integration_test_runs_on_one_worker_and_the_others_spread(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nmarkers =\n    integration: real model\n    no_server: real model, no server\n"
    )
    (tmp_path / "recorder.py").write_text(WORKER_LOG)
    for module in range(3):
        lines = ["import pytest", "from recorder import record", ""]
        for n in range(4):  # real ones first: ungrouped, the two workers would each start with one
            mark = "@pytest.mark.integration\n" if n < 2 else ""
            kind = "real" if n < 2 else "fast"
            lines.append(f"{mark}def test_{n}(request):\n    record('{kind}-{module}-{n}', request)\n")
        lines.append(
            "@pytest.mark.integration\n@pytest.mark.no_server\n"
            f"def test_4(request):\n    record('free-{module}-4', request)\n"
        )
        (tmp_path / f"test_m{module}.py").write_text("\n".join(lines))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(tmp_path)])}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "real_model_group", "-n", "2", "--dist=loadgroup", "-q",
         "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    runs = {path.name: path.read_text().split(" ", 1) for path in tmp_path.glob("*-*-*") if path.is_file()}
    workers = {name: worker for name, (worker, _) in runs.items()}
    groups = {name: group for name, (_, group) in runs.items()}
    real = {w for name, w in workers.items() if name.startswith("real")}
    fast = {w for name, w in workers.items() if name.startswith("fast")}
    assert len(workers) == 15
    assert len(real) == 1, workers  # six real-model tests, one worker
    assert len(fast | real) == 2, workers  # while the two workers both ran tests
    assert {g for name, g in groups.items() if name.startswith("real")} == {"('real-model',)"}
    assert {g for name, g in groups.items() if not name.startswith("real")} == {"None"}  # free to move
