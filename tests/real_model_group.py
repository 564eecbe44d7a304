"""A pytest plugin: under pytest-xdist's loadgroup, the real-model tests that start a server go to
one worker.

Two vLLM servers on the same cores slow each other several times over, so those tests keep to one
server at a time on one worker while the fast tests fill the others. A real-model test marked
`no_server` (it trains or loads the model in-process) runs beside them, grouped with the other
`no_server` tests of its module so that a module fixture (a trained parent adapter) is built once.
"""

from __future__ import annotations

import pytest

REAL_MODEL_GROUP = "real-model"
SERVER_FIXTURES = frozenset({"embedded_server", "merged_server"})


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the groups into scheduling scopes
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if not item.get_closest_marker("integration"):
            continue
        if not item.get_closest_marker("no_server"):
            item.add_marker(pytest.mark.xdist_group(REAL_MODEL_GROUP))
            continue
        servers = SERVER_FIXTURES & set(item.fixturenames) if isinstance(item, pytest.Function) else set()
        if servers:
            raise pytest.UsageError(f"{item.nodeid} is marked no_server but uses {sorted(servers)}")
        item.add_marker(pytest.mark.xdist_group(f"no-server:{item.path.name}"))
