"""The adapter probe on the fake vLLM: an adapter whose trained weights sit under a module prefix the
served model does not use loads, serves the base, and is refused with the likely cause; a landed
adapter passes at the cost of one short scoring; a fresh one (B = 0) is exempt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from whale_dspy.backends import RemoteServer, ReplicaSet
from whale_dspy.backends.adapter_probe import trained
from whale_dspy.errors import BackendError
from whale_dspy.testing import fake_vllm
from whale_dspy.testing.random_adapter import misplaced_copy, numpy_adapter


def requests(record: Path, route: str) -> list[dict]:
    rows = [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    return [row["body"] for row in rows if row["path"] == route]


@pytest.fixture
def server(tmp_path: Path):
    server = fake_vllm.server(tmp_path / "model", tmp_path / "server.log", record=tmp_path / "requests.jsonl")
    with server:
        yield server


def test_an_adapter_under_the_wrong_module_prefix_is_refused_and_unloaded(server, tmp_path: Path) -> None:
    landed = numpy_adapter(tmp_path / "landed", server.model, name="policy-s0000")
    wrong = misplaced_copy(landed, tmp_path / "wrong", name="policy-s0001")

    with pytest.raises(BackendError) as refused:
        server.load_adapter(wrong)
    message = str(refused.value)
    assert "'policy-s0001'" in message and server.model in message and "module prefix" in message
    assert wrong.name not in server.adapters and wrong.name not in server.listed_adapters()
    with pytest.raises(BackendError, match="already used"):  # its name stays spent
        server.load_adapter(wrong)


def test_a_landed_adapter_passes_and_the_base_is_scored_once(server, tmp_path: Path) -> None:
    for step in range(2):
        server.load_adapter(numpy_adapter(tmp_path / f"a{step}", server.model, name=f"policy-s000{step}"))

    assert server.adapters == ("policy-s0000", "policy-s0001")
    scored = [body["model"] for body in requests(tmp_path / "requests.jsonl", "/v1/completions")]
    assert scored == [server.served_name, "policy-s0000", "policy-s0001"]
    assert [r.adapter for r in server.probe.results] == ["policy-s0000", "policy-s0001"]
    assert all(r.shift == pytest.approx(0.25) and r.seconds > 0 for r in server.probe.results)


def test_a_fresh_adapter_is_exempt_wherever_its_keys_sit(server, tmp_path: Path) -> None:
    fresh = numpy_adapter(tmp_path / "fresh", server.model, name="fresh", zero_b=True)
    assert not trained(fresh.path) and trained(numpy_adapter(tmp_path / "t", server.model, name="t").path)
    server.load_adapter(misplaced_copy(fresh, tmp_path / "fresh-wrong", name="policy-s0000"))

    assert server.adapters == ("policy-s0000",)
    assert requests(tmp_path / "requests.jsonl", "/v1/completions") == []  # nothing to score
    assert server.probe.results[0].exempt and server.probe.results[0].shift is None


def test_a_replica_set_refuses_an_adapter_that_lands_on_no_replica(tmp_path: Path) -> None:
    fakes = [fake_vllm.server(tmp_path / "model", tmp_path / f"{i}.log") for i in range(2)]
    for fake in fakes:
        fake.start()
    replicas = ReplicaSet([RemoteServer(fake.url, base_model=fake.model) for fake in fakes])
    try:
        replicas.start()
        landed = numpy_adapter(tmp_path / "landed", fakes[0].model, name="policy-s0000")
        replicas.load_adapter(landed)
        with pytest.raises(BackendError, match="module prefix"):
            replicas.load_adapter(misplaced_copy(landed, tmp_path / "wrong", name="policy-s0001"))
        assert replicas.adapters == ("policy-s0000",)
        # Each replica probed what it loaded: the first refused the adapter, so the second never got it.
        assert [(row["probes"], row["probe_seconds"] > 0) for row in replicas.stats()] == [
            (2, True),
            (1, True),
        ]
    finally:
        replicas.stop()
        for fake in fakes:
            fake.stop()


def test_a_file_that_is_not_safetensors_is_refused_as_unreadable(tmp_path: Path) -> None:
    # Its first 8 bytes read as a header length of petabytes: reading that header whole ran out of memory.
    (tmp_path / "adapter_model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(BackendError, match="cannot be read"):
        trained(tmp_path)
