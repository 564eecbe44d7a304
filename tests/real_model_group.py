"""A pytest plugin: under pytest-xdist's loadgroup, every integration test goes to one worker.

Two vLLM servers on the same cores slow each other several times over, so the real-model tests
keep to one server at a time on one worker while the fast tests fill the others. A real-model test
marked `no_server` (it trains or loads the model in-process) is left out, so it runs beside them.
"""

from __future__ import annotations

import pytest

REAL_MODEL_GROUP = "real-model"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the groups into scheduling scopes
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("integration") and not item.get_closest_marker("no_server"):
            item.add_marker(pytest.mark.xdist_group(REAL_MODEL_GROUP))
