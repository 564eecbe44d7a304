"""How a replica set routes one call: the least busy live replica holding the adapter, again on
another when the replica fails under the call, within a bound.

A call that finds its replica unreachable or broken (the transport failed, HTTP 5xx) marks that
replica down (its log tail logged) and is sent again elsewhere, so no rollout is lost to a dead
replica; a replica answering "no such model" for an adapter lost it by restarting, and gets it
again. One call tries at most `2 x replicas + 1` times within `wait_s`; past that the last server
error stands, which voids the rollout as the server's failure rather than scoring it zero.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from whale_dspy.backends.remote import RemoteServer, same_adapter
from whale_dspy.errors import BackendError
from whale_dspy.records import AdapterRef

logger = logging.getLogger(__name__)

Result = TypeVar("Result")

PROBE_TIMEOUT_S = 2.0
"""How long a replica may take to answer /health when it is probed."""


@dataclass(eq=False)
class Replica:
    """One server of the set and what the router knows of it."""

    server: RemoteServer
    up: bool = True
    life: int = 0  # counts the times it came (back) up: a call may retry a replica that returned
    in_flight: int = 0
    answered: int = 0
    failures: int = 0
    last_error: str = ""
    loaded: set[str] = field(default_factory=set)  # adapters its current process holds
    sync: threading.Lock = field(default_factory=threading.Lock)

    @property
    def api_base(self) -> str:
        return f"{self.server.url}/v1"

    @property
    def label(self) -> str:
        """Its URL, for logs (a server that never started has none)."""
        try:
            return self.server.url
        except BackendError:
            return "(a replica that did not start)"

    def hold(self, ref: AdapterRef) -> None:
        """Make the replica's process hold `ref`: nothing if it lists it already (another call
        reloaded it, or the run did before a resume), a reload if this client loaded it before and
        the process lost it, else a first load."""
        with self.sync:
            if ref.name in self.loaded:
                return
            listed = self.server.listed_adapters()
            if ref.name in listed:
                if ref.name not in self.server.adapters:  # a resumed run: loaded before it
                    self.server.adopt_adapter(ref)
                elif not same_adapter(listed[ref.name], ref.path):  # it restarted; someone loaded the name
                    raise BackendError(
                        f"replica {self.label} serves {ref.name!r} from {listed[ref.name]}, not from "
                        f"{ref.path}: another run's adapter under that name"
                    )
            elif ref.name in self.server.adapters:
                self.server.reload_adapter(ref)
            else:
                self.server.load_adapter(ref)
            self.loaded.add(ref.name)

    def lost(self, name: str) -> None:
        with self.sync:
            self.loaded.discard(name)

    def stats(self) -> dict[str, Any]:
        """Its URL, whether it is up, calls answered, times it went down, and what checking that its
        adapters take effect cost (adapter_probe)."""
        probes = self.server.probe.results
        return {
            "url": self.label,
            "up": self.up,
            "answered": self.answered,
            "failures": self.failures,
            "probes": len(probes),
            "probe_seconds": sum(probe.seconds for probe in probes),
        }


class Router:
    """Picks a replica per call, fails calls over, and keeps down replicas' adapters in step."""

    def __init__(
        self, replicas: Sequence[Replica], adapters: Mapping[str, AdapterRef], wait_s: float
    ) -> None:
        self.replicas = tuple(replicas)
        self.adapters = adapters  # the set's own dict: what the run serves now
        self.wait_s = wait_s
        self.changed = threading.Condition()
        self.turns = itertools.count()

    def call(self, adapter: str | None, send: Callable[[str], Result]) -> Result:
        """`send(api_base)` on a picked replica, again on another while replicas fail under it."""
        attempt = _Attempt(self, adapter)
        while True:
            replica, life = attempt.pick()
            try:
                result = send(replica.api_base)
            except Exception as error:
                if not attempt.recover(replica, life, error):
                    raise
                continue
            finally:
                attempt.release(replica)
            attempt.answered(replica)
            return result

    async def acall(self, adapter: str | None, send: Callable[[str], Awaitable[Result]]) -> Result:
        """The async `call`: picking may wait for a replica or its adapter load, on a thread."""
        attempt = _Attempt(self, adapter)
        while True:
            replica, life = await _picked(attempt)
            try:
                result = await send(replica.api_base)
            except Exception as error:
                if not attempt.recover(replica, life, error):
                    raise
                continue
            finally:
                attempt.release(replica)
            attempt.answered(replica)
            return result

    def live(self) -> list[Replica]:
        return [replica for replica in self.replicas if replica.up]

    def mark_down(self, replica: Replica, error: BaseException, life: int | None = None) -> None:
        """Down, unless it is already, or came back since the failing call picked it (`life`)."""
        with self.changed:
            if not replica.up or (life is not None and life != replica.life):
                return
            replica.up = False
            replica.failures += 1
            replica.loaded.clear()
            replica.last_error = f"{type(error).__name__}: {error}"[:500]
        logger.warning(
            "replica %s is down (%s); its calls go to the other replicas%s",
            replica.label, replica.last_error, replica.server.failure_context(),
        )  # fmt: skip

    def probe(self, replica: Replica) -> bool:
        """Bring a down replica back if it answers: it first gets every adapter the run serves."""
        if not replica.server.healthy(timeout_s=PROBE_TIMEOUT_S):
            return False
        try:
            with replica.sync:
                replica.loaded = {  # what it lists under a run's name may be another run's adapter
                    name
                    for name, root in replica.server.listed_adapters().items()
                    if name in self.adapters and same_adapter(root, self.adapters[name].path)
                }
            for ref in list(self.adapters.values()):
                replica.hold(ref)
        except BackendError as error:
            logger.warning("replica %s answers but could not be given its adapters: %s", replica.label, error)
            return False
        with self.changed:
            replica.up = True
            replica.life += 1
            self.changed.notify_all()
        logger.info("replica %s is back, serving %d adapters", replica.label, len(self.adapters))
        return True

    def __deepcopy__(self, memo: dict) -> Router:
        """Copies of an LM share the set's one router."""
        return self


async def _picked(attempt: _Attempt) -> tuple[Replica, int]:
    """`attempt.pick()` on a thread (in this context: a failure report reaches the rollout); if the
    caller is cancelled meanwhile, the pick still made is released when it completes."""
    picking = asyncio.ensure_future(asyncio.to_thread(attempt.pick))
    try:
        return await asyncio.shield(picking)
    except asyncio.CancelledError:
        picking.add_done_callback(
            lambda done: None if done.cancelled() or done.exception() else attempt.release(done.result()[0])
        )
        raise


class _Attempt:
    """One call's path through the replicas: which it tried, which lost its adapter, how often."""

    def __init__(self, router: Router, adapter: str | None) -> None:
        self.router, self.adapter = router, adapter
        self.tried: set[tuple[int, int]] = set()  # (replica, life) that failed this call
        self.reloaded: set[int] = set()
        self.sends_left = 2 * len(router.replicas) + 1
        self.deadline = time.monotonic() + router.wait_s

    def pick(self) -> tuple[Replica, int]:
        """The live, untried replica with the fewest calls in flight, holding the adapter (and the
        life it was picked in)."""
        while True:
            replica, life = self._least_busy()
            if self.adapter is None:
                return replica, life
            try:
                replica.hold(self.router.adapters[self.adapter])
            except BackendError as error:
                self.release(replica)
                self.router.mark_down(replica, error, life)
                self._tried(replica, life)
                continue
            except BaseException:
                self.release(replica)
                raise
            return replica, life

    def recover(self, replica: Replica, life: int, error: Exception) -> bool:
        """After a failed send: whether to send again (elsewhere, or here with the adapter reloaded)."""
        from dspy.utils.exceptions import LMProviderError

        from whale_dspy.rollouts import server_failed

        self.sends_left -= 1
        if server_failed(error):
            self.router.mark_down(replica, error, life)
            self._tried(replica, life)
            return self.sends_left > 0  # at the bound this error stands: it voids the rollout
        index = self.router.replicas.index(replica)
        lost = isinstance(error, LMProviderError) and error.status == 404 and self.adapter is not None
        if (
            lost and index not in self.reloaded and self.sends_left > 0
        ):  # restarted since it loaded the adapter
            self.reloaded.add(index)
            replica.lost(self.adapter)
            return True
        return False

    def answered(self, replica: Replica) -> None:
        with self.router.changed:
            replica.answered += 1

    def release(self, replica: Replica) -> None:
        with self.router.changed:
            replica.in_flight -= 1
            self.router.changed.notify_all()

    def _least_busy(self) -> tuple[Replica, int]:
        router = self.router
        with router.changed:
            while True:
                candidates = [
                    (index, replica)
                    for index, replica in enumerate(router.replicas)
                    if replica.up and (index, replica.life) not in self.tried
                ]
                if candidates:
                    turn, count = next(router.turns), len(router.replicas)
                    _, replica = min(candidates, key=lambda c: (c[1].in_flight, (c[0] - turn) % count))
                    replica.in_flight += 1
                    return replica, replica.life
                left = self.deadline - time.monotonic()
                if left <= 0:
                    raise self._no_replica()
                router.changed.wait(left)

    def _no_replica(self) -> BackendError:
        from whale_dspy.rollouts import report_server_failure

        states = "; ".join(f"{r.label}: {r.last_error or 'failed this call'}" for r in self.router.replicas)
        error = BackendError(f"no live replica serves {self.adapter or 'the base model'} ({states})")
        report_server_failure(error)
        return error

    def _tried(self, replica: Replica, life: int) -> None:
        self.tried.add((self.router.replicas.index(replica), life))
