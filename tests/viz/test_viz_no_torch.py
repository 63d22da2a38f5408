"""The viewer must never load torch: it opens in seconds and a live run happens in a child."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_viz_modules_import_without_torch():
    """Every module of the package, found by pkgutil (a new one is covered without a list)."""
    code = (
        "import importlib, json, pkgutil, sys, paged.viz\n"
        "names = [m.name for m in pkgutil.walk_packages(paged.viz.__path__, 'paged.viz.')\n"
        "         if not m.name.endswith('.__main__')]\n"
        "for m in names: importlib.import_module(m)\n"
        "heavy = [m for m in ('torch', 'triton', 'transformers') if m in sys.modules]\n"
        "print(json.dumps({'imported': names, 'heavy': heavy}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    on_disk = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in (ROOT / "paged" / "viz").rglob("*.py")
        if p.stem != "__main__"
    } - {"paged.viz"}
    assert set(result["imported"]) == on_disk
    assert result["heavy"] == [], f"viz imported {result['heavy']}"


def test_the_app_page_itself_does_not_load_torch():
    """Run the lesson page once (AppTest, in a fresh interpreter) and look at sys.modules."""
    code = (
        "import sys\n"
        "from streamlit.testing.v1 import AppTest\n"
        "at = AppTest.from_file('app.py', default_timeout=120); at.run()\n"
        "assert not at.exception, at.exception\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"
