"""A pytest plugin: under pytest-xdist's loadgroup, the real-model tests that start a server keep to
two groups, each on one worker, one per kind of server.

Those tests are the suite's long pole. Kept on one worker they ran one after another, each server
computing on one core while the other core idled once the fast tests were done. Split by server
(the merged server's tests, which also train, and the runtime-LoRA server's), each group still runs
one test at a time beside the other's, and each worker's servers compute on a core of their own
(`server_cores`): vLLM's automatic binding would put every server's threads on the same core.

Loadgroup hands out its largest scopes first, one per worker, and a worker takes more only when 2
or fewer of its tests are left; the sandbox's adversarial module is a larger group than either
server group, so left alone the second server group waited for whichever worker drained first,
and could end up after the first on the same worker. `ServerGroupsFirst` hands the server groups
out first instead, one to each worker (tests/test_real_model_group.py checks it on a small suite
with a larger group). A real-model test marked `no_server` (it trains or loads the model
in-process) runs beside them, grouped with the other `no_server` tests of its module so that a
module fixture (a trained parent adapter) is built once.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pytest
from xdist.scheduler import LoadGroupScheduling

from whale_dspy.backends.vllm_server import split_cores

if TYPE_CHECKING:
    from xdist.remote import Producer
    from xdist.workermanage import WorkerController

MERGED_GROUP, RUNTIME_GROUP = "real-model:merged", "real-model:runtime"
SERVER_GROUPS = (MERGED_GROUP, RUNTIME_GROUP)
SERVER_FIXTURES = frozenset({"embedded_server", "merged_server", "runtime_reference_server"})


def server_group(item: pytest.Item) -> str:
    """The merged server's group for a test that uses it, the runtime group for every other test with
    a server. A merged-server test that needs runtime LoRA too asks for `runtime_reference_server`,
    started for it alone: the session's `embedded_server` would stay up on the merged worker."""
    uses_merged = isinstance(item, pytest.Function) and "merged_server" in item.fixturenames
    return MERGED_GROUP if uses_merged else RUNTIME_GROUP


def server_cores(worker: str, cores: Sequence[int] | None = None) -> str:
    """The core an xdist worker's servers bind their compute threads to ("gw1" -> the second core
    this process may use, wrapping round them). Outside xdist vLLM keeps its own binding."""
    available = sorted(cores if cores is not None else os.sched_getaffinity(0))
    one_each = split_cores(len(available), available)
    return one_each[int(worker[2:]) % len(one_each)]


def pytest_configure(config: pytest.Config) -> None:
    """On an xdist worker, every server it starts binds to its own core (`server_cores`, through
    vLLM's `VLLM_CPU_OMP_THREADS_BIND`) and its torch, in process and in the trainer's child, runs
    on its share of the cores (`OMP_NUM_THREADS`). A trainer taking both cores beside the other
    worker's busy server trained about 8x slower (LoraTrainer), and the RFT learning test ran past
    its 900 s timeout in CI (it takes 142 s alone). Read from xdist's own worker input, not the
    environment, which a pytest started from a worker inherits."""
    worker = getattr(config, "workerinput", None)
    if worker is None:
        return
    workers = int(worker["workercount"])
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = server_cores(worker["workerid"])
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, len(os.sched_getaffinity(0)) // workers)))


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the groups into scheduling scopes
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if not item.get_closest_marker("integration"):
            continue
        if not item.get_closest_marker("no_server"):
            item.add_marker(pytest.mark.xdist_group(server_group(item)))
            continue
        servers = SERVER_FIXTURES & set(item.fixturenames) if isinstance(item, pytest.Function) else set()
        if servers:
            raise pytest.UsageError(f"{item.nodeid} is marked no_server but uses {sorted(servers)}")
        item.add_marker(pytest.mark.xdist_group(f"no-server:{item.path.name}"))


class ServerGroupsFirst(LoadGroupScheduling):
    """Loadgroup scheduling whose first work units are the server groups, one to each worker (both on
    the one worker when there is one)."""

    def __init__(self, config: pytest.Config, log: Producer | None = None) -> None:
        super().__init__(config, log)
        self.servers_placed = False

    def _assign_work_unit(self, node: WorkerController) -> None:
        if not self.servers_placed:  # the initial assignment: the work queue is complete by now
            for group in reversed(SERVER_GROUPS):
                if group in self.workqueue:
                    self.workqueue.move_to_end(group, last=False)
            self.servers_placed = True
        super()._assign_work_unit(node)


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # optional: `-p no:xdist` leaves the hook unknown
def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> LoadGroupScheduling | None:
    return ServerGroupsFirst(config, log) if config.getvalue("dist") == "loadgroup" else None
