"""House rules of the layout, read from the source with ``ast`` (nothing is imported).

Only the Streamlit pages (paged/viz/app/) import Streamlit, so everything else runs in a test, a
script or the exporter without it. And a reader who opens app.py reaches the paper's subject,
the engine's block tables, by following at most three imports at the top of files.
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCK_TABLES = "paged.engine.core.allocators"  # where PagedAllocator keeps its block tables


def streamlit_imports(path: Path) -> list[int]:
    """Lines of ``path`` that import Streamlit anywhere in the file: at the top, inside a
    function (a lazy import), or by name through ``importlib.import_module``/``__import__``."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] if node.level == 0 else []
        elif isinstance(node, ast.Call) and _called(node) in ("import_module", "__import__"):
            names = [a.value for a in node.args[:1] if isinstance(a, ast.Constant)]
        else:
            continue
        if any(isinstance(n, str) and n.split(".")[0] == "streamlit" for n in names):
            lines.append(node.lineno)
    return lines


def _called(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def test_only_the_app_pages_import_streamlit():
    outside = [
        p
        for p in sorted((ROOT / "paged").rglob("*.py"))
        if not p.is_relative_to(ROOT / "paged" / "viz" / "app")
    ]
    assert len(outside) > 50  # the walk sees the packages, not an empty folder
    found = {str(p.relative_to(ROOT)): streamlit_imports(p) for p in outside}
    assert {p: lines for p, lines in found.items() if lines} == {}


def test_the_streamlit_check_sees_top_lazy_and_named_imports(tmp_path):
    src = tmp_path / "m.py"
    src.write_text(
        "import streamlit as st\n"
        "def f():\n"
        "    from streamlit.components import v2\n"
        "    import importlib\n"
        "    importlib.import_module('streamlit')\n"
        "import streamlitish\n"
    )
    assert streamlit_imports(src) == [1, 3, 5]


def module_file(name: str, root: Path = ROOT) -> Path | None:
    """The file under ``root`` that module ``name`` is, or None for a library module."""
    base = root.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def top_imports(path: Path, root: Path = ROOT) -> set[str]:
    """Repository modules that ``path`` imports in its module body (not in a function, not
    under ``if TYPE_CHECKING``): ``from pkg import mod`` counts ``pkg.mod`` when that is a
    module."""
    out = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return {m for m in out if module_file(m, root) is not None}


def import_distance(start: Path, target: str, root: Path = ROOT) -> int | None:
    """The fewest top-of-file imports from ``start`` to module ``target``; None: unreachable."""
    seen = {str(start): 0}
    queue = deque([(start, 0)])
    while queue:
        path, hops = queue.popleft()
        for name in top_imports(path, root):
            if name == target:
                return hops + 1
            nxt = module_file(name, root)
            if nxt is not None and str(nxt) not in seen:
                seen[str(nxt)] = hops + 1
                queue.append((nxt, hops + 1))
    return None


def test_the_block_tables_are_at_most_three_imports_from_app_py():
    allocators = module_file(BLOCK_TABLES)
    assert allocators is not None
    tree = ast.parse(allocators.read_text(encoding="utf-8"))
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    assert "PagedAllocator" in classes
    distance = import_distance(ROOT / "app.py", BLOCK_TABLES)
    assert distance is not None and distance <= 3, distance


def test_import_distance_follows_only_top_of_file_imports(tmp_path):
    pkg = tmp_path / "pk"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pk import b\n")
    (pkg / "b.py").write_text("def f():\n    import pk.c\n")
    (pkg / "c.py").write_text("")
    assert import_distance(pkg / "a.py", "pk.b", tmp_path) == 1
    assert import_distance(pkg / "a.py", "pk.c", tmp_path) is None  # only inside a function


def kind_tests(path: Path) -> list[int]:
    """Lines of ``path`` that tell events apart the second way: comparing a ``kind`` (``ev.kind
    == ...``, ``ev.kind in (...)``) or an ``isinstance`` against an event type (``E.Finished``,
    the KV-event wire's ``InStored``). Readers select with ``E.of_kind`` or match a class."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Attribute) and s.attr == "kind" for s in sides):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and _called(node) == "isinstance" and len(node.args) == 2:
            kinds = node.args[1]
            named = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
            if any(_event_type(n) for n in named):
                lines.append(node.lineno)
    return sorted(lines)


def _event_type(node: ast.expr) -> bool:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return node.value.id == "E"
    return isinstance(node, ast.Name) and node.id.startswith("In") and node.id[2:3].isupper()


def test_readers_select_events_by_type_never_by_kind_string():
    files = sorted((ROOT / "paged").rglob("*.py"))
    assert len(files) > 50
    found = {str(p.relative_to(ROOT)): kind_tests(p) for p in files}
    assert {p: lines for p, lines in found.items() if lines} == {}


def test_the_kind_check_sees_compares_and_isinstance_of_event_types(tmp_path):
    src = tmp_path / "m.py"
    src.write_text(
        "if ev.kind == 'finished': pass\n"
        "x = [e for e in evs if isinstance(e, (E.SwappedOut, E.SwappedIn))]\n"
        "y = e.kind in ('a', 'b')\n"
        "z = isinstance(ev, InStored)\n"
        "ok = isinstance(ev, dict) or ev.kinds == 1\n"
    )
    assert kind_tests(src) == [1, 2, 3, 4]
