"""The dependency direction (whale_cli > optimizers | domains | harness_programs > whale_dspy, and
optimizers' roles), checked by import-linter's contracts in pyproject.toml, and every package free
of import circles."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept():
    # Beside this interpreter first: `.venv/bin/python -m pytest` does not put .venv/bin on PATH.
    beside = Path(sys.executable).parent / "lint-imports"
    lint_imports = str(beside) if beside.exists() else shutil.which("lint-imports")
    if lint_imports is None:
        pytest.fail("lint-imports is missing: install the dev extra (import-linter)")
    result = subprocess.run([lint_imports], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


PACKAGES = ("whale_dspy", "optimizers", "domains", "harness_programs", "whale_cli")


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_imports_itself_in_a_circle(package):
    """No module of a package reaches itself through imports, lazy and TYPE_CHECKING ones included.
    (import-linter's `acyclic_siblings` judges sibling packages as wholes instead: it would refuse the
    sandbox's session below the harness beside its evaluators above it, which is no circle.)"""
    graph = grimp.build_graph(package)
    imports = nx.DiGraph()
    for module in graph.modules:
        imports.add_node(module)
        imports.add_edges_from(
            (module, imported) for imported in graph.find_modules_directly_imported_by(module)
        )
    circles = [sorted(modules) for modules in nx.strongly_connected_components(imports) if len(modules) > 1]
    described = [
        f"{importer} -> {imported} (line {detail['line_number']})"
        for circle in circles
        for importer, imported in imports.subgraph(circle).edges
        for detail in graph.get_import_details(importer=importer, imported=imported)
    ]
    assert not circles, f"import circles in {package}:\n" + "\n".join(described)


def test_bench_scripts_reach_the_optimizers_through_their_packages_public_names():
    """bench/ holds scripts, not a package, so import-linter cannot hold it to the CLI's contract:
    this reads their imports instead (a module below optimizers.engine, .harness, .weights or .study
    is internal and may move)."""
    import ast

    internal = []
    for script in sorted((ROOT / "bench").glob("*.py")):
        for node in ast.walk(ast.parse(script.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            internal += [
                f"{script.name}: {name}"
                for name in names
                if name.count(".") >= 2 and name.startswith("optimizers.")
            ]
    assert not internal, "bench scripts import internal modules:\n" + "\n".join(internal)
