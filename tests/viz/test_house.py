"""House rules of the layout, read from the source with ``ast`` (nothing is imported).

Only the Streamlit pages (viz/app/) import Streamlit, so everything else runs in a test, a
script or the exporter without it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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
        for folder in ("viz", "engine", "kernels")
        for p in sorted((ROOT / folder).rglob("*.py"))
        if not p.is_relative_to(ROOT / "viz" / "app")
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
