"""Builds a run from CLI settings: domain data, seed harness, server, trainer, phases, optimizer.

This is the one place that knows every package (domains, harness programs,
backends, optimizers); it builds everything from one `RunSettings` (whale_cli.run_settings).
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import dspy

from whale_cli.run_settings import RunSettings
from whale_dspy.backends.vllm_server import thinking_template_kwargs
from whale_dspy.defaults import DEFAULT_THREADS, SERVER_RESTARTS
from whale_dspy.errors import BackendError, ConfigError
from whale_dspy.evaluation import EvalRequest
from whale_dspy.harness import HarnessProgram, HarnessSource
from whale_dspy.protocols import Domain, InferenceBackend, reports_down

log = logging.getLogger(__name__)
T = TypeVar("T")

DATA_SEED = 0
"""Task subsampling does not follow --seed: every method and seed sees the same tasks."""


def thinking_server_options(server_url: str | None, thinking: bool | None) -> dict[str, Any]:
    """`backend_for_model` options that give the command's own server the thinking switch (a server
    at `server_url` was started with its own: `whale serve --no-thinking`)."""
    kwargs = thinking_template_kwargs(thinking)
    return {"chat_template_kwargs": kwargs} if kwargs and not server_url else {}


@dataclass(frozen=True)
class RunData:
    domain: Domain
    seed_harness: HarnessSource
    trainset: list[dspy.Example]
    searchset: list[dspy.Example]
    testset: list[dspy.Example]


def load_data(settings: RunSettings) -> RunData:
    from domains import domain_entry, get_domain
    from harness_programs import seed_harness

    domain = get_domain(settings.domain)
    return RunData(
        domain=domain,
        seed_harness=seed_harness(domain_entry(settings.domain).seed_harness),
        trainset=domain.load("train", settings.train_limit, DATA_SEED),
        searchset=domain.load("search", settings.search_limit, DATA_SEED),
        testset=domain.load("test", settings.test_limit, DATA_SEED),
    )


def name_part(text: str, default: str) -> str:
    """`text` as a folder and adapter-name part: runs of other characters become one dash."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.") or default


def make_backend(settings: RunSettings, log_dir: Path, server_url: str | None = None) -> InferenceBackend:
    own: dict[str, Any] = {}  # the run's own servers' options (a server someone else runs is set up)
    if not server_url and settings.replicas == 1 and (sizing := settings.gpu_sizing()) is not None:
        own["kv_cache_gib"] = sizing.kv_cache_gib  # replicas sharing a GPU would each take all of it
        own["max_model_len"] = sizing.max_model_len
        own["extra_args"] = ("--gpu-memory-utilization", str(sizing.gpu_memory_utilization))
    own |= thinking_server_options(server_url, settings.thinking)
    return backend_for_model(
        settings.model,
        log_dir,
        server_url,
        adapters=settings.adapters,
        replicas=settings.replicas,
        adapter_store=settings.adapter_store,
        **own,
    )


def backend_for_model(
    model: str,
    log_dir: Path,
    server_url: str | None = None,
    *,
    adapters: str = "auto",
    replicas: int = 1,
    adapter_store: str | None = None,
    **server_options: Any,
) -> InferenceBackend:
    """Running servers at `server_url` (several, comma-separated: a replica set) serving `model`, or
    the run's own (`replicas` of them, each built with `server_options`), not started yet."""
    from whale_dspy.backends import AdapterStore, RemoteServer, ReplicaSet, embedded_server
    from whale_dspy.backends.vllm_server import cpu_build, split_cores
    from whale_dspy.models import resolve_model

    urls = [url.strip() for url in (server_url or "").split(",") if url.strip()]
    if urls and replicas > 1:
        raise ConfigError("--replicas starts the run's own servers: give it or --server-url, not both")
    if urls and adapters == "merged":
        raise ConfigError(
            "--adapters merged needs the run's own server: a shared --server-url serves runtime LoRA"
        )
    log_dir.mkdir(parents=True, exist_ok=True)
    if len(urls) == 1:
        return RemoteServer(urls[0], base_model=resolve_model(model))
    if not urls and replicas == 1:
        return embedded_server(model, run_dir=log_dir, adapters=adapters, **server_options)
    store = AdapterStore(Path(adapter_store) if adapter_store else log_dir / "adapter-store")
    if urls:
        base = resolve_model(model)  # once for the set: every replica serves the same base
        return ReplicaSet([RemoteServer(url, base_model=base) for url in urls], store=store)
    cores: list[str | None] = list(split_cores(replicas)) if cpu_build() else [None] * replicas
    own = [
        embedded_server(
            model,
            run_dir=log_dir / f"replica-{index}",
            adapters="runtime",
            adapter_store=store.root,
            cpu_cores=group,
            **server_options,
        )
        for index, group in enumerate(cores)
    ]
    return ReplicaSet(own, store=store)


def student_of(
    data: RunData, backend: InferenceBackend, settings: RunSettings, adapter: str | None = None
) -> HarnessProgram:
    """The seed harness on the base model (or a loaded adapter), under the run's sampling."""
    lm = backend.lm(adapter, **settings.sampling)
    return HarnessProgram(data.seed_harness, data.domain.signature, data.domain.tools, lm, adapter)


def evaluate_on_test(
    data: RunData,
    backend: InferenceBackend,
    settings: RunSettings,
    source: HarnessSource,
    *,
    adapter: str | None,
    k: int,
    trace_path: Path | None = None,
) -> Any:
    """Test mean@k of `source` (a run's harness) under `adapter`, on the run's checkpoint rollout
    ids; contained, since a run's harness is model-written unless it is the seed's own code."""
    from optimizers.engine import EVAL_NAMESPACE
    from whale_dspy.sandbox import ContainedEvaluator

    program = student_of(data, backend, settings, adapter=adapter).with_source(source)
    report, _ = ContainedEvaluator.for_long_evaluations(threads=DEFAULT_THREADS).evaluate(
        program,
        EvalRequest(
            data.testset,
            metric=data.domain.metric,
            lm=program.bound_lm,
            k=k,
            namespace=f"{EVAL_NAMESPACE}-test",
            trace_path=trace_path,
        ),
    )
    return report


def make_optimizer(
    settings: RunSettings,
    run_dir: Path,
    backend: InferenceBackend,
    data: RunData,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    shared_evals: Any = None,
) -> Any:
    """The run's optimizer (WHALE or a baseline) on its domain's metric: the engine's configuration
    these settings ask for, with what only the command line knows (its record, the agent's jail,
    the trainer's launcher) passed beside it."""
    from optimizers import WhaleOptimizer
    from optimizers.engine import optimizer_kwargs

    kwargs = optimizer_kwargs(
        settings.whale_config(settings.gpu_sizing()), run_dir, backend, data.domain.metric,
        record={"cli": settings.record()}, jail=settings.agent_jail, launcher=settings.train_launcher,
        on_event=on_event, shared_evals=shared_evals,
    )  # fmt: skip
    return WhaleOptimizer(**kwargs)


def shared_evaluations(settings: RunSettings, out: Path) -> Any:
    """OUT/shared-evals: where runs on one model and domain (a comparison's methods, a study's
    trials) share the evaluations of identical base-weight programs."""
    from optimizers.engine import SharedEvaluations

    return SharedEvaluations(out / "shared-evals", scope=f"{settings.model}|{settings.domain}")


@contextlib.contextmanager
def served(backend: InferenceBackend) -> Iterator[InferenceBackend]:
    """The backend started for the block and stopped after it, whatever ends the block."""
    backend.start()
    try:
        yield backend
    finally:
        backend.stop()


class RestartingServer:
    """A command's own server, started for the block and stopped after it, that is started anew (a
    fresh backend from `make`, at most `restarts` times a step) when a step failed on it and it no
    longer answers. The step is then run again: a run's step resumes from its records, as `--resume`
    would after a crash. A replica set routes around one dead replica itself and is started anew
    only when none answers. A refused request (the server still healthy) and a server someone else
    runs (`--server-url`: theirs to restart) fail the step as before."""

    def __init__(self, make: Callable[[], InferenceBackend], *, restarts: int = SERVER_RESTARTS) -> None:
        if restarts < 0:
            raise ConfigError(f"--server-restarts must be 0 or more, got {restarts}")
        self._make, self.restarts = make, restarts
        self.restarted = 0  # over every step
        self.backend = make()

    def __enter__(self) -> RestartingServer:
        self.backend.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.backend.stop()

    def run(self, step: Callable[[InferenceBackend], T]) -> T:
        """`step(backend)`, run again on a new server after each death, `restarts` times at most: the
        budget is per step, so one run of a long comparison cannot spend the later runs' restarts."""
        left = self.restarts
        while True:
            try:
                return step(self.backend)
            except BackendError as error:
                if left == 0 or not self._died():
                    raise
                left -= 1
                self.restarted += 1
                log.warning(
                    "the inference server died (%s); starting a new one and resuming (%d restart(s) left)",
                    error, left,
                )  # fmt: skip
                self.backend.stop()
                self.backend = self._make()
                self.backend.start()

    def _died(self) -> bool:
        return not self.backend.shared and reports_down(self.backend)
