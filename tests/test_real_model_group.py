"""The real-model tests that start a server keep to one xdist worker per kind of server, and the
`no_server` ones to their module (tests/real_model_group.py), checked in child pytests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from real_model_group import server_cores

TESTS = Path(__file__).parent
WORKER_LOG = """import os, pathlib

def record(name, request):
    group = request.node.get_closest_marker("xdist_group")
    binding = os.environ["VLLM_CPU_OMP_THREADS_BIND"] + "/" + os.environ["OMP_NUM_THREADS"]
    worker = os.environ["PYTEST_XDIST_WORKER"]
    pathlib.Path(name).write_text(" ".join([worker, binding, str(group and group.args)]))
"""


def test_the_suite_itself_runs_with_the_plugin_under_loadgroup(request: pytest.FixtureRequest) -> None:
    assert request.config.pluginmanager.has_plugin("real_model_group")
    assert "--dist=loadgroup" in request.config.getini("addopts")  # a worker's own `dist` reads "no"


MARKERS = "[pytest]\nmarkers =\n    integration: real model\n    no_server: real model, no server\n"


def child_pytest(folder: Path, *args: str) -> subprocess.CompletedProcess:
    # as a pytest started by hand: without what this suite's own xdist worker was given
    given = ("VLLM_CPU_OMP_THREADS_BIND", "OMP_NUM_THREADS")
    inherited = {k: v for k, v in os.environ.items() if k not in given and not k.startswith("PYTEST_XDIST")}
    # the project's root first: tests/whale_dspy would otherwise shadow the editable whale_dspy
    env = {**inherited, "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS), str(folder)])}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "real_model_group", "-q", "-p", "no:cacheprovider",
         *args, str(folder)],
        cwd=folder, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


SERVERS = (
    "import pytest\n\n@pytest.fixture\ndef merged_server():\n    return 'merged'\n\n"
    "@pytest.fixture\ndef embedded_server():\n    return 'runtime'\n\n"
    "@pytest.fixture\ndef runtime_reference_server():\n    return 'runtime, for one test'\n"
)


def test_server_tests_keep_to_a_worker_per_server_and_no_server_ones_to_their_module(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text(MARKERS)
    (tmp_path / "recorder.py").write_text(WORKER_LOG)
    (tmp_path / "conftest.py").write_text(SERVERS)
    servers = {0: "merged_server", 1: "embedded_server", 2: "merged_server, runtime_reference_server"}
    for module in range(3):
        lines = ["import pytest", "from recorder import record", ""]
        for n in range(4):  # real ones first: ungrouped, the two workers would each start with one
            real = n < 2
            name, fixtures = (
                ("real", f"request, {servers[(module + n) % 3]}") if real else ("fast", "request")
            )
            mark = "@pytest.mark.integration\n" if real else ""
            lines.append(f"{mark}def test_{n}({fixtures}):\n    record('{name}-{module}-{n}', request)\n")
        for n in (4, 5):  # in-process real-model tests, sharing a module fixture in real suites
            lines.append(
                "@pytest.mark.integration\n@pytest.mark.no_server\n"
                f"def test_{n}(request):\n    record('free-{module}-{n}', request)\n"
            )
        (tmp_path / f"test_m{module}.py").write_text("\n".join(lines))
    # first, larger than either server group, and slow: left to loadgroup, it would hold one worker
    # while the other, its merged tests done, took the runtime group too
    big = [f"def test_{n}():\n    time.sleep(0.5)\n" for n in range(8)]
    mark = 'import time\n\nimport pytest\n\npytestmark = pytest.mark.xdist_group("big")\n\n'
    (tmp_path / "test_a_big.py").write_text(mark + "\n".join(big))
    result = child_pytest(tmp_path, "-n", "2", "--dist=loadgroup")
    assert result.returncode == 0, result.stdout + result.stderr
    runs = {path.name: path.read_text().split(" ", 2) for path in tmp_path.glob("*-*-*") if path.is_file()}
    workers = {name: worker for name, (worker, _, _) in runs.items()}
    groups = {name: group for name, (_, _, group) in runs.items()}
    threads = max(1, len(os.sched_getaffinity(0)) // 2)
    for worker, binding, _ in runs.values():  # each worker's servers on its core, torch on its share
        assert binding == f"{server_cores(worker)}/{threads}", (worker, binding)
    assert len(workers) == 18  # the recorded ones, the big group's aside
    merged = {f"real-{m}-{n}" for m in range(3) for n in range(2) if "merged" in servers[(m + n) % 3]}
    runtime = {name for name in workers if name.startswith("real")} - merged
    assert len(merged) == 4 and len(runtime) == 2  # a test with both servers goes with the merged one
    assert {groups[name] for name in merged} == {"('real-model:merged',)"}
    assert {groups[name] for name in runtime} == {"('real-model:runtime',)"}
    assert len({workers[name] for name in merged}) == 1, workers  # each server's tests on one worker
    assert len({workers[name] for name in runtime}) == 1, workers
    assert workers[min(merged)] != workers[min(runtime)], workers  # and the two servers' on two workers
    assert {g for name, g in groups.items() if name.startswith("fast")} == {"None"}  # free to move
    assert len(set(workers.values())) == 2, workers  # while the two workers both ran tests
    for module in range(3):  # each module's no_server tests together, away from the server groups
        assert workers[f"free-{module}-4"] == workers[f"free-{module}-5"], workers
        assert groups[f"free-{module}-4"] == f"('no-server:test_m{module}.py',)"


def test_each_workers_servers_bind_to_a_core_of_its_own() -> None:
    assert [server_cores(f"gw{n}", cores=[0, 1]) for n in range(4)] == ["0", "1", "0", "1"]
    assert [server_cores(f"gw{n}", cores=[3, 2]) for n in range(3)] == ["2", "3", "2"]  # the ones it may use
    assert server_cores("gw5", cores=range(8)) == "5"


def test_a_no_server_test_that_asks_for_a_server_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text(MARKERS)
    (tmp_path / "conftest.py").write_text(
        "import pytest\n\n@pytest.fixture\ndef merged_server():\n    return 'a server'\n"
    )
    (tmp_path / "test_wrong.py").write_text(
        "import pytest\n\n@pytest.mark.integration\n@pytest.mark.no_server\n"
        "def test_it(merged_server):\n    pass\n"
    )
    result = child_pytest(tmp_path, "-n", "0")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
    assert "test_it is marked no_server but uses ['merged_server']" in result.stdout + result.stderr
