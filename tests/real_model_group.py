"""A pytest plugin: under pytest-xdist's loadgroup, every integration test goes to one worker.

Two vLLM servers on the same cores slow each other several times over, so the real-model tests
keep to one server at a time on one worker while the fast tests fill the others.
"""

from __future__ import annotations

import pytest

REAL_MODEL_GROUP = "real-model"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the groups into scheduling scopes
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("integration"):
            item.add_marker(pytest.mark.xdist_group(REAL_MODEL_GROUP))
