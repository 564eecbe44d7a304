"""The import allowlist and the static check of candidate harness code.

The static check is the first of two layers: it rejects a candidate before any
process starts when its syntax tree imports a module outside the allowlist or
names an obviously dangerous builtin or attribute. It is deliberately
conservative (a false positive costs one candidate; a false negative is still
caught by the child's runtime guard and the OS limits).
"""

from __future__ import annotations

import ast
import re
import string
from collections.abc import Iterable

ALLOWED_IMPORTS: frozenset[str] = frozenset(
    {
        "__future__",
        "abc",
        "bisect",
        "chess",
        "collections",
        "copy",
        "dataclasses",
        "decimal",
        "dspy",
        "enum",
        "fractions",
        "functools",
        "heapq",
        "itertools",
        "json",
        "math",
        "operator",
        "pydantic",
        "random",
        "re",
        "statistics",
        "string",
        "textwrap",
        "typing",
    }
)
"""Modules (with their submodules) a candidate may import: DSPy, signatures, chess and harmless
standard library modules; each must exist, since proposers are shown this list. The harness
building blocks are copied into candidates as source (optimizers/harness/proposers/blocks.py), not
imported. Pass another set to widen or narrow it."""

DENIED_SUBMODULES: frozenset[str] = frozenset({"chess.engine", "chess.gaviota", "chess.syzygy"})
"""Parts of allowed packages that run engines or read tablebases (WHALE forbids move search)."""

FORBIDDEN_NAMES = frozenset(
    {
        "__import__",
        "__builtins__",
        "__loader__",
        "__spec__",
        "breakpoint",
        "compile",
        "delattr",
        "eval",
        "exec",
        "globals",
        "input",
        "locals",
        "memoryview",
        "open",
        "vars",
    }
)
"""Builtins that reach the file system, code execution or other namespaces."""

FORBIDDEN_ATTRIBUTES = frozenset(
    {
        "__bases__",
        "__base__",
        "__builtins__",
        "__closure__",
        "__code__",
        "__dict__",
        "__func__",
        "__getattribute__",
        "__globals__",
        "__import__",
        "__loader__",
        "__mro__",
        "__reduce__",
        "__reduce_ex__",
        "__self__",
        "__subclasses__",
        "__wrapped__",
        "__defaults__",
        "__kwdefaults__",
        "__objclass__",
        "__traceback__",
        "builtins",
        "cell_contents",
        "cr_frame",
        "environ",
        "f_back",
        "f_builtins",
        "f_code",
        "f_globals",
        "f_locals",
        "gi_code",
        "gi_frame",
        "importlib",
        "modules",
        "os",
        "socket",
        "subprocess",
        "sys",
        "tb_frame",
        "tb_next",
    }
)
"""Attributes used to walk from an ordinary object to modules, frames or code objects (including
modules that other modules import, such as ``typing.sys``)."""

REFLECTION_HELPERS: dict[str, tuple[int, ...] | None] = {
    "getattr": (1,),
    "setattr": (1,),
    "hasattr": (1,),
    "methodcaller": (0,),
    "attrgetter": None,
}
"""Callables that read attributes by name, and which positional arguments are names (None: all of
them, dotted). Each may only be called directly, with names that are string literals naming neither
a private attribute nor a forbidden one; passing one around or building the name at run time is
refused (``operator.attrgetter(name)``, ``ag = operator.attrgetter``, ``map(getattr, ...)``)."""


def allows(module: str, allowed: Iterable[str] = ALLOWED_IMPORTS) -> bool:
    """True when `module` is an allowed entry or a submodule of one (and not a denied submodule)."""

    def under(entries: Iterable[str]) -> bool:
        return any(module == entry or module.startswith(entry + ".") for entry in entries)

    return under(allowed) and not under(DENIED_SUBMODULES)


def import_allowed(module: str, fromlist: Iterable[str], allowed: Iterable[str]) -> bool:
    """Whether ``from module import *fromlist`` (or ``import module``) stays inside the allowlist.

    ``from dspy import predict`` is allowed when ``dspy.predict`` is.
    """
    if allows(module, allowed):
        return True
    names = [name for name in fromlist if name != "*"]
    return bool(names) and all(allows(f"{module}.{name}", allowed) for name in names)


def _import_violation(node: ast.AST, allowed: frozenset[str]) -> str | None:
    if isinstance(node, ast.Import):
        bad = [alias.name for alias in node.names if not allows(alias.name, allowed)]
    elif isinstance(node, ast.ImportFrom):
        module = "." * node.level + (node.module or "")
        fromlist = [alias.name for alias in node.names]
        bad = [] if not node.level and import_allowed(module, fromlist, allowed) else [module]
    else:
        return None
    return f"line {node.lineno}: forbidden import: {', '.join(bad)}" if bad else None


def _call_violation(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
        return f"line {node.lineno}: forbidden call: name {node.id!r}"
    if isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRIBUTES:
        return f"line {node.lineno}: forbidden call: attribute {node.attr!r}"
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _format_violation(node)
    return None


def _bad_attribute(name: str) -> bool:
    return name.startswith("_") or name in FORBIDDEN_ATTRIBUTES


def _format_violation(node: ast.Constant) -> str | None:
    """A format string that reads attributes of its arguments (``"{0.__wrapped__}".format(tool)``)."""
    try:
        fields = [field for _, field, _, _ in string.Formatter().parse(node.value) if field]
    except ValueError:  # not a format string
        return None
    for field in fields:
        parts = re.split(r"[.\[\]]", field)[1:]
        bad = [part for part in parts if _bad_attribute(part.strip("'\""))]
        if bad:
            return f"line {node.lineno}: forbidden call: format field {field!r} reads attribute {bad[0]!r}"
    return None


def _helper_of(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """The reflection helper `node` names (``getattr``, ``operator.attrgetter``, an alias of one)."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    if isinstance(node, ast.Attribute) and node.attr in ("attrgetter", "methodcaller"):
        return node.attr
    return None


def _helper_aliases(tree: ast.Module) -> dict[str, str]:
    """Names bound to reflection helpers: the builtins, and ``from operator import attrgetter as ag``."""
    aliases = {name: name for name in REFLECTION_HELPERS}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name in REFLECTION_HELPERS:
                    aliases[alias.asname or alias.name] = alias.name
    return aliases


def _reflection_violations(tree: ast.Module) -> list[str]:
    """Reflection helpers used other than by a direct call with literal, harmless names."""
    aliases, called, violations = _helper_aliases(tree), set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (helper := _helper_of(node.func, aliases)):
            called.add(id(node.func))
            positions = REFLECTION_HELPERS[helper]
            names = [arg for i, arg in enumerate(node.args) if positions is None or i in positions]
            starred = [arg for arg in node.args if isinstance(arg, ast.Starred) and arg not in names]
            for arg in names + starred:
                if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                    violations.append(f"line {node.lineno}: forbidden call: {helper}() with a computed name")
                elif any(_bad_attribute(part) for part in arg.value.split(".")):
                    violations.append(f"line {node.lineno}: forbidden call: {helper}(..., {arg.value!r})")
    for node in ast.walk(tree):
        if (helper := _helper_of(node, aliases)) and id(node) not in called:
            violations.append(f"line {node.lineno}: forbidden call: {helper} used but not called directly")
    return violations


def check_imports(source: str, allowed: Iterable[str] = ALLOWED_IMPORTS) -> list[str]:
    """Every violation in `source` as "line N: forbidden import|forbidden call: detail"; [] when clean.

    A source that does not parse yields one violation naming the syntax error.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        return [f"line {error.lineno}: syntax error: {error.msg}"]
    allowed = frozenset(allowed)
    violations = []
    for node in ast.walk(tree):
        found = _import_violation(node, allowed) or _call_violation(node)
        if found:
            violations.append(found)
    return violations + _reflection_violations(tree)
