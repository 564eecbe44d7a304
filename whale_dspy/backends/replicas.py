"""Several OpenAI-compatible vLLM servers behind one backend, with every adapter on every replica.

vLLM's runtime LoRA loads an adapter on the one server asked (`/v1/load_lora_adapter`); with
several replicas nothing makes a load reach the others, nor a replica that restarts or joins later.
Here:
- `load_adapter` publishes the adapter to the shared `AdapterStore` and loads it on every live
  replica before it returns, so no request names an adapter a replica lacks;
- each call goes to the live replica with the fewest calls in flight (`Router`);
- a call that finds its replica unreachable or broken (the transport failed, HTTP 5xx) marks the
  replica down, logs its log tail, and is sent again to another replica: no rollout is lost;
- a replica that answers "no such model" for an adapter lost it by restarting: it is reloaded there;
- down replicas are probed in the background; one that answers again gets every adapter the run
  serves before a call is routed to it (replicas we start also read the store through vLLM's
  filesystem resolver, `VLLMServer(adapter_store=...)`);
- with no live replica left (after `wait_s` for one to come back) a call fails with BackendError,
  which the rollout reports as the server's failure, so a run stops rather than scoring zeros.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from whale_dspy.backends.adapter_store import AdapterStore
from whale_dspy.backends.remote import DEFAULT_SAMPLING, PROVIDER, RemoteServer, register_dspy_provider
from whale_dspy.errors import BackendError, ConfigError
from whale_dspy.records import AdapterRef

if TYPE_CHECKING:
    import dspy

logger = logging.getLogger(__name__)

Result = TypeVar("Result")


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
        """Make the replica's process hold `ref` (a reload when this client loaded it before)."""
        with self.sync:
            if ref.name in self.loaded:
                return
            if ref.name in self.server.adapters:
                self.server.reload_adapter(ref)
            else:
                self.server.load_adapter(ref)
            self.loaded.add(ref.name)

    def stats(self) -> dict[str, Any]:
        return {"url": self.label, "up": self.up, "answered": self.answered, "failures": self.failures}


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
            replica = attempt.pick()
            try:
                result = send(replica.api_base)
            except Exception as error:
                if not attempt.recover(replica, error):
                    raise
                continue
            attempt.done(replica)
            return result

    async def acall(self, adapter: str | None, send: Callable[[str], Awaitable[Result]]) -> Result:
        """The async `call`: picking may wait for a replica's adapter load, on a thread."""
        attempt = _Attempt(self, adapter)
        while True:
            replica = await asyncio.to_thread(attempt.pick)
            try:
                result = await send(replica.api_base)
            except Exception as error:
                if not attempt.recover(replica, error):
                    raise
                continue
            attempt.done(replica)
            return result

    def live(self) -> list[Replica]:
        return [replica for replica in self.replicas if replica.up]

    def mark_down(self, replica: Replica, error: BaseException) -> None:
        with self.changed:
            if not replica.up:
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
        if not replica.server.healthy(timeout_s=2.0):
            return False
        try:
            with replica.sync:
                replica.loaded = replica.server.listed_adapters() & set(self.adapters)
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


class _Attempt:
    """One call's path through the replicas: which it tried, which lost its adapter."""

    def __init__(self, router: Router, adapter: str | None) -> None:
        self.router, self.adapter = router, adapter
        self.tried: set[tuple[int, int]] = set()  # (replica, life) that failed this call
        self.reloaded: set[int] = set()

    def pick(self) -> Replica:
        """The live, untried replica with the fewest calls in flight, holding the adapter."""
        while True:
            replica = self._least_busy()
            if self.adapter is None:
                return replica
            try:
                replica.hold(self.router.adapters[self.adapter])
                return replica
            except BackendError as error:
                self._release(replica)
                self.router.mark_down(replica, error)
                self._tried(replica)

    def recover(self, replica: Replica, error: Exception) -> bool:
        """After a failed send: whether to send again (elsewhere, or here with the adapter reloaded)."""
        from dspy.utils.exceptions import LMProviderError

        from whale_dspy.rollouts import server_failed

        self._release(replica)
        if server_failed(error):
            self.router.mark_down(replica, error)
            self._tried(replica)
            return True
        index = self.router.replicas.index(replica)
        lost = isinstance(error, LMProviderError) and error.status == 404 and self.adapter is not None
        if lost and index not in self.reloaded:  # restarted since it loaded the adapter
            self.reloaded.add(index)
            replica.loaded.discard(self.adapter)
            return True
        return False

    def done(self, replica: Replica) -> None:
        self._release(replica)
        with self.router.changed:
            replica.answered += 1

    def _least_busy(self) -> Replica:
        router = self.router
        deadline = time.monotonic() + router.wait_s
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
                    return replica
                left = deadline - time.monotonic()
                if left <= 0:
                    raise self._no_replica()
                router.changed.wait(left)

    def _no_replica(self) -> BackendError:
        from whale_dspy.rollouts import report_server_failure

        states = "; ".join(f"{r.label}: {r.last_error or 'failed this call'}" for r in self.router.replicas)
        error = BackendError(f"no live replica serves {self.adapter or 'the base model'} ({states})")
        report_server_failure(error)
        return error

    def _tried(self, replica: Replica) -> None:
        self.tried.add((self.router.replicas.index(replica), replica.life))

    def _release(self, replica: Replica) -> None:
        with self.router.changed:
            replica.in_flight -= 1
            self.router.changed.notify_all()


class ReplicaSet:
    """An InferenceBackend over several runtime-LoRA servers (RemoteServer or VLLMServer each).

    `store`: where adapters are published for every replica (required with more than one host);
    `probe_interval_s`: how often down replicas are probed; `wait_s`: how long a call waits for a
    replica to come back when none is live.
    """

    adapter_serving = "runtime"

    def __init__(
        self,
        servers: Sequence[RemoteServer],
        *,
        store: AdapterStore | None = None,
        sampling: Mapping[str, Any] | None = None,
        probe_interval_s: float = 2.0,
        wait_s: float = 30.0,
    ) -> None:
        if not servers:
            raise ConfigError("a replica set needs at least one server")
        if any(server.adapter_serving != "runtime" for server in servers):
            raise ConfigError(
                "replicas serve adapters by runtime LoRA: merged serving swaps one server's weights"
            )
        if len({server.served_name for server in servers}) > 1:
            raise ConfigError("every replica must serve the base model under the same name")
        self.replicas = tuple(Replica(server) for server in servers)
        self.store = store
        self.sampling = {**DEFAULT_SAMPLING, **(sampling or {})}
        self.served_name = servers[0].served_name
        self.shared = any(server.shared for server in servers)
        self._adapters: dict[str, AdapterRef] = {}
        self._router = Router(self.replicas, self._adapters, wait_s)
        self._probe_interval_s = probe_interval_s
        self._stop_probing = threading.Event()
        self._prober: threading.Thread | None = None

    @property
    def base_model(self) -> str | None:
        return self.replicas[0].server.base_model

    @property
    def adapters(self) -> tuple[str, ...]:
        return tuple(self._adapters)

    def start(self) -> None:
        """Start the servers together; those that fail are down (probed later) unless all fail."""
        with concurrent.futures.ThreadPoolExecutor(len(self.replicas)) as pool:
            outcomes = list(pool.map(_start, (replica.server for replica in self.replicas)))
        for replica, error in zip(self.replicas, outcomes, strict=True):
            if error is not None:
                self._router.mark_down(replica, error)
        if not self._router.live():
            raise BackendError(f"no replica started: {'; '.join(str(error) for error in outcomes)}")
        served = {replica.server.served_model() for replica in self._router.live()}
        if len(served) > 1:
            self.stop()
            raise BackendError(f"the replicas serve different models: {sorted(served)}")
        self._stop_probing.clear()
        self._prober = threading.Thread(target=self._probe_down, name="whale-replica-probe", daemon=True)
        self._prober.start()

    def stop(self) -> None:
        self._stop_probing.set()
        if self._prober is not None:
            self._prober.join()
            self._prober = None
        for replica in self.replicas:
            replica.server.stop()

    def __enter__(self) -> ReplicaSet:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def served_model(self) -> str:
        live = self._router.live()
        if not live:
            raise BackendError("no live replica to ask what it serves")
        return live[0].server.served_model()

    def serving(self) -> dict[str, Any]:
        return {
            "server": "replicas",
            "adapters": self.adapter_serving,
            "adapter_store": str(self.store.root) if self.store else None,
            "replicas": [replica.server.serving() for replica in self.replicas],
        }

    def stats(self) -> list[dict[str, Any]]:
        """Per replica: its URL, whether it is up, calls answered and times it went down."""
        return [replica.stats() for replica in self.replicas]

    def load_adapter(self, ref: AdapterRef) -> None:
        """Publish the adapter and load it on every live replica; the others get it when they return."""
        if ref.name in self._adapters or ref.name == self.served_name:
            raise BackendError(f"adapter name {ref.name!r} was already used by this replica set")
        stored = self.store.publish(ref) if self.store else ref
        for replica in self._router.live():
            try:
                replica.hold(stored)
            except BackendError as error:
                if replica.server.healthy(timeout_s=2.0):
                    raise  # the replica is fine: it refused the adapter itself
                self._router.mark_down(replica, error)
        if not self._router.live():
            raise BackendError(f"no live replica to load adapter {ref.name!r} on")
        self._adapters[ref.name] = stored
        logger.info(
            "adapter %s served by %d of %d replicas", ref.name, len(self._router.live()), len(self.replicas)
        )

    def lm(self, adapter: str | None = None, *, cache: bool = False, **sampling: Any) -> dspy.LM:
        """A dspy.LM for the base (None) or a loaded adapter, routed per call across the replicas."""
        from whale_dspy.backends.replica_lm import ReplicaLM

        if adapter is not None and adapter not in self._adapters:
            raise BackendError(f"adapter {adapter!r} is not loaded; loaded: {list(self._adapters) or 'none'}")
        register_dspy_provider()
        options = {"api_key": "EMPTY", "cache": cache, "num_retries": 0}  # the router retries elsewhere
        return ReplicaLM(
            f"{PROVIDER}/{adapter or self.served_name}",
            router=self._router,
            adapter=adapter,
            **options,
            **{**self.sampling, **sampling},
        )

    def _probe_down(self) -> None:
        while not self._stop_probing.wait(self._probe_interval_s):
            for replica in self.replicas:
                if not replica.up:
                    self._router.probe(replica)


def split_cores(count: int, cores: Sequence[int] | None = None) -> list[str]:
    """Disjoint core lists ("0-3") for `count` CPU replicas on this machine's cores (its affinity),
    as contiguous as the cores allow; vLLM's auto binding would put them all on the same cores."""
    available = sorted(cores if cores is not None else os.sched_getaffinity(0))
    if not 1 <= count <= len(available):
        raise ConfigError(f"{count} CPU replicas need as many cores; this process may use {len(available)}")
    share, extra = divmod(len(available), count)
    groups, start = [], 0
    for index in range(count):
        size = share + (index < extra)
        group = available[start : start + size]
        groups.append(",".join(map(str, group)))
        start += size
    return groups


def _start(server: RemoteServer) -> BaseException | None:
    try:
        server.start()
    except BackendError as error:
        return error
    return None
