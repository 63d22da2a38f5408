"""The house's shape: folders small enough to read, and packages that import one way only.

A folder of more than 16 modules has stopped saying what a file is for; a cycle of imports
(lazy ones included) means two modules cannot be read, tested or loaded apart.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("paged",)
MAX_PER_FOLDER = 16
MAX_AT_TOP = {"paged/engine": 10, "paged/viz": 8}


def module_name(path: Path, root: Path) -> str:
    """``paged/engine/core/request.py`` -> ``paged.engine.core.request``; a package's ``__init__`` is the
    package itself."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    return {module_name(p, root): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}


def _known(name: str, mods: dict[str, Path]) -> str | None:
    """The module ``name`` reaches among ``mods``: itself, else its nearest package that is one."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """The modules among ``mods`` that ``path`` imports anywhere, a function's lazy import too.
    ``from pkg import mod`` imports ``pkg.mod``; ``from pkg import obj`` imports ``pkg``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str | None] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found |= {_known(alias.name, mods) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: package.count(".") + 2 - node.level]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in mods else _known(base, mods))
    return {m for m in found if m is not None and m != name}


def import_graph(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports."""
    mods = modules(root, packages)
    return {name: imports_of(name, path, mods) for name, path in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def folders() -> list[Path]:
    return sorted({p.parent for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")})


@pytest.mark.parametrize("folder", folders(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_folder_holds_more_than_sixteen_modules(folder: Path) -> None:
    count = len(list(folder.glob("*.py")))
    assert count <= MAX_PER_FOLDER, f"{folder.relative_to(ROOT)} holds {count} .py files"


@pytest.mark.parametrize("package", sorted(MAX_AT_TOP))
def test_top_of_a_package_holds_only_its_entry_points(package: str) -> None:
    count = len(list((ROOT / package).glob("*.py")))
    assert count <= MAX_AT_TOP[package], f"{package}/ holds {count} .py files at its top"


def test_no_import_cycle_between_modules() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_check_sees_lazy_relative_and_from_package_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pkg.sub import thing\n")
    (pkg / "sub" / "__init__.py").write_text("thing = 1\n")
    (pkg / "sub" / "a.py").write_text("def f():\n    from . import b\n")
    (pkg / "sub" / "b.py").write_text("import os\nfrom pkg import c\n")
    (pkg / "c.py").write_text("from .sub import a\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert graph == {
        "pkg": {"pkg.sub"},
        "pkg.sub": set(),
        "pkg.sub.a": {"pkg.sub.b"},
        "pkg.sub.b": {"pkg.c"},
        "pkg.c": {"pkg.sub.a"},
    }
    assert cycles(graph) == [["pkg.c", "pkg.sub.a", "pkg.sub.b"]]
