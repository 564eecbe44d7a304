"""Several OpenAI-compatible vLLM servers behind one backend, with every adapter on every replica.

vLLM's runtime LoRA loads an adapter on the one server asked (`/v1/load_lora_adapter`); with
several replicas nothing makes a load reach the others, nor a replica that restarts or joins later.
Here:
- `load_adapter` publishes the adapter to the shared `AdapterStore` and loads it on every live
  replica before it returns, so no request names an adapter a replica lacks;
- each call goes to the live replica with the fewest calls in flight, and fails over within a
  bound when its replica dies under it (`replica_router`): no rollout is lost to a dead replica;
- down replicas are probed in the background; one that answers again gets every adapter the run
  serves before a call is routed to it (replicas we start also read the store through vLLM's
  filesystem resolver, `VLLMServer(adapter_store=...)`);
- with no live replica left (after `wait_s` for one to come back) a call fails with BackendError,
  which the rollout reports as the server's failure, so a run stops rather than scoring zeros.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from whale_dspy.backends.adapter_store import AdapterStore
from whale_dspy.backends.remote import PROVIDER, RemoteServer, register_dspy_provider
from whale_dspy.backends.replica_router import PROBE_TIMEOUT_S, Replica, Router
from whale_dspy.defaults import SERVED_LM_SAMPLING
from whale_dspy.errors import BackendError, ConfigError
from whale_dspy.records import AdapterRef

if TYPE_CHECKING:
    import dspy

logger = logging.getLogger(__name__)


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
        self.sampling = {**SERVED_LM_SAMPLING, **(sampling or {})}
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
        """Start the servers together; those that fail are down (probed, for servers someone else
        runs and restarts; the set does not restart its own) unless all fail. Any other failure
        stops every server before it propagates."""
        try:
            with concurrent.futures.ThreadPoolExecutor(len(self.replicas)) as pool:
                outcomes = list(pool.map(_start, (replica.server for replica in self.replicas)))
            for replica, error in zip(self.replicas, outcomes, strict=True):
                if error is not None:
                    self._router.mark_down(replica, error)
            served = set()
            for replica in self._router.live():
                try:  # a replica someone else runs may be unreachable: down, and probed
                    served.add(replica.server.served_model())
                except BackendError as error:
                    self._router.mark_down(replica, error)
            if not self._router.live():
                states = "; ".join(f"{replica.label}: {replica.last_error}" for replica in self.replicas)
                raise BackendError(f"no replica started or answered: {states}")
            if len(served) > 1:
                raise BackendError(f"the replicas serve different models: {sorted(served)}")
        except BaseException:
            self.stop()
            raise
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

    def healthy(self) -> bool:
        """True while any replica answers /health: the set serves while one does (calls are routed
        around the others), so only the loss of every replica is the set's death, after which a
        run's own set is started anew, whole (`RestartingServer`)."""
        return any(replica.server.healthy() for replica in self.replicas)

    def stats(self) -> list[dict[str, Any]]:
        """Per replica: its URL, whether it is up, calls answered, times it went down, and the
        adapter probes' count and cost."""
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
                if replica.server.healthy(timeout_s=PROBE_TIMEOUT_S):
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
                if replica.up:
                    continue
                try:
                    self._router.probe(replica)
                except Exception:  # one odd answer must not end every later recovery
                    logger.exception("probing replica %s failed", replica.label)


def _start(server: RemoteServer) -> BaseException | None:
    try:
        server.start()
    except BackendError as error:
        return error
    return None
