"""A replica set over fake vLLM servers: calls spread, adapters reach every replica, failures fail over.

Each fake (tests/fake_vllm.py) records every request it gets, so the tests read which replica saw
what and in which order. The set reaches them by URL, as it reaches replicas a supervisor runs: a
replica "dies" by SIGKILL of its process and "restarts" as a new fake at the same address.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
from dspy.utils.exceptions import LMProviderError
from meta_harness_helpers import GOOD, exact, student, tasks

from whale_cli.wiring import RestartingServer
from whale_dspy.backends import AdapterStore, RemoteServer, ReplicaSet, VLLMServer
from whale_dspy.backends.vllm_server import split_cores
from whale_dspy.errors import BackendError, ConfigError
from whale_dspy.evaluation import EvalRequest, evaluate
from whale_dspy.records import AdapterRef
from whale_dspy.testing import fake_vllm


def replica(folder: Path, *, port: int | None = None, delay: float = 0.0) -> VLLMServer:
    """A fake vLLM recording its requests to folder/requests.jsonl (appended across restarts), serving
    the model folder its siblings serve too."""
    folder.mkdir(parents=True, exist_ok=True)
    record = folder / "requests.jsonl"
    return fake_vllm.server(
        folder.parent / "model",
        folder / "server.log",
        record=record,
        delay=delay,
        port=port,
        startup_timeout_s=60,
    )


def requests(folder: Path) -> list[dict]:
    path = folder / "requests.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def completions(folder: Path, model: str | None = None) -> int:
    return sum(
        row["path"] == "/v1/chat/completions" and model in (None, row["body"]["model"])
        for row in requests(folder)
    )


def adapter(tmp_path: Path, name: str, base: str) -> AdapterRef:
    folder = tmp_path / "trained" / name
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(
        json.dumps({"peft_type": "LORA", "base_model_name_or_path": base})
    )
    return AdapterRef(name=name, path=str(folder), base=base)


def kill(server: VLLMServer) -> None:
    with contextlib.suppress(ProcessLookupError):  # killed already
        os.killpg(server.pid, signal.SIGKILL)
    while server.alive():
        time.sleep(0.05)


def wait_until(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


class Fleet:
    """Fake replicas the test starts, kills and restarts, and the set that reaches them by URL."""

    def __init__(self, tmp_path: Path, count: int, **options) -> None:
        self.folders = [tmp_path / name for name in "abcd"[:count]]
        self.servers = [replica(folder, delay=0.05) for folder in self.folders]
        for server in self.servers:
            server.start()
        clients = [RemoteServer(server.url, base_model=server.model) for server in self.servers]
        self.set = ReplicaSet(clients, **{"probe_interval_s": 0.2, "wait_s": 2.0, **options})
        self.set.start()

    def restart(self, index: int) -> None:
        port = int(self.servers[index].url.rsplit(":", 1)[1])
        kill(self.servers[index])
        self.servers[index] = replica(self.folders[index], port=port, delay=0.05)
        self.servers[index].start()

    def stop(self) -> None:
        self.set.stop()
        for server in self.servers:
            server.stop()


@pytest.fixture
def fleet(tmp_path):
    fleet = Fleet(tmp_path, 2, store=AdapterStore(tmp_path / "store"))
    yield fleet
    fleet.stop()


def test_one_evaluation_is_spread_over_both_replicas(fleet):
    report, rollouts = evaluate(
        student(GOOD), EvalRequest(tasks(12), metric=exact, lm=fleet.set.lm(), k=2), threads=4
    )
    assert len(rollouts) == 24 and report.mean_at_k == 1.0
    served = [completions(folder) for folder in fleet.folders]
    assert min(served) >= 6, served  # least-busy routing: neither replica sits idle
    assert sum(row["answered"] for row in fleet.set.stats()) == sum(served)
    assert [replica.in_flight for replica in fleet.set.replicas] == [0, 0]


def test_an_adapter_is_on_every_replica_before_a_request_names_it(fleet, tmp_path):
    ref = adapter(tmp_path, "policy-r00-s0001", fleet.set.base_model)
    fleet.set.load_adapter(ref)
    assert (tmp_path / "store" / ref.name / "adapter_config.json").is_file()  # published for resolvers
    evaluate(student(GOOD), EvalRequest(tasks(8), metric=exact, lm=fleet.set.lm(ref.name), k=2), threads=4)
    for folder in fleet.folders:
        load, first_use = order(requests(folder), ref.name)
        assert load < first_use
        assert requests(folder)[load]["body"]["lora_path"] == str(tmp_path / "store" / ref.name)
    with pytest.raises(BackendError, match="already used"):
        fleet.set.load_adapter(ref)


def order(rows: list[dict], name: str) -> tuple[int, int]:
    """Indices of `name`'s first load and of its first completion among `rows`."""
    named = [(row["path"], row["body"].get("lora_name") or row["body"].get("model")) for row in rows]
    return named.index(("/v1/load_lora_adapter", name)), named.index(("/v1/chat/completions", name))


def test_a_replica_killed_mid_evaluation_loses_no_rollout(fleet, tmp_path):
    ref = adapter(tmp_path, "policy-r00-s0001", fleet.set.base_model)
    fleet.set.load_adapter(ref)
    doomed = fleet.servers[0]
    killer = threading.Thread(
        target=lambda: (wait_until(lambda: completions(fleet.folders[0]) >= 3), kill(doomed))
    )
    killer.start()
    lm = fleet.set.lm(ref.name)
    report, rollouts = evaluate(student(GOOD), EvalRequest(tasks(16), metric=exact, lm=lm, k=2), threads=4)
    killer.join()
    assert len(rollouts) == 32 and report.mean_at_k == 1.0  # every rollout answered, none scored 0
    assert all(rollout.error is None for rollout in rollouts)
    stats = fleet.set.stats()
    assert stats[0]["failures"] == 1 and not stats[0]["up"]
    assert completions(fleet.folders[1]) > completions(fleet.folders[0])


def test_a_restarted_replica_gets_the_current_adapter_before_serving(fleet, tmp_path):
    ref = adapter(tmp_path, "policy-r00-s0001", fleet.set.base_model)
    fleet.set.load_adapter(ref)
    lm = fleet.set.lm(ref.name)
    kill(fleet.servers[0])
    evaluate(
        student(GOOD), EvalRequest(tasks(4), metric=exact, lm=lm, k=1), threads=2
    )  # finds it dead: fails over
    first = fleet.set.replicas[0]
    assert not first.up
    before = len(requests(fleet.folders[0]))
    fleet.restart(0)
    wait_until(lambda: first.up)
    evaluate(student(GOOD), EvalRequest(tasks(8), metric=exact, lm=lm, k=2), threads=4)
    load, first_use = order(requests(fleet.folders[0])[before:], ref.name)
    assert load < first_use


def test_a_replica_back_with_another_runs_adapter_under_the_names_is_kept_down(tmp_path):
    """A shared replica that comes back listing the run's adapter name, loaded from another folder,
    serves another run's weights under it: it stays down rather than serve them as this run's."""
    fleet = Fleet(tmp_path, 2, store=AdapterStore(tmp_path / "store"), probe_interval_s=3600)
    try:
        ref = adapter(tmp_path, "policy-r00-s0001", fleet.set.base_model)
        fleet.set.load_adapter(ref)
        first = fleet.set.replicas[0]
        kill(fleet.servers[0])
        evaluate(
            student(GOOD), EvalRequest(tasks(4), metric=exact, lm=fleet.set.lm(ref.name), k=1), threads=2
        )
        assert not first.up
        fleet.restart(0)
        other = adapter(tmp_path / "other-run", ref.name, fleet.set.base_model)
        (Path(other.path) / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 16}))
        body = {"lora_name": other.name, "lora_path": other.path}
        httpx.post(f"{fleet.servers[0].url}/v1/load_lora_adapter", json=body).raise_for_status()
        assert not fleet.set._router.probe(first) and not first.up
        fleet.restart(0)  # a fresh process: nothing listed, the run's adapter is loaded again
        assert fleet.set._router.probe(first) and first.up
    finally:
        fleet.stop()


def test_a_replica_restarted_between_calls_reloads_the_adapter_it_lost(tmp_path):
    """Nobody saw it down: its "no such model" answer is what tells the set it restarted."""
    fleet = Fleet(tmp_path, 1, probe_interval_s=60)
    try:
        ref = adapter(tmp_path, "policy-r00-s0001", fleet.set.base_model)
        fleet.set.load_adapter(ref)
        fleet.restart(0)
        lm = fleet.set.lm(ref.name)
        report, _ = evaluate(student(GOOD), EvalRequest(tasks(2), metric=exact, lm=lm, k=1), threads=1)
        assert report.mean_at_k == 1.0
        loads = [row for row in requests(fleet.folders[0]) if row["path"] == "/v1/load_lora_adapter"]
        assert len(loads) == 2  # the first load, then the reload after the restart
    finally:
        fleet.stop()


def test_with_no_live_replica_the_evaluation_stops_with_backend_error(fleet):
    for server in fleet.servers:
        kill(server)
    with pytest.raises(BackendError, match="no live replica"):
        evaluate(student(GOOD), EvalRequest(tasks(4), metric=exact, lm=fleet.set.lm(), k=1), threads=2)


def test_replicas_that_serve_different_models_are_refused(tmp_path):
    servers = [replica(tmp_path / "a"), replica(tmp_path / "b")]
    servers[1].model = str(tmp_path / "other")
    (tmp_path / "other").mkdir()
    with pytest.raises(BackendError, match="different models"):
        ReplicaSet(servers).start()
    assert not any(server.alive() for server in servers)


def test_the_cli_builds_a_replica_set_from_several_urls_or_several_own_servers(tmp_path):
    from whale_cli.run_settings import RunSettings
    from whale_cli.wiring import backend_for_model, make_backend

    urls = "http://127.0.0.1:1, http://127.0.0.1:2"
    remote = backend_for_model(str(tmp_path), tmp_path / "run", urls)
    assert isinstance(remote, ReplicaSet) and [r.server.url for r in remote.replicas] == urls.replace(
        " ", ""
    ).split(",")
    assert remote.store.root == (tmp_path / "run" / "adapter-store").resolve()
    settings = RunSettings(
        domain="math", model=str(tmp_path), replicas=2, adapter_store=str(tmp_path / "shared")
    )
    own = make_backend(settings, tmp_path / "run")
    assert [r.server.adapter_store for r in own.replicas] == [(tmp_path / "shared").resolve()] * 2
    assert {r.server.adapter_serving for r in own.replicas} == {"runtime"}
    cores = [set(r.server.cpu_cores.split(",")) for r in own.replicas]  # this is a CPU build
    assert cores[0] and cores[1] and not cores[0] & cores[1]
    assert len({r.server.log_path for r in own.replicas}) == 2


def test_replicas_refuse_merged_serving_and_a_count_below_one():
    from whale_cli.run_settings import RunSettings

    with pytest.raises(ConfigError, match="runtime LoRA"):
        RunSettings(domain="math", replicas=2, adapters="merged")
    with pytest.raises(ConfigError, match="replicas must be >= 1"):
        RunSettings(domain="math", replicas=0)


def test_cpu_replicas_get_disjoint_cores_and_no_more_replicas_than_cores():
    assert split_cores(2, [0, 1]) == ["0", "1"]
    assert split_cores(2, [4, 0, 1, 2, 3]) == ["0,1,2", "3,4"]
    with pytest.raises(ConfigError, match="3 CPU replicas need as many cores"):
        split_cores(3, [0, 1])


def test_a_call_every_replica_fails_ends_after_a_bounded_number_of_sends(fleet):
    """Completions answer 500 while /health is fine: the probe keeps reviving the replicas, so
    only the bound ends the call, and its server error voids the rollout (never a zero)."""
    for server in fleet.servers:
        httpx.post(f"{server.url}/fake/fail_completions", json={})
    started = time.monotonic()
    with pytest.raises(BackendError, match="inference server failed"):
        evaluate(student(GOOD), EvalRequest(tasks(1), metric=exact, lm=fleet.set.lm(), k=1), threads=1)
    assert sum(completions(folder) for folder in fleet.folders) <= 2 * 2 + 1
    assert time.monotonic() - started < 10
    assert [replica.in_flight for replica in fleet.set.replicas] == [0, 0]


def test_a_rejected_request_is_the_harness_failure_and_no_replica_goes_down(fleet):
    with pytest.raises(LMProviderError):
        fleet.set.lm()("REJECT this prompt")
    assert sum(completions(folder) for folder in fleet.folders) == 1  # not sent again elsewhere
    assert all(row["up"] and row["failures"] == 0 for row in fleet.set.stats())


def test_the_async_path_fails_over_too(fleet):
    kill(fleet.servers[0])
    lm = fleet.set.lm()

    async def four() -> list:
        return await asyncio.gather(*(lm.acall(f"hi {i}") for i in range(4)))

    answers = asyncio.run(four())
    assert len(answers) == 4 and completions(fleet.folders[1]) == 4
    assert [replica.in_flight for replica in fleet.set.replicas] == [0, 0]


def test_a_republished_adapter_is_the_stored_one_and_a_different_one_is_refused(tmp_path):
    store = AdapterStore(tmp_path / "store")
    ref = adapter(tmp_path, "policy-r00-s0001", "base")
    stored = store.publish(ref)
    assert store.publish(ref) == stored  # a resumed run loads it again: same files, same place
    (Path(ref.path) / "adapter_config.json").write_text("{}")
    with pytest.raises(BackendError, match="names are never reused"):
        store.publish(ref)


def test_a_resumed_run_adopts_the_adapters_its_replicas_still_serve(fleet, tmp_path):
    """A new set (the resumed run's) over replicas that outlived the old one: no refused reload."""
    ref = adapter(tmp_path, "policy-r00-s0001", fleet.set.base_model)
    fleet.set.load_adapter(ref)
    clients = [RemoteServer(server.url, base_model=server.model) for server in fleet.servers]
    resumed = ReplicaSet(clients, store=AdapterStore(tmp_path / "store"), wait_s=2.0)
    with resumed:
        resumed.load_adapter(ref)
        report, _ = evaluate(
            student(GOOD), EvalRequest(tasks(4), metric=exact, lm=resumed.lm(ref.name), k=1), threads=2
        )
    assert report.mean_at_k == 1.0 and all(row["up"] for row in resumed.stats())
    for folder in fleet.folders:
        assert [row["path"] for row in requests(folder)].count("/v1/load_lora_adapter") == 1


def test_an_unreachable_replica_at_start_is_down_not_fatal(fleet):
    clients = [RemoteServer(fleet.servers[0].url), RemoteServer("http://127.0.0.1:9")]
    with ReplicaSet(clients, wait_s=2.0) as replicas:
        assert [row["up"] for row in replicas.stats()] == [True, False]
        report, _ = evaluate(
            student(GOOD), EvalRequest(tasks(2), metric=exact, lm=replicas.lm(), k=1), threads=1
        )
    assert report.mean_at_k == 1.0


def test_the_set_is_healthy_while_any_replica_answers(fleet):
    assert fleet.set.healthy()
    kill(fleet.servers[0])
    assert fleet.set.healthy()  # one replica serves: calls are routed around the dead one
    kill(fleet.servers[1])
    assert not fleet.set.healthy()


def test_a_runs_own_set_is_started_anew_whole_when_no_replica_answers(tmp_path):
    made: list[ReplicaSet] = []

    def make() -> ReplicaSet:
        servers = [replica(tmp_path / f"set-{len(made)}" / name) for name in "ab"]
        made.append(ReplicaSet(servers, store=AdapterStore(tmp_path / "store"), wait_s=1.0))
        return made[-1]

    def step(backend: ReplicaSet) -> float:
        if backend is made[0]:
            for each in backend.replicas:
                kill(each.server)
        report, _ = evaluate(
            student(GOOD), EvalRequest(tasks(4), metric=exact, lm=backend.lm(), k=1), threads=2
        )
        return report.mean_at_k

    with RestartingServer(make, restarts=1) as restarting:
        assert restarting.run(step) == 1.0
    assert len(made) == 2 and restarting.restarted == 1
    assert not any(each.server.alive() for backend in made for each in backend.replicas)
