"""The part of a module a class needs, as source: what a user's program becomes a harness from.

Top-level statements are kept when a name the class uses (transitively) is bound
by them: imports, signatures, helper functions, constants. Everything else in
the module (data loading, scripts, other programs) stays out of the harness.
"""

from __future__ import annotations

import ast
import builtins
import inspect
from types import ModuleType

from whale_dspy.errors import ConfigError


def module_of(cls: type) -> ModuleType:
    """The module that defines `cls`, when its source can be read; ConfigError saying what to do."""
    module = inspect.getmodule(cls)
    if cls.__qualname__ != cls.__name__ or module is None:
        raise ConfigError(f"{cls.__qualname__} must be a top-level class of a Python module file")
    try:
        inspect.getsource(module)
    except (OSError, TypeError) as error:
        raise ConfigError(
            f"cannot find the source of {cls.__name__} (defined in a REPL, a notebook cell, or built "
            "dynamically?): define it in a .py file and import it from there"
        ) from error
    return module


def source_needed_by(module: ModuleType, roots: set[str]) -> str:
    """The statements of `module` that the top-level names `roots` need, in their order: its docstring,
    the imports they use (plus `import dspy`), and their definitions."""
    module_code = inspect.getsource(module)
    tree = ast.parse(module_code)
    wanted = _needed_statements(tree, roots)
    lines = module_code.splitlines()
    imports = [node for node in wanted if isinstance(node, ast.Import | ast.ImportFrom)]
    body = [node for node in wanted if node not in imports]
    docstring = [node for node in body[:1] if _is_docstring(node)]

    def text(nodes: list[ast.stmt], sep: str) -> str:
        return sep.join("\n".join(lines[_first_line(node) - 1 : node.end_lineno]) for node in nodes)

    import_text = text(imports, "\n")
    if not any("dspy" in _binds(node) for node in imports):  # generated code may need it
        import_text = f"{import_text}\nimport dspy".strip()
    parts = [text(docstring, ""), import_text, text(body[len(docstring) :], "\n\n\n")]
    return "\n\n\n".join(part for part in parts if part)


def _needed_statements(tree: ast.Module, roots: set[str]) -> list[ast.stmt]:
    """Top-level statements binding a name the roots use, transitively; `from __future__` always."""
    binders: dict[str, list[ast.stmt]] = {}
    for node in tree.body:
        for name in _binds(node):
            binders.setdefault(name, []).append(node)
    chosen: set[int] = set()
    pending = list(roots)
    while pending:
        for node in binders.get(pending.pop(), []):
            if id(node) not in chosen:
                chosen.add(id(node))
                pending.extend(_uses(node))
    docstring = tree.body[:1] if tree.body and _is_docstring(tree.body[0]) else []
    return [
        node
        for node in tree.body
        if id(node) in chosen
        or node in docstring
        or (isinstance(node, ast.ImportFrom) and node.module == "__future__")
    ]


def _first_line(node: ast.stmt) -> int:
    """Where a statement's text starts: its first decorator, if it has any."""
    return min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])


def _binds(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.Import | ast.ImportFrom):
        return {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return {
        name.id
        for target in targets
        if target is not None
        for name in ast.walk(target)
        if isinstance(name, ast.Name)
    }


def _uses(node: ast.stmt) -> set[str]:
    return {name.id for name in ast.walk(node) if isinstance(name, ast.Name)} - set(dir(builtins))


def _is_docstring(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )
