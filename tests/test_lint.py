"""The whole tree is ruff-clean, and the package keeps its import contract: the floors and independences of
``[tool.importlinter]`` in pyproject.toml (``lint-imports``) and no import cycle between any two modules."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing() -> None:
    ruff = shutil.which("ruff")
    command = [ruff] if ruff else [sys.executable, "-m", "ruff"]
    done = subprocess.run([*command, "check", str(ROOT)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_import_contract_holds() -> None:
    lint = shutil.which("lint-imports")
    command = [lint] if lint else [sys.executable, "-c", "from importlinter.cli import lint_imports_command as c; c()"]
    done = subprocess.run([*command, "--no-cache", "--no-logo"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def import_cycles(package: str = "coursekit") -> list[list[str]]:
    """Groups of modules of ``package`` that import one another (strongly connected components of its import
    graph, tests left out), as Python runs the imports: function-level ones count, ``if TYPE_CHECKING:`` ones do
    not, and importing ``a.b.c`` first runs ``a/b/__init__.py`` (unless the importer is inside ``a.b``). Each
    group is given as its imports, ``"importer -> imported"``."""
    import grimp

    graph = grimp.build_graph(package, exclude_type_checking_imports=True)
    modules = {m for m in graph.modules if not m.rsplit(".", 1)[-1].startswith(("test_", "conftest"))}
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for importer in modules:
        for imported in graph.find_modules_directly_imported_by(importer) & modules:
            edges[importer].add(imported)
            parts = imported.split(".")
            for ancestor in (".".join(parts[:i]) for i in range(1, len(parts))):
                if ancestor in modules and not (importer == ancestor or importer.startswith(ancestor + ".")):
                    edges[importer].add(ancestor)
        edges[importer].discard(importer)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan; the package graph is a few hundred modules deep at most
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in sorted(edges[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(sorted(f"{a} -> {b}" for a in group for b in edges[a] if b in group))

    for module in sorted(modules):
        if module not in index:
            visit(module)
    return sorted(groups)


def test_no_import_cycles() -> None:
    import grimp

    graph = grimp.build_graph("coursekit", exclude_type_checking_imports=True)
    facade_users = sorted(m for m in graph.find_modules_that_directly_import("coursekit")
                          if not m.rsplit(".", 1)[-1].startswith("test_"))
    assert not facade_users, f"the package's lazy facade (coursekit/__init__.py) imported from inside: {facade_users}"
    cycles = import_cycles()
    described = "\n".join(f"cycle {i + 1}:\n  " + "\n  ".join(imports) for i, imports in enumerate(cycles))
    assert not cycles, f"{len(cycles)} import cycle(s), function-level imports included:\n{described}"
