"""Every LM our backends make runs quiet offline: DSPy's metadata refresh would try the network
(a 5 s timeout and a warning on the machines this runs on); the user's hub settings stay theirs."""

from __future__ import annotations

import os

import pytest

from whale_dspy.backends import RemoteServer, ReplicaSet
from whale_dspy.backends.remote import register_dspy_provider
from whale_dspy.offline import LOCAL_ONLY


@pytest.mark.parametrize("backend", ["single", "replicas"])
def test_a_backends_lm_defaults_the_environment_to_local_files(backend, monkeypatch):
    for name in LOCAL_ONLY:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # a user's own setting (their trainer may download)
    register_dspy_provider.cache_clear()  # once a process: this test's process did it already
    servers = [RemoteServer(f"http://127.0.0.1:{port}", base_model="base") for port in (9, 10)]
    (servers[0] if backend == "single" else ReplicaSet(servers)).lm()
    assert os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    assert os.environ["HF_HUB_OFFLINE"] == "0"  # stays the user's
    assert "TOKENIZERS_PARALLELISM" not in os.environ  # a library leaves the rest to its user
