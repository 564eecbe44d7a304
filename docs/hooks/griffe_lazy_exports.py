"""Griffe extension: names a package exports lazily (`whale_dspy.LM`) are documented where they live.

`whale_dspy` and `whale_dspy.backends` resolve some `__all__` names in a module `__getattr__`
(`whale_dspy.lazy_exports`), which static analysis cannot follow; importing such a module at build
time can. Each such name becomes an alias of its object, so the API pages use the public names.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import griffe


class LazyExports(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for module in _modules(pkg):
            if "__getattr__" not in module.members:
                continue
            loaded = importlib.import_module(module.path)
            for name in [name for name in loaded.__all__ if name not in module.members]:
                target = getattr(loaded, name)
                if not (inspect.isclass(target) or inspect.isfunction(target)):
                    continue  # a constant has no home griffe can name; the API pages show none
                path = f"{target.__module__}.{target.__qualname__}"
                module.set_member(name, griffe.Alias(name, path, parent=module))


def _modules(module: griffe.Module) -> list[griffe.Module]:
    subs = [sub for sub in module.modules.values() if not sub.is_alias]  # imported modules too
    return [module, *(found for sub in subs for found in _modules(sub))]
