"""A fake inference backend for fast tests: serves a ScriptedLM under base and adapter names.

It enforces the real backend's rules that tests rely on: an adapter must be
loaded before use, and a name is never loaded twice.
"""

from __future__ import annotations

from typing import Any

from whale_dspy.errors import BackendError
from whale_dspy.records import AdapterRef
from whale_dspy.testing.scripted_lm import ScriptedLM


class FakeBackend:
    shared = False

    def __init__(self, lm: ScriptedLM, *, base_name: str = "base", fail_loading: set[str] | None = None):
        self.scripted = lm
        self.base_name = base_name
        self.loaded: dict[str, AdapterRef] = {}
        self.load_order: list[str] = []
        self.fail_loading = set(fail_loading or ())
        self.running = False
        self.base_model: str | None = None  # tests pass the trainer's base explicitly

    def served_model(self) -> str:
        return self.base_name

    def serving(self) -> dict[str, Any]:
        return {"server": "fake", "adapters": "runtime"}

    def start(self) -> None:
        self.running = True

    def stop(self) -> None:
        self.running = False

    def load_adapter(self, ref: AdapterRef) -> None:
        if ref.name in self.loaded or ref.name == self.base_name:
            raise BackendError(f"adapter name {ref.name!r} was already used; names are never reused")
        if ref.name in self.fail_loading:
            raise BackendError(f"adapter {ref.name!r} failed to load (scripted failure)")
        self.loaded[ref.name] = ref
        self.load_order.append(ref.name)

    def unload_adapter(self, name: str) -> None:
        self.loaded.pop(name, None)

    def lm(self, adapter: str | None = None, **sampling: Any) -> ScriptedLM:
        if adapter is not None and adapter not in self.loaded:
            raise BackendError(f"adapter {adapter!r} is not loaded; loaded: {sorted(self.loaded)}")
        return self.scripted.for_model(adapter or self.base_name).copy(**sampling)
